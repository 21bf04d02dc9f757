"""Shared pieces of the command modules: error handling, parameter types, option groups, loaders.

Data errors (:class:`~rescorer.core.errors.InputError` and ``OutputError``, a ``ValueError`` from
the library, an ``OSError`` on a file) become one line naming the file and line, exit status 2
(:func:`handle_errors`); click's usage block is kept for wrong command-line usage (unknown
options, bad option values, missing files named on the command line). Output paths are checked
when the options are parsed (:class:`OutputPath`), before any input is read. Command modules
import this module; it imports none of them.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from rescorer.core.constants import NBEST_FORMATS, OOV_SUFFIX, RANK_DEFINITION, RANK_FEATURE
from rescorer.core.errors import (
    FileError,
    InputError,
    KenLMToolError,
    OutputError,
    check_same_ids,
)
from rescorer.core.io import check_input_file, read_lines
from rescorer.core.output import check_output_dir, check_output_file
from rescorer.lms import LOADERS, parse_spec
from rescorer.lms.contract import LMSpec
from rescorer.normalize import (
    NO_NOISE,
    PRESETS,
    STEPS,
    NoiseWords,
    Normalizer,
    get_normalizer,
    read_noise_words,
)
from rescorer.refs import REF_FORMATS, match_references, read_references, read_utt2spk
from rescorer.text import CASE_MODES

if TYPE_CHECKING:  # what only some commands use is imported there (start-up time of `wer`)
    from rescorer.features import LMFeatureReport
    from rescorer.formats.source import NBestSource
    from rescorer.formats.srilm import ScoreDir
    from rescorer.nbest import NBest
    from rescorer.wer import WerReport

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


class InputFailure(click.ClickException):
    """Bad input data: one line, exit status 2."""

    exit_code = 2


def _is_input(param: click.Parameter) -> bool:
    """A parameter naming a path the command reads (a file, a folder, a model spec's path, a
    score folder)."""
    return isinstance(
        param.type, (InputPath, InputFolder, LMSpecType, ScoreDirType, InputOrKeyword)
    )


def outputs_and_inputs(
    command: click.Command,
) -> tuple[list[click.Parameter], list[click.Parameter]]:
    """The parameters of ``command`` that name paths it writes, and those naming paths it
    reads."""
    params = command.params
    outputs = [p for p in params if isinstance(p.type, OutputPath)]
    return outputs, [p for p in params if _is_input(p)]


def _paths(param: click.Parameter, value: Any) -> list[Path]:
    """The paths a parameter's value names (several for a repeatable option)."""
    values = value if isinstance(value, (tuple, list)) else (value,)
    if isinstance(param.type, ScoreDirType):  # ScoreDir values: their folders
        return [v.folder for v in values]
    out = []
    for v in values:
        if isinstance(v, LMSpec):
            out.append(v.path)
        elif isinstance(v, (str, Path)):
            out.append(Path(v))
    return out


def _same_file(a: Path, b: Path) -> bool:
    """``a`` and ``b`` are one file or folder (the same path, a symbolic or a hard link)."""
    try:
        return a.exists() and b.exists() and a.samefile(b)
    except OSError:
        return False


def check_outputs_are_not_inputs(ctx: click.Context) -> None:
    """InputFailure (one line, exit 2) when a path the command would write is one it reads: an
    output never overwrites an input of the same run."""
    outs, ins = outputs_and_inputs(ctx.command)
    for out_param in outs:
        for out in _paths(out_param, ctx.params.get(out_param.name or "")):
            for in_param in ins:
                for inp in _paths(in_param, ctx.params.get(in_param.name or "")):
                    if _same_file(out, inp):
                        raise InputFailure(
                            f"{out}: {out_param.opts[0]} is also the input {in_param.opts[0]} "
                            f"({inp}); an output never overwrites an input: write it elsewhere"
                        )


