"""No output of a run may be one of its inputs (issue 51): every command, every output option.

The property is checked over the commands themselves, not a list: for each command, each option
whose type is an output path is pointed at each input path option's file (the same path, a
symbolic link to it, and a hard link to it); the command must refuse in one line with exit
status 2, and the input must be byte-identical afterwards.
"""

from __future__ import annotations

import os
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from rescorer.cli.main import main
from rescorer.cli.options import (
    InputFolder,
    InputOrKeyword,
    InputPath,
    LMSpecType,
    OutputPath,
    ScoreDirType,
    outputs_and_inputs,
)
from tests.rescorer.cli.commands import leaf_commands


def _pairs() -> list[tuple[str, str, str]]:
    """(command, output option, input option) for every output/input pair of every command."""
    pairs = []
    for name, command in leaf_commands():
        outs, ins = outputs_and_inputs(command)
        for out in outs:
            for inp in ins:
                pairs.append((name, out.opts[0], inp.opts[0] if inp.opts else inp.name))
    return pairs


PAIRS = _pairs()


def test_the_property_covers_the_commands_of_the_issue() -> None:
    named = {(c, o, i) for c, o, i in PAIRS}
    for case in [
        ("wer", "--per-utt", "--ref"), ("wer", "--align", "--hyp"), ("tune", "--out", "--nbest"),
        ("score", "--out", "--nbest"), ("score", "--out", "--context"),
        ("ngram build", "--out", "--text"), ("predict", "--out", "--input"),
        ("keyboard-eval", "--per-sentence", "--text"), ("keyboard-eval", "--report", "--text"),
        ("context build", "--out", "--nbest"), ("context build", "--out", "--from"),
        ("tokenizer train", "--out", "--text"), ("convert", "--out", "--nbest"),
    ]:  # fmt: skip
        assert case in named, case
    assert len(PAIRS) >= 40
    # every path a command writes is typed as one (what the check and this property rely on)
    for name, command in leaf_commands():
        for param in command.params:
            if param.name and (param.name.startswith("out") or param.name.endswith("_out")):
                assert isinstance(param.type, OutputPath), (name, param.name)


def _filler(param: click.Parameter, tmp: Path) -> str:
    """A value a required parameter accepts (parsing only: the check runs before any work)."""
    kind = param.type
    dummy = tmp / f"dummy_{param.name}"
    if isinstance(kind, InputFolder) or (isinstance(kind, InputPath) and kind.folder_ok):
        dummy.mkdir(exist_ok=True)
        return str(dummy)
    if isinstance(kind, (InputPath, InputOrKeyword)):
        dummy.write_text("x\n")
        return str(dummy)
    if isinstance(kind, LMSpecType):
        dummy.write_text("x\n")
        return f"kenlm:{dummy}"
    if isinstance(kind, ScoreDirType):
        dummy.mkdir(exist_ok=True)
        return f"s={dummy}"
    if isinstance(kind, (OutputPath, click.Path)):
        return str(tmp / f"out_{param.name}")
    if isinstance(kind, click.Choice):
        return str(kind.choices[0])
    if isinstance(kind, (click.IntRange, click.FloatRange)):
        return str(kind.min if kind.min is not None else 1)
    if isinstance(kind, (type(click.INT), type(click.FLOAT))):
        return "1"
    return "x"


def _args(cmd: click.Command, given: dict[str, str], tmp: Path) -> list[str]:
    """Command-line arguments: ``given`` (option -> value, kept even when empty) and every other
    required parameter filled in; arguments (positional) in their order."""
    args: list[str] = []
    for param in cmd.params:
        key = param.opts[0] if param.opts else param.name
        if isinstance(param, click.Argument):
            if key in given:
                args.append(given[key])
            elif param.required:
                args.append(_filler(param, tmp))
        elif key in given:
            args += [key, given[key]]
        elif param.required:
            args += [key, _filler(param, tmp)]
    return args


@pytest.mark.bad_input("silent")
@pytest.mark.parametrize("how", ["same", "symlink", "hardlink"])
@pytest.mark.parametrize(("command", "out_opt", "in_opt"), PAIRS)
def test_an_output_onto_an_input_is_refused(
    tmp_path: Path, command: str, out_opt: str, in_opt: str, how: str
) -> None:
    _, cmd = next(c for c in leaf_commands() if c[0] == command)
    param = next(p for p in cmd.params if (p.opts[0] if p.opts else p.name) == in_opt)
    is_folder = isinstance(param.type, (InputFolder, ScoreDirType))
    source = tmp_path / "input"
    if is_folder:
        source.mkdir()
        (source / "f").write_text("x\n")
    else:
        source.write_text("precious\n")
    target = source
    if how == "symlink":
        target = tmp_path / "link"
        target.symlink_to(source)
    elif how == "hardlink":
        if is_folder:
            pytest.skip("folders have no hard links")
        target = tmp_path / "hard"
        os.link(source, target)
    if isinstance(param.type, LMSpecType):
        value = f"kenlm:{source}"
    elif isinstance(param.type, ScoreDirType):
        value = f"s={source}"
    else:
        value = str(source)
    args = [*command.split(), *_args(cmd, {in_opt: value, out_opt: str(target)}, tmp_path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, (args, result.output)
    assert result.output.count("\n") == 1 and "Usage:" not in result.output, result.output
    out_param = next(p for p in cmd.params if p.opts and p.opts[0] == out_opt)
    out_is_folder = isinstance(out_param.type, OutputPath) and out_param.type.folder
    if out_is_folder == is_folder:  # else refused as the wrong kind of path, also one line
        assert "is also the input" in result.output, (args, result.output)
    if not is_folder:
        assert source.read_text() == "precious\n"


OUTPUTS = sorted(
    {(name, p.opts[0]) for name, c in leaf_commands() for p in outputs_and_inputs(c)[0] if p.opts}
)


@pytest.mark.bad_input("silent")
@pytest.mark.parametrize(("command", "out_opt"), OUTPUTS)
def test_an_empty_output_path_is_refused(tmp_path: Path, command: str, out_opt: str) -> None:
    """issue 51: `rescore --out ""` was taken as the current folder."""
    _, cmd = next(c for c in leaf_commands() if c[0] == command)
    args = [*command.split(), *_args(cmd, {out_opt: ""}, tmp_path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, (args, result.output)
    assert f"{out_opt}: expected a path, got an empty string" in result.output, result.output
