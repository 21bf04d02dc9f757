"""The ``rescorer`` entry point: the click group and the commands registered on it.

The commands live in one module per group (:mod:`~rescorer.cli.evaluation`,
:mod:`~rescorer.cli.rescoring`, :mod:`~rescorer.cli.models`, :mod:`~rescorer.cli.keyboard`, and
the context files' :mod:`~rescorer.cli.context`, the model
families' :mod:`~rescorer.cli.fnlm`, :mod:`~rescorer.cli.lbl`, :mod:`~rescorer.cli.cue`);
their shared options and error handling are in :mod:`rescorer.cli.options`. This module imports
them all and nothing imports it.

Bad input data gets one line naming the file and line, and exit status 2; bad options get click's
usage error (also status 2). Progress bars go to stderr and ``--quiet`` silences them.
``--threads`` and ``$RESCORER_MALLOC`` set the process's threads and allocator
(:mod:`rescorer.core.runtime`); they take effect when a model is loaded.
"""

from __future__ import annotations

import logging
import os

import click

from rescorer.cli import context, cue, evaluation, fnlm, keyboard, lbl, models, rescoring
from rescorer.core import runtime


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars or info messages.")
@click.option(
    "--threads",
    default="auto",
    show_default=True,
    envvar=runtime.THREADS_ENV,
    metavar="auto|default|N",
    help="CPU threads for torch models and ONNX Runtime sessions: auto takes the cores idle "
    "now (cores less the load average), default leaves the libraries' own choice "
    f"(also ${runtime.THREADS_ENV}).",
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
    runtime.configure(runtime.RuntimeOptions(threads=count, keep_freed_memory=keep))


COMMANDS: tuple[click.Command, ...] = (
    evaluation.wer,
    rescoring.score,
    rescoring.tune_cmd,
    rescoring.rescore,
    rescoring.convert,
    context.context,
    models.ppl,
    models.ngram,
    models.train_cmd,
    models.classify,
    models.inspect_cmd,
    models.export_cmd,
    keyboard.predict_cmd,
    keyboard.keyboard_eval,
    keyboard.keyboard_compare,
    fnlm.fnlm_train,
    fnlm.fnlm_eval,
    fnlm.mix_weights,
    lbl.lbl_train,
    lbl.lbl_infer,
    lbl.lbl_similar,
    lbl.lbl_sample,
    lbl.lbl_export,
    cue.cue_vectors,
    cue.cue_export,
)
for _command in COMMANDS:
    main.add_command(_command)

if __name__ == "__main__":  # pragma: no cover
    main()