def handle_errors(fn: F) -> F:
    """Turn library errors into one-line CLI errors; refuse an output that is an input."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context(silent=True)
        if ctx is not None and ctx.command.callback is wrapper:
            check_outputs_are_not_inputs(ctx)
        try:
            return fn(*args, **kwargs)
        except FileError as err:
            raise InputFailure(str(err)) from None
        except KenLMToolError as err:
            raise click.ClickException(str(err)) from None
        except ValueError as err:  # the library's check of a value: data, not usage
            raise InputFailure(str(err)) from None
        except BrokenPipeError:
            # the reader of stdout closed it (`| head`): stop quietly, as a Unix tool does, with
            # nothing more written to the closed pipe (its buffer included)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise SystemExit(141) from None
        except OSError as err:
            where = f"{err.filename}: " if err.filename else ""
            raise InputFailure(f"{where}{err.strerror or err}") from None

    return wrapper  # type: ignore[return-value]


def quiet() -> bool:
    ctx = click.get_current_context()
    return bool(ctx.find_root().params.get("quiet"))


def progress_bars() -> bool:
    """Whether a command draws progress bars: not with ``-q``, not into a file or a pipe (a
    redirected log would fill with redrawn bars; the summary lines still come), and only in
    the first process of a torchrun group (``RANK`` 0)."""
    return not quiet() and sys.stderr.isatty() and os.environ.get("RANK", "0") == "0"


def show_epochs() -> None:
    """Training commands print a line per epoch (train loss, dev perplexity, tokens/s), and
    without a progress bar (into a file) a line a minute within an epoch (training.fit), at the
    default verbosity: the training loop's INFO records are let through unless --quiet."""
    training = logging.getLogger("rescorer.lm_models.training")
    # NOTSET with --quiet or -v/-vv: the root's level decides, as for every other logger
    louder = not quiet() and logging.getLogger().level > logging.INFO
    training.setLevel(logging.INFO if louder else logging.NOTSET)


# -- shared option types ------------------------------------------------------------------------


class LMSpecType(click.ParamType):
    """``[NAME=]KIND:PATH`` with an existing path."""

    name = "SPEC"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, LMSpec):
            return value
        try:
            spec = parse_spec(value)
        except ValueError as err:
            self.fail(str(err), param, ctx)
        if not spec.path.exists():
            raise InputFailure(f"{spec.path}: model file not found: expected an existing file")
        return spec


class CommaList(click.ParamType):
    """A comma-separated list of names."""

    name = "A,B,..."

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        items = tuple(v.strip() for v in str(value).split(",") if v.strip())
        if not items:
            self.fail(f"expected a comma-separated list of names, got {value!r}", param, ctx)
        return items


class NumberList(click.ParamType):
    """A comma-separated list of integers >= 0 (``kind=int``) or finite numbers > 0 (``float``)."""

    def __init__(self, kind: type[int] | type[float]) -> None:
        self.kind = kind
        self.name = "N,N,..." if kind is int else "X,Y,..."
        self._what = "integers >= 0" if kind is int else "numbers > 0"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        try:
            items = tuple(self.kind(v) for v in str(value).split(","))
        except ValueError:
            self.fail(f"expected comma-separated {self._what}, got {value!r}", param, ctx)
        if self.kind is int:
            valid = all(x >= 0 for x in items)
        else:
            valid = all(math.isfinite(x) and x > 0 for x in items)
        if not valid:
            self.fail(f"expected comma-separated {self._what}, got {value!r}", param, ctx)
        return items


FORMAT_CHOICE = click.Choice(["auto", *sorted(NBEST_FORMATS)])


class NormalizerType(click.ParamType):
    """A text normaliser spec (:mod:`rescorer.normalize`): none, a preset, or steps."""

    name = "SPEC"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, Normalizer):
            return value
        try:
            return get_normalizer(str(value))
        except ValueError as err:
            self.fail(str(err), param, ctx)


def normalize_option(
    fn: F | None = None, *, applies_to: str = "references and hypotheses alike before scoring"
) -> Any:
    """``--normalize SPEC``: the text normaliser applied to ``applies_to`` (as a decorator, or
    called with ``applies_to`` for a command whose text is not references and hypotheses)."""
    option = click.option(
        "--normalize",
        "normalizer",
        type=NormalizerType(),
        default="none",
        show_default=True,
        help=f"Normalise {applies_to}: none (raw text"
        + (", sclite parity)" if "references" in applies_to else ")")
        + f", a preset ({', '.join(PRESETS)}) or comma-separated steps of {', '.join(STEPS)} "
        "(e.g. lower,punct). docs/guide/rescoring.md and rescorer/normalize.py say what each does.",
    )
    return option if fn is None else option(fn)


