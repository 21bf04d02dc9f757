"""rescorer: N-best rescoring with n-gram and neural language models.

The Python API, for rescoring without the CLI (each name is imported on first use, so
``import rescorer`` stays light; nothing draws a progress bar unless asked)::

    from rescorer import add_lm_scores, load_lm, one_best, read_nbest, read_references
    from rescorer import score_corpus, tune_weights

    dev = read_nbest("nbest/librispeech-espnet/dev_clean")          # utt id -> N-best list
    refs = read_references("nbest/librispeech-espnet/dev_clean/references/ref_wer.trn")
    dev, report = add_lm_scores(dev, load_lm("kenlm:4gram.bin"), "4gram")
    result = tune_weights(dev, refs, ["decoder", "ctc", "4gram", "4gram_oov"])
    print(score_corpus(refs, one_best(dev, result.weights)).kaldi_line())

See docs/guide/python-api.md and the API reference (docs/reference/api.md) for the names and what
they return.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time the names load on first use
    from rescorer.combine import Weights, one_best, rerank
    from rescorer.contexts import read_contexts
    from rescorer.features import add_lm_scores
    from rescorer.formats import read_nbest, write_nbest
    from rescorer.lms import load_lm
    from rescorer.refs import read_references
    from rescorer.significance import compare
    from rescorer.tune import TuneOptions
    from rescorer.tune import tune as tune_weights
    from rescorer.wer import oracle, score_corpus

    __version__: str

# Public name -> "module" or "module:name there". ``tune_weights`` is
# ``rescorer.tune.tune``: a package attribute named like a submodule would be replaced by the
# module as soon as that is imported.
_API: dict[str, str] = {
    "read_nbest": "rescorer.formats",
    "write_nbest": "rescorer.formats",
    "read_references": "rescorer.refs",
    "read_contexts": "rescorer.contexts",
    "load_lm": "rescorer.lms",
    "add_lm_scores": "rescorer.features",
    "Weights": "rescorer.combine",
    "rerank": "rescorer.combine",
    "one_best": "rescorer.combine",
    "tune_weights": "rescorer.tune:tune",
    "TuneOptions": "rescorer.tune",
    "score_corpus": "rescorer.wer",
    "oracle": "rescorer.wer",
    "compare": "rescorer.significance",
}

__all__ = [
    "TuneOptions",
    "Weights",
    "__version__",
    "add_lm_scores",
    "compare",
    "load_lm",
    "one_best",
    "oracle",
    "read_contexts",
    "read_nbest",
    "read_references",
    "rerank",
    "score_corpus",
    "tune_weights",
    "write_nbest",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("rescorer")
        except PackageNotFoundError:  # a source tree that was never installed
            return "0+unknown"
    where = _API.get(name)
    if where is None:
        raise AttributeError(f"module 'rescorer' has no attribute {name!r}")
    module, _, attribute = where.partition(":")
    value = getattr(importlib.import_module(module), attribute or name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
