"""Language models behind one contract, one module per model kind.

:mod:`rescorer.lms.contract` defines :class:`~rescorer.lms.contract.LanguageModel` and
:class:`~rescorer.lms.contract.LMSpec`; each kind's adapter is a module here (``kenlm``,
``torch``, ``onnx``, ``fnlm``, ``cue``, ``lbl``, ``mixture``, ``cache``, ``neural_cache``,
``reverse``, ``hf``) with a loader
``(spec, options) -> LanguageModel``. :data:`LOADERS` is the plain dict from kind to loader,
named as ``"module:function"`` so that an adapter (and torch, or onnxruntime) is imported only
when a model of its kind is loaded. Add a kind by adding an entry (a callable works too).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rescorer.lms.contract import LanguageModel, LMSpec

Loader = Callable[[LMSpec, Mapping[str, Any]], LanguageModel]

LOADERS: dict[str, str | Loader] = {
    "kenlm": "rescorer.lms.kenlm:load_kenlm_lm",
    "torch": "rescorer.lms.torch:load_torch_lm",
    "fnlm": "rescorer.lms.fnlm:load_fnlm_lm",
    "cue": "rescorer.lms.cue:load_cue_lm",
    "lbl": "rescorer.lms.lbl:load_lbl_lm",
    "mix": "rescorer.lms.mixture:load_mixture",
    "ncache": "rescorer.lms.neural_cache:load_neural_cache",
    "cache": "rescorer.lms.cache:load_cache_lm",
    "reverse": "rescorer.lms.reverse:load_reverse_lm",
    "onnx": "rescorer.lms.onnx:load_onnx_lm",
    "hf": "rescorer.lms.hf:load_hf_lm",
}
"""Model kind -> loader (``"module:function"``, imported on first use, or a callable)."""


MAX_NESTING = 4
"""Models built of models (mixtures of mixtures, caches of mixtures, ...), at most this deep."""


def parse_spec(spec: str) -> LMSpec:
    """Parse ``[NAME=]KIND:PATH`` with KIND one of :data:`LOADERS`."""
    return LMSpec.parse(spec, LOADERS)


def resolve_spec(spec: str, folder: Path) -> LMSpec:
    """Parse ``spec`` as a file names it: a relative path is relative to that file's folder."""
    parsed = parse_spec(spec)
    if parsed.path.is_absolute():
        return parsed
    return LMSpec(parsed.name, parsed.kind, folder / parsed.path)


def base_spec(data: Mapping[str, Any], path: Path) -> str:
    """The ``"base"`` model spec of a wrapper model's file (cache, neural cache, reverse), a
    string, else :class:`~rescorer.core.errors.InputError` naming ``path``; parsed on loading."""
    from rescorer.core.json_input import json_string

    what = '"base" (a model spec such as "torch:exp/lstm/best")'
    return json_string(data.get("base"), path, None, what)


def load_inner(spec: str, outer: LMSpec, options: Mapping[str, Any]) -> LanguageModel:
    """Load a model named inside another model's file (a mixture's components, a cache's base):
    its path resolved against the file's folder, ``options`` passed on, and nesting deeper than
    :data:`MAX_NESTING` (a file that names itself) refused."""
    depth = int(options.get("mix_depth", 0))
    if depth >= MAX_NESTING:
        raise ValueError(f"{outer.path}: models nested deeper than {MAX_NESTING} (a cycle?)")
    return load_lm(resolve_spec(spec, outer.path.parent), **{**options, "mix_depth": depth + 1})


def loader(kind: str) -> Loader:
    """The loader of ``kind`` (its module imported now)."""
    entry = LOADERS[kind]
    if callable(entry):
        return entry
    module, _, name = entry.partition(":")
    return getattr(importlib.import_module(module), name)


def load_lm(spec: str | LMSpec, **options: Any) -> LanguageModel:
    """Load the model named by ``spec`` (``[NAME=]KIND:PATH``).

    ``options`` go to the kind's loader (``case`` for word models, ``device`` for torch ones).
    """
    parsed = spec if isinstance(spec, LMSpec) else parse_spec(spec)
    if parsed.kind not in LOADERS:
        raise ValueError(f"unknown model kind {parsed.kind!r}; expected one of {sorted(LOADERS)}")
    return loader(parsed.kind)(parsed, options)