def normalized_label(normalizer: Normalizer, noise: NoiseWords | None = None) -> str:
    """`` (normalize: NAME)`` after a result line (nothing for raw text), then
    `` (noise words: FILE)`` when noise words are deleted."""
    tag = "" if normalizer.is_identity else f" (normalize: {normalizer.name})"
    return tag + ("" if noise is None else noise.label())


def noise_words_option(fn: F) -> F:
    """``--noise-words FILE``: words deleted from references and hypotheses before scoring."""
    return click.option(
        "--noise-words",
        "noise_path",
        type=EXISTING_FILE,
        default=None,
        help="Words deleted from references and hypotheses before errors are counted, one per "
        "line (as SRILM's -noise-vocab: [noise], <unk>, ...), and from the distances between "
        "hypotheses of --objective posterior; matched exactly against the words after "
        "--normalize. Scoring only: the lists keep them for the LMs, the word count and the "
        "outputs.",
    )(fn)


def load_noise_words(path: Path | None) -> NoiseWords:
    """The noise words of ``--noise-words`` (none when not given)."""
    return NO_NOISE if path is None else read_noise_words(path)


class InputPath(click.ParamType):
    """An input the command reads: a file (or, with ``folder_ok=True``, a file or a folder).

    A missing path, a folder where a file is wanted, a device or a socket is one line naming
    the path and exit status 2 (:func:`rescorer.core.io.check_input_file`), not a usage block.
    """

    def __init__(self, folder_ok: bool = False) -> None:
        self.folder_ok = folder_ok
        self.name = "PATH" if folder_ok else "FILE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        path = Path(value)
        if self.folder_ok and path.is_dir():
            return path
        try:
            return check_input_file(path)
        except InputError as err:
            raise InputFailure(str(err)) from None


class InputFolder(click.ParamType):
    """An input folder the command reads (a checkpoint, a shard folder, a data folder): anything
    else is one line naming the path and exit status 2, not a usage block."""

    name = "DIR"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        path = Path(value)
        if path.is_dir():
            return path
        found = "a file" if path.exists() else "nothing"
        raise InputFailure(f"{path}: expected an existing folder, found {found} there")


class InputOrKeyword(click.ParamType):
    """A keyword (``first-pass``) or a path the command reads, kept as the string given; the
    path is an input for :func:`check_outputs_are_not_inputs`."""

    name = "PATH"

    def __init__(self, keyword: str) -> None:
        self.keyword = keyword
        self.name = f"{keyword}|PATH"


EXISTING = InputPath(folder_ok=True)
EXISTING_FILE = InputPath()
MODEL_DIR = InputFolder()


class OutputPath(click.ParamType):
    """A file (or, with ``folder=True``, a folder) the command writes, checked up front.

    A target that cannot be written (a directory where a file is wanted, a device, FIFO or
    socket, a read-only file, a path under a file, a folder without write permission) is one
    line naming the path and exit status 2 (:mod:`rescorer.core.output`), before any input
    is read.
    """

    def __init__(self, folder: bool | None = False) -> None:
        self.folder = folder  # None: a file or a folder, as the command decides later
        self.name = {True: "DIR", False: "FILE", None: "PATH"}[folder]

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            where = param.opts[0] if param is not None and param.opts else "the output"
            raise InputFailure(f"{where}: expected a path, got an empty string")
        path = Path(value)
        if self.folder is None:
            return path
        try:
            (check_output_dir if self.folder else check_output_file)(path)
        except OutputError as err:
            raise InputFailure(str(err)) from None
        return path


