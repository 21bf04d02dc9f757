"""The ``rescorer`` entry point: the click group and the commands registered on it.

The commands live in one module per group (:mod:`~rescorer.cli.evaluation`,
:mod:`~rescorer.cli.rescoring`, :mod:`~rescorer.cli.models`, :mod:`~rescorer.cli.keyboard`, and
the context files' :mod:`~rescorer.cli.context`, the model
families' :mod:`~rescorer.cli.fnlm`, :mod:`~rescorer.cli.lbl`, :mod:`~rescorer.cli.cue`);
their shared options and error handling are in :mod:`rescorer.cli.options`. :data:`COMMANDS`
names each command's module; a module is imported when its command runs (``rescorer wer``
imports only :mod:`~rescorer.cli.evaluation`'s), all of them for ``--help``. Nothing imports
this module.

Bad input data gets one line naming the file and line, and exit status 2; bad options get click's
usage error (also status 2). Progress bars go to stderr and ``--quiet`` silences them.
``--threads`` and ``$RESCORER_MALLOC`` set the process's threads and allocator
(:mod:`rescorer.core.runtime`); they take effect when a model is loaded.
"""

from __future__ import annotations

import importlib
import logging
import os

import click
from click.core import ParameterSource

from rescorer.core import bulk, runtime

# Command name -> "module:attribute" of its click command, imported on first use.
COMMANDS: dict[str, str] = {
    "wer": "rescorer.cli.evaluation:wer",
    "score": "rescorer.cli.rescoring:score",
    "tune": "rescorer.cli.rescoring:tune_cmd",
    "rescore": "rescorer.cli.rescoring:rescore",
    "convert": "rescorer.cli.rescoring:convert",
    "merge": "rescorer.cli.rescoring:merge",
    "context": "rescorer.cli.context:context",
    "corpus": "rescorer.cli.corpus:corpus",
    "tokenizer": "rescorer.cli.tokenizer:tokenizer",
    "ppl": "rescorer.cli.models:ppl",
    "ngram": "rescorer.cli.models:ngram",
    "train": "rescorer.cli.models:train_cmd",
    "classify": "rescorer.cli.models:classify",
    "inspect": "rescorer.cli.models:inspect_cmd",
    "export": "rescorer.cli.models:export_cmd",
    "predict": "rescorer.cli.keyboard:predict_cmd",
    "keyboard-eval": "rescorer.cli.keyboard:keyboard_eval",
    "keyboard-compare": "rescorer.cli.keyboard:keyboard_compare",
    "fnlm-train": "rescorer.cli.fnlm:fnlm_train",
    "fnlm-eval": "rescorer.cli.fnlm:fnlm_eval",
    "mix-weights": "rescorer.cli.fnlm:mix_weights",
    "lbl-train": "rescorer.cli.lbl:lbl_train",
    "lbl-infer": "rescorer.cli.lbl:lbl_infer",
    "lbl-similar": "rescorer.cli.lbl:lbl_similar",
    "lbl-sample": "rescorer.cli.lbl:lbl_sample",
    "lbl-export": "rescorer.cli.lbl:lbl_export",
    "cue-vectors": "rescorer.cli.cue:cue_vectors",
    "cue-export": "rescorer.cli.cue:cue_export",
}


class LazyGroup(click.Group):
    """A click group whose commands are imported when they are looked up (see COMMANDS)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None or cmd_name not in COMMANDS:
            return command
        module, _, attribute = COMMANDS[cmd_name].partition(":")
        with bulk.paused_gc():  # thousands of objects that live as long as the process
            command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command) or command.name != cmd_name:
            raise RuntimeError(f"COMMANDS[{cmd_name!r}] names {command!r}, not that command")
        self.add_command(command)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rescorer", prog_name="rescorer")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars or info messages.")
@click.option(
    "--threads",
    default="auto",
    show_default=True,
    envvar=runtime.THREADS_ENV,
    metavar="auto|default|N",
    help="CPU threads for torch models and ONNX Runtime sessions: auto takes $OMP_NUM_THREADS "
    "when set, else the cores idle now (cores less the load average), default leaves the "
    f"libraries' own choice (also ${runtime.THREADS_ENV}). Not given: auto, but 1 for tune "
    "--method risk (faster).",
)
def main(verbose: int, quiet: bool, threads: str) -> None:
    """N-best rescoring with n-gram and neural language models."""
    level = logging.WARNING if quiet or verbose == 0 else logging.INFO
    if verbose >= 2:
        level = logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", force=True)
    try:
        count = runtime.parse_threads(threads)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--threads") from None
    keep = os.environ.get(runtime.ALLOCATOR_ENV, "keep") != "system"
    source = click.get_current_context().get_parameter_source("threads")
    given = source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    runtime.configure(
        runtime.RuntimeOptions(
            threads=count, keep_freed_memory=keep, threads_given=given, quiet=quiet
        )
    )


def run() -> None:
    """The ``rescorer`` program (and ``python -m rescorer``): :func:`main` in a process of its
    own, which ends with the command, so bulk steps may freeze what they made
    (:mod:`rescorer.core.bulk`). Tests call :func:`main` in their long-lived process and keep
    the collector's default."""
    bulk.freeze_after_bulk()
    main()


if __name__ == "__main__":  # pragma: no cover
    run()