OUT_FILE = OutputPath()
"""A file the command writes (``--out``, ``--per-utt``, ...)."""
OUT_DIR = OutputPath(folder=True)
"""A folder of files the command writes as one set (``rescore --out``)."""
OUT_PATH = OutputPath(folder=None)
"""A file or a folder, as the command's other options decide (``convert --out``)."""
SEED = click.IntRange(0, 2**32 - 1)
"""A random seed: what numpy's and torch's generators take (0 .. 2**32 - 1), checked where it
is given so that the error names the option."""


class FiniteFloatRange(click.FloatRange):
    """A :class:`click.FloatRange` that refuses ``nan`` and infinities (``nan`` compares as
    inside any range, ``inf`` inside any range without a maximum)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"expected a finite number, got {value!r}", param, ctx)
        return number


POSITIVE = FiniteFloatRange(min=0, min_open=True)
"""A finite number > 0 (a learning rate, a temperature, a scale)."""

TEXT_FORMATS = ("plain", "kaldi", "trn")
"""Formats of a text to score: words only, Kaldi ``uttid words``, sclite trn."""

text_format_option = click.option(
    "--text-format",
    type=click.Choice(TEXT_FORMATS),
    default="plain",
    show_default=True,
    help="plain: words only; kaldi: 'uttid words'; trn: sclite.",
)
"""``--text-format`` of the commands that score a text (ppl, fnlm-eval, mix-weights)."""


def lm_case_option(help: str | None = None) -> Callable[[F], F]:  # noqa: A002 (click's name)
    """``--lm-case``: how words are mapped into the models' vocabularies."""
    return click.option(
        "--lm-case", type=click.Choice(CASE_MODES), default="auto", show_default=True, help=help
    )


def device_option(default: str | None = "cpu", help: str | None = None) -> Callable[[F], F]:  # noqa: A002
    """``--device`` of commands that run a torch model (shown when it has a default)."""
    return click.option("--device", default=default, show_default=default is not None, help=help)


def out_option(help: str, required: bool = False, name: str = "out_path") -> Callable[[F], F]:  # noqa: A002
    """``--out FILE``: where the command writes its result (atomically)."""
    return click.option("--out", name, type=OUT_FILE, required=required, default=None, help=help)


def read_text_sentences(path: Path, text_format: str) -> dict[str, tuple[str, ...]]:
    """The sentences of a text to score, by utterance id (plain text: by line number).

    Empty lines of a plain text are skipped; a text without a sentence is an input error.
    """
    if text_format == "plain":
        lines = read_lines(path)
        sentences = {str(n): tuple(line.split()) for n, line in lines if line.strip()}
    else:
        sentences = read_references(path, text_format)
    if not sentences:
        raise InputFailure(f"{path}: no sentences")
    return sentences


def max_nbest_option(fn: F) -> F:
    """``--max-nbest K``: only the first K hypotheses of each list are read (SRILM's
    ``-max-nbest``); part of :func:`nbest_options`, so every command that reads lists has it."""
    return click.option(
        "--max-nbest",
        "max_nbest",
        type=click.IntRange(min=1),
        default=None,
        metavar="K",
        help="Keep only the first K hypotheses of each list as it is read (SRILM's "
        "-max-nbest; --extra-scores folders still hold a line per hypothesis of the whole "
        "list). Default: every hypothesis.",
    )(fn)


def nbest_options(fn: F) -> F:
    fn = max_nbest_option(fn)
    fn = click.option(
        "--format",
        "fmt",
        type=FORMAT_CHOICE,
        default="auto",
        show_default=True,
        help="N-best format (detected from the path when auto).",
    )(fn)
    return click.option(
        "--nbest",
        "nbest_path",
        type=EXISTING,
        required=True,
        help="N-best lists: an ESPnet set folder, SRILM file/folder/list, Kaldi folder, "
        "JSON or JSONL file.",
    )(fn)


RANK_WHEN_UNSCORED = (
    "when the lists carry no score (HyPoradise files often hold none; --extra-scores count as "
    "scores)"
)
"""When ``score`` adds the feature ``rank`` by default (:func:`rank_option`)."""


def rank_option(when: str) -> Callable[[F], F]:
    """``--rank/--no-rank``: the lists' order as the feature ``rank`` (:class:`ListOrder`),
    added by default ``when`` (the command's rule, for its help)."""
    return click.option(
        "--rank/--no-rank",
        "rank",
        default=None,
        help=f"The lists' order as the feature {RANK_FEATURE!r} ({RANK_DEFINITION}, 0 for "
        f"each first hypothesis). Default: added {when}. --rank: always; --no-rank: never.",
    )


class ListOrder:
    """Whether the lists' order becomes the feature ``rank`` (:func:`rank_option`), decided on
    the first chunk of lists read and kept for the others, and that feature added to each.

    ``choice``: True (``--rank``), False (``--no-rank``) or None: added when ``wanted`` (the
    weights' or ``--features``' names) holds it and the lists do not, or, when ``wanted`` is
    None (every feature there is), when the lists carry no score at all. A ``rank`` of the
    lists' own is used as it is. ``lm_specs``: the ``--lm`` models, whose feature names may not
    take it.
    """

    def __init__(
        self,
        choice: bool | None,
        wanted: Sequence[str] | None = None,
        lm_specs: Sequence[LMSpec] = (),
        lm_oov: bool = False,
    ) -> None:
        self.choice = choice
        self.wanted = None if wanted is None else tuple(wanted)
        self.lm_names = {s.name for s in lm_specs} | (
            {s.name + OOV_SUFFIX for s in lm_specs} if lm_oov else set()
        )
        self.added: bool | None = None  # None until the first chunk

    def _decide(self, chunk: NBest) -> bool:
        have = chunk.score_names()
        unscored = False
        if self.choice is False:
            return False
        if self.choice is None:
            if RANK_FEATURE in have:
                return False
            unscored = self.wanted is None and not have
            if not unscored and (self.wanted is None or RANK_FEATURE not in self.wanted):
                return False
        if RANK_FEATURE in self.lm_names:
            raise InputFailure(
                f"--lm {RANK_FEATURE}=...: {RANK_FEATURE!r} is the feature of the lists' order "
                "here; name the model otherwise, or give --no-rank"
            )
        if unscored and not quiet():
            from tqdm import tqdm  # a line of its own beside a model's progress bar

            tqdm.write(
                f"the lists carry no score: their order is the feature {RANK_FEATURE!r} "
                f"({RANK_DEFINITION}); --no-rank leaves it out",
                file=sys.stderr,
            )
        return True

    def apply(self, chunk: NBest) -> NBest:
        """``chunk`` with the feature ``rank`` when it is added (before any reranking)."""
        from rescorer.features import add_rank_feature

        if self.added is None:
            self.added = self._decide(chunk)
        return add_rank_feature(chunk) if self.added else chunk


ALLOW_EXTRA_REFS_HELP = (
    "Ignore references whose ids have no hypotheses, with a warning counting them (without it "
    "only empty ones are ignored, and any other is an error naming the ids)."
)


def allow_extra_refs_option(fn: F) -> F:
    """``--allow-extra-refs``: references without hypotheses are dropped, not refused."""
    return click.option("--allow-extra-refs", is_flag=True, help=ALLOW_EXTRA_REFS_HELP)(fn)


class ScoreDirType(click.ParamType):
    """``NAME=DIR``: a folder of per-utterance score files (SRILM's score directories)."""

    name = "NAME=DIR"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from rescorer.formats.srilm import ScoreDir

        if isinstance(value, ScoreDir):
            return value
        try:
            spec = ScoreDir.parse(str(value))
        except ValueError as err:
            self.fail(str(err), param, ctx)
        if not spec.folder.is_dir():
            raise InputFailure(
                f"{spec.folder}: --extra-scores {spec.name}: expected a folder of score files"
            )
        return spec


def extra_scores_option(fn: F) -> F:
    """``--extra-scores NAME=DIR`` (repeatable): more features from SRILM score directories."""
    return click.option(
        "--extra-scores",
        "extra_scores",
        type=ScoreDirType(),
        multiple=True,
        help="More per-hypothesis features, as SRILM's score directories: DIR holds one file "
        "per utterance, named like the N-best files (ID, ID.gz, ID.score.gz, ...), with one "
        "number per line per hypothesis in list order; they become feature NAME. The numbers "
        "are taken as they are (no log10 or bytelog conversion: a linear feature, its tuned "
        "weight absorbs the base). Repeatable.",
    )(fn)


def check_feature_names(
    extra_scores: Sequence[ScoreDir], lm_specs: Sequence[LMSpec] = (), lm_oov: bool = False
) -> None:
    """Refuse (one line, exit 2) an --extra-scores name that an --lm feature also takes."""
    lm_names = {s.name: s for s in lm_specs}
    if lm_oov:
        lm_names.update({s.name + OOV_SUFFIX: s for s in lm_specs})
    for d in extra_scores:
        if d.name in lm_names:
            raise InputFailure(
                f"--extra-scores {d.name}={d.folder} and --lm {lm_names[d.name].name}=...: two "
                f"features named {d.name!r}; name one otherwise"
            )


def ref_options(required: bool) -> Callable[[F], F]:
    def deco(fn: F) -> F:
        fn = allow_extra_refs_option(fn)
        fn = click.option(
            "--ref-format",
            type=click.Choice(["auto", *REF_FORMATS]),
            default="auto",
            show_default=True,
            help="Reference format (auto: by name, *.trn, *.stm, a *.json/*.jsonl NeMo "
            "manifest, or a first line ending in '(id)' for trn, else Kaldi text; a file that "
            "looks like another format is refused). stm: only against a ctm --hyp (wer).",
        )(fn)
        return click.option(
            "--ref",
            "ref_path",
            type=EXISTING_FILE,
            required=required,
            help="References: sclite trn (id in parentheses), Kaldi 'uttid words' text, a NeMo "
            "manifest ('text'), or an sclite stm (wer, against a ctm --hyp). "
            "Without it, references embedded in the N-best file (json 'ref', jsonl 'ref', "
            "hyporadise 'output') are used; with it, --ref wins over them.",
        )(fn)

    return deco


def config_trainer_options(spec_kind: str) -> Callable[[F], F]:
    """CONFIG, --out, --data-dir, --seed, --device and --train-shards of the trainers that read
    a sectioned JSON config (fnlm-train, lbl-train); ``spec_kind`` names the --lm kind the
    checkpoint is for."""

    def deco(fn: F) -> F:
        fn = click.option(
            "--train-shards",
            type=MODEL_DIR,
            default=None,
            help="Train on this shard folder (`rescorer corpus shard`), streamed one shard at a "
            "time (under torchrun each process its own shards), instead of the config's "
            "training corpus; the config names its dev corpus (data.dev).",
        )(fn)
        fn = click.option("--device", default=None, help="Override the config's train.device.")(fn)
        fn = click.option(
            "--seed", type=SEED, default=None, help="Override the config's train.seed."
        )(fn)
        fn = click.option(
            "--data-dir",
            type=MODEL_DIR,
            default=None,
            help="Where the config's relative paths start (default: $RESCORER_DATA or "
            "../shared/data).",
        )(fn)
        fn = click.option(
            "--out",
            "out_dir",
            type=OUT_DIR,
            required=True,
            help=f"Checkpoint folder to write (the best epoch), usable as --lm {spec_kind}:OUT.",
        )(fn)
        return click.argument("config_path", metavar="CONFIG", type=EXISTING_FILE)(fn)

    return deco


def run_config_trainer(
    config_type: Any,
    train_fn: Callable[..., Any],
    config_path: Path,
    out_dir: Path,
    data_dir: Path | None,
    seed: int | None,
    device: str | None,
    train_shards: Path | None = None,
) -> None:
    """Load ``config_type`` from CONFIG, apply --seed/--device/--train-shards, train, report
    the best epoch."""
    from dataclasses import replace

    from rescorer.core.data import default_data_dir

    show_epochs()
    cfg = config_type.load(config_path)
    overrides = {k: v for k, v in (("seed", seed), ("device", device)) if v is not None}
    if overrides:
        cfg = replace(cfg, train=replace(cfg.train, **overrides))
    if train_shards is not None:
        try:
            cfg = cfg.with_train_shards(train_shards.resolve())  # here, not under --data-dir
        except ValueError as err:
            raise InputError(f"--train-shards: {err}", config_path) from None
    result = train_fn(cfg, data_dir or default_data_dir(), out_dir, progress=progress_bars())
    from rescorer.lm_models.distributed import close_world, end_process  # torch is loaded by now

    closed = close_world()  # under torchrun: every process leaves the group together
    click.echo(
        f"best dev perplexity {result.best_dev_ppl:.2f} at epoch {result.best_epoch} "
        f"({result.parameters:,} parameters, {result.seconds:.0f} s); checkpoint {out_dir}"
    )
    end_process(closed)


def lm_options(fn: F) -> F:
    fn = click.option(
        "--lm-oov/--no-lm-oov",
        "lm_oov",
        default=True,
        show_default=True,
        help="Add each LM's OOV word count as a feature NAME_oov beside its score.",
    )(fn)
    fn = lm_case_option(
        help="Case mapping of words into the LMs' vocabularies (auto: whichever finds more words)."
    )(fn)
    return click.option(
        "--lm",
        "lm_specs",
        type=LMSpecType(),
        multiple=True,
        help=f"Language model feature [NAME=]KIND:PATH, kinds: {', '.join(sorted(LOADERS))}. "
        "Repeatable. NAME defaults to the file name before its first dot.",
    )(fn)


def context_options(fn: F) -> F:
    fn = click.option(
        "--device",
        default=None,
        help="Device of torch and onnx models: auto, cpu, cuda, cuda:1, ... "
        "(default auto: CUDA when available, else the CPU).",
    )(fn)
    return click.option(
        "--context",
        "context_path",
        type=EXISTING_FILE,
        default=None,
        help="Context of each utterance for context-aware models: JSONL "
        '{"utt": ID, "fields": {"genre": ...}} or TSV with a header utt<TAB>field...; '
        "its ids must be exactly the utterances'. KenLM models ignore it.",
    )(fn)


def load_contexts(
    path: Path | None, ids: Sequence[str], source: Path | None = None
) -> dict[str, dict[str, str]] | None:
    """Contexts of exactly the utterances ``ids`` (read from ``source``, named on a mismatch)."""
    from rescorer.contexts import read_contexts

    if path is None:
        return None
    contexts = read_contexts(path)
    check_same_ids(set(ids), set(contexts), "context", path, against=source)
    return contexts


def nbest_format(path: Path, fmt: str) -> str:
    """``--format``, or for ``auto`` the format detected (logged: ``-v`` shows what was taken)."""
    if fmt != "auto":
        return fmt
    from rescorer.formats import detect_format

    detected = detect_format(path)
    logger.info(
        "%s: read as %s N-best lists (detected; --format %s says so)", path, detected, detected
    )
    return detected


def load_nbest(
    path: Path, fmt: str, extra_scores: Sequence[ScoreDir] = (), max_nbest: int | None = None
) -> NBest:
    """The N-best lists of ``--nbest`` (format detected for ``auto``), with the features of
    any ``--extra-scores`` folders added, then cut to their first ``max_nbest`` hypotheses."""
    from rescorer.formats import read_nbest
    from rescorer.formats.srilm import add_score_dirs

    fmt = nbest_format(path, fmt)
    nbest = read_nbest(path, fmt)
    if len(nbest) == 0:
        raise InputError("no N-best lists in it", path)
    logger.info("read %r from %s (%s)", nbest, path, fmt)
    if extra_scores:  # a score folder has a line per hypothesis of the whole list
        nbest = add_score_dirs(nbest, extra_scores)
    return nbest if max_nbest is None else nbest.head(max_nbest)


def open_source(
    path: Path, fmt: str, extra_scores: Sequence[ScoreDir] = (), max_nbest: int | None = None
) -> NBestSource:
    """The N-best set of ``--nbest`` to be read in chunks (:mod:`rescorer.formats.source`): a
    JSONL file lazily, anything else (or a set with ``--extra-scores`` folders) whole; each
    list cut to its first ``max_nbest`` hypotheses (``--max-nbest``) as it is read."""
    from rescorer.formats.source import NBestSource, open_nbest

    fmt = nbest_format(path, fmt)
    if extra_scores:
        return NBestSource.of(load_nbest(path, fmt, extra_scores, max_nbest), path, fmt)
    source = open_nbest(path, fmt).head(max_nbest)
    if len(source) == 0:
        raise InputError("no N-best lists in it", path)
    logger.info(
        "%s: %d lists, %d hypotheses (%s, %s)",
        path,
        len(source),
        source.num_hyps(),
        fmt,
        "read in chunks" if source.streamed else "read whole",
    )
    return source


def chunk_refs(
    refs: Mapping[str, tuple[str, ...]] | None, nbest: NBest
) -> dict[str, tuple[str, ...]] | None:
    """The references of the lists of ``nbest`` (a chunk of a set), None when there are none."""
    return None if refs is None else {u: refs[u] for u in nbest}


def load_refs(
    path: Path | None,
    fmt: str,
    ids: Sequence[str],
    source: Path | None = None,
    allow_extra: bool = False,
    id_key: str | None = None,
) -> dict[str, tuple[str, ...]]:
    """References of exactly the utterances ``ids`` (read from ``source``, named on a mismatch).

    Every id needs one; references of other ids are dropped when empty, or all of them with
    ``allow_extra`` (:func:`rescorer.refs.match_references`), else refused. ``id_key``: the key
    of a NeMo manifest's ids (default: the stems of ``audio_filepath``).
    """
    if path is None:
        raise click.UsageError("--ref is required here")
    refs = read_references(path, None if fmt == "auto" else fmt, id_key=id_key)
    return match_references(refs, ids, allow_extra, path, against=source).refs


def resolve_refs(
    path: Path | None,
    fmt: str,
    nbest: NBest | NBestSource,
    nbest_path: Path,
    required: bool = True,
    allow_extra: bool = False,
    id_key: str | None = None,
) -> dict[str, tuple[str, ...]] | None:
    """The references of ``nbest``: the --ref file when given (it wins over references embedded
    in the lists; see :func:`load_refs` for ``allow_extra``), else the lists' own (every
    utterance needs one), else a usage error when ``required`` (None when not)."""
    if path is not None:
        if nbest.references is not None:
            logger.info("--ref %s wins over the references embedded in %s", path, nbest_path)
        return load_refs(path, fmt, list(nbest), nbest_path, allow_extra, id_key)
    if nbest.references is not None:
        check_same_ids(set(nbest), set(nbest.references), "embedded reference", nbest_path)
        logger.info("references embedded in %s used (no --ref)", nbest_path)
        return dict(nbest.references)
    if required:
        raise click.UsageError(
            f"give --ref: the N-best lists in {nbest_path} hold no references of their own"
        )
    return None


def load_speakers(
    path: Path | None,
    ids: Sequence[str],
    source: Path | None = None,
    ref_path: Path | None = None,
    ref_format: str = "auto",
) -> dict[str, str] | None:
    """Speakers of (at least) the utterances ``ids`` (read from ``source``): the ``--utt2spk``
    map ``path`` when given, else, with an sclite trn reference ``ref_path``, sclite's speakers
    of the ids (:func:`rescorer.refs.trn_speakers`), else None."""
    if path is None:
        if ref_path is None:
            return None
        from rescorer.refs import transcript_format, trn_speakers

        return trn_speakers(ids) if transcript_format(ref_path, ref_format) == "trn" else None
    spk = read_utt2spk(path)
    missing = set(ids) - set(spk)
    if missing:  # a map of a larger corpus is fine; every utterance here needs a speaker
        check_same_ids(set(ids), set(spk) & set(ids), "utt2spk", path, against=source)
    return spk


def echo_lm_report(report: LMFeatureReport, lm: object) -> None:
    """What scoring with one model found, on stderr (and its prefix sharing, for torch models)."""
    click.echo(report.describe(), err=True)
    stats = getattr(lm, "stats", None)  # prefix sharing of torch models
    if stats is not None and hasattr(stats, "describe"):
        click.echo(f"{report.name}: {stats.describe()}", err=True)


def echo_report(label: str, report: WerReport) -> None:
    click.echo(f"{report.kaldi_line()} {label}")
