"""Self-describing model checkpoints: a folder with config, vocabulary and safetensors weights.

    <checkpoint>/
      config.json        {"format": "rescorer-checkpoint", "format_version": 1,
                          "model_type": "context_lstm", "config": {...}}
      vocab.txt          one token per line, line i = token id i (UTF-8)
      model.safetensors  the model's state dict (safetensors; never pickle)
      training.json      optional free-form training metadata
      (other .txt files) optional model-specific text files (the FNLM's factor vocabularies)
      tokenizer.model    optional: a subword model's sentencepiece tokenizer (a protobuf, data
                         only; rescorer.lm_models.tokenizer), which cuts words into the vocabulary's
                         units

Loading reads the architecture from ``config.json`` and builds the model from
:data:`MODEL_TYPES`, a plain dict ``name -> (ConfigClass, ModelClass)`` that knows no family: each
family's ``model.py`` adds its own entries with :func:`register_model_type` when it is imported,
and the families (the subpackages of :mod:`lm_models`) are imported on the first save or load.
``ConfigClass`` has ``to_json()``/``from_json()`` and a ``vocab_size``; ``ModelClass(config)``
builds the model and keeps it as ``model.config``.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import pkgutil
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from rescorer.core.io import read_tokens
from rescorer.core.json_input import read_json
from rescorer.core.output import atomic_dir, interrupted_swap

logger = logging.getLogger(__name__)

FORMAT = "rescorer-checkpoint"
FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
VOCAB_FILE = "vocab.txt"
WEIGHTS_FILE = "model.safetensors"
TRAINING_FILE = "training.json"
TOKENIZER_FILE = "tokenizer.model"  # the one binary extra file (rescorer.lm_models.tokenizer)

MODEL_TYPES: dict[str, tuple[type, type[nn.Module]]] = {}
"""model_type -> (ConfigClass, ModelClass); filled by the families (:func:`register_model_type`)."""


def register_model_type(name: str, config_cls: type, model_cls: type[nn.Module]) -> None:
    """Declare a checkpoint ``model_type``: called by a family's ``model.py`` at import."""
    known = MODEL_TYPES.get(name)
    if known is not None and known != (config_cls, model_cls):
        raise ValueError(f"model_type {name!r} is already registered as {known[1].__name__}")
    MODEL_TYPES[name] = (config_cls, model_cls)


def _import_families() -> None:
    """Import every family package of :mod:`lm_models`, so that each has registered its types."""
    import rescorer.lm_models

    for info in pkgutil.iter_modules(rescorer.lm_models.__path__):
        if info.ispkg:
            importlib.import_module(f"rescorer.lm_models.{info.name}")


def _model_type(model: nn.Module) -> str:
    _import_families()
    for name, (_, model_cls) in MODEL_TYPES.items():
        if type(model) is model_cls:
            return name
    raise ValueError(
        f"cannot save a {type(model).__name__}: not a registered model type "
        f"({', '.join(f'{k}: {v[1].__name__}' for k, v in MODEL_TYPES.items())})"
    )


def _check_vocab(tokens: Sequence[str], vocab_size: int) -> list[str]:
    tokens = list(tokens)
    if len(tokens) != vocab_size:
        raise ValueError(
            f"vocabulary has {len(tokens)} tokens but the model's vocab_size is {vocab_size}"
        )
    for i, tok in enumerate(tokens):
        if not isinstance(tok, str) or not tok or "\n" in tok or "\r" in tok:
            raise ValueError(
                f"vocabulary token {i} ({tok!r}): expected a non-empty one-line string"
            )
    if len(set(tokens)) != len(tokens):
        dups = sorted(t for t, n in Counter(tokens).items() if n > 1)
        raise ValueError(f"vocabulary tokens must be distinct; repeated: {dups[:10]}")
    return tokens


def save_checkpoint(
    path: str | os.PathLike[str],
    model: nn.Module,
    vocab_tokens: Sequence[str],
    training_meta: Mapping[str, Any] | None = None,
    extra_files: Mapping[str, str | bytes] | None = None,
) -> Path:
    """Write ``model`` and its vocabulary (``vocab_tokens[i]`` is id i) as a checkpoint folder.

    ``extra_files`` maps further file names to their contents, written into the folder with the
    rest: plain ``*.txt`` names to text (a model's own vocabularies beside ``vocab.txt``), and
    ``tokenizer.model`` to the bytes of a subword model's tokenizer.

    The files are written into a temporary folder beside ``path`` that is swapped in whole
    (:func:`rescorer.core.output.atomic_dir`), so a crash or ``kill -9`` leaves the previous
    checkpoint or the new one, never a mix or none (the temporary folder a killed save leaves
    is removed by the next save). An existing checkpoint at ``path`` is replaced; any other
    existing file or non-empty folder there is an error.
    """
    path = Path(path)
    replaceable = path.is_dir() and ((path / CONFIG_FILE).is_file() or not any(path.iterdir()))
    if (path.exists() or path.is_symlink()) and not replaceable:
        raise ValueError(f"{path}: exists and is not a checkpoint folder; not overwriting it")
    with atomic_dir(path) as folder:
        model_type, tensors = write_checkpoint(
            folder, model, vocab_tokens, training_meta, extra_files
        )
    logger.info("saved %s checkpoint to %s (%d tensors)", model_type, path, tensors)
    return path


def write_checkpoint(
    folder: Path,
    model: nn.Module,
    vocab_tokens: Sequence[str],
    training_meta: Mapping[str, Any] | None = None,
    extra_files: Mapping[str, str | bytes] | None = None,
) -> tuple[str, int]:
    """The files of :func:`save_checkpoint`, written and synced into the empty ``folder``.

    Not atomic by itself: for a caller that writes a checkpoint with files of its own as one
    set inside :func:`rescorer.core.output.atomic_dir` (the LSTM trainer's ``last/`` with its
    optimizer state). Returns the model type and the number of tensors.
    """
    model_type = _model_type(model)
    config = model.config  # type: ignore[attr-defined]
    tokens = _check_vocab(vocab_tokens, config.vocab_size)
    header = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model_type": model_type,
        "config": config.to_json(),
    }
    try:
        training_text = None if training_meta is None else json.dumps(training_meta, indent=2)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"training metadata is not JSON-serialisable: {exc}") from None
    weights = {name: t.detach().to("cpu").contiguous() for name, t in model.state_dict().items()}
    extra = dict(extra_files or {})
    for name, content in extra.items():
        reserved = name in (CONFIG_FILE, VOCAB_FILE, WEIGHTS_FILE, TRAINING_FILE)
        text = Path(name).name == name and name.endswith(".txt") and isinstance(content, str)
        binary = name == TOKENIZER_FILE and isinstance(content, bytes)
        if reserved or not (text or binary):
            raise ValueError(
                f"extra checkpoint file must be a plain new *.txt name with text, or "
                f"{TOKENIZER_FILE} with bytes; got {name!r} with {type(content).__name__}"
            )
    (folder / CONFIG_FILE).write_text(json.dumps(header, indent=2) + "\n", encoding="utf-8")
    (folder / VOCAB_FILE).write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    save_tensors(weights, folder / WEIGHTS_FILE, metadata={"format": FORMAT})
    if training_text is not None:
        (folder / TRAINING_FILE).write_text(training_text + "\n", encoding="utf-8")
    for name, content in extra.items():
        if isinstance(content, bytes):
            (folder / name).write_bytes(content)
        else:
            (folder / name).write_text(content, encoding="utf-8")
    sync_files(folder)
    return model_type, len(weights)


_OS_ERROR = re.compile(r"\(os error ([0-9]+)\)")


def save_tensors(
    tensors: Mapping[str, torch.Tensor], path: Path, metadata: Mapping[str, str] | None = None
) -> None:
    """``safetensors``' ``save_file``, with its I/O errors (a full disk: "No space left on device
    (os error 28)") raised as the :class:`OSError` they are, which the output layer reports in
    one line instead of a traceback."""
    try:
        save_file(dict(tensors), str(path), metadata=dict(metadata) if metadata else None)
    except SafetensorError as err:  # not an OSError: the errno is only in its text
        m = _OS_ERROR.search(str(err))
        if m is None:
            raise
        code = int(m.group(1))
        raise OSError(code, os.strerror(code), str(path)) from None


def save_optimizer_state(opt: torch.optim.Optimizer, folder: Path) -> None:
    """The optimizer's state in ``folder``: its tensors in ``optimizer.safetensors``, its
    parameter groups and scalars in ``optimizer.json`` (no pickle)."""
    sd = opt.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, Any] = {}
    for pid, st in sd["state"].items():
        for key, value in st.items():
            if torch.is_tensor(value):
                tensors[f"{pid}.{key}"] = value.detach().cpu().contiguous()
            else:
                scalars[f"{pid}.{key}"] = value
    save_tensors(tensors, folder / "optimizer.safetensors")
    (folder / "optimizer.json").write_text(
        json.dumps({"param_groups": sd["param_groups"], "scalars": scalars}), encoding="utf-8"
    )


def load_optimizer_state(
    opt: torch.optim.Optimizer, folder: Path, device: torch.device | str = "cpu"
) -> None:
    """Load what :func:`save_optimizer_state` wrote into ``opt`` (built over the same
    parameters, in the same order)."""
    meta = json.loads((folder / "optimizer.json").read_text(encoding="utf-8"))
    tensors = load_file(str(folder / "optimizer.safetensors"), device=str(device))
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        pid, name = key.split(".", 1)
        state.setdefault(int(pid), {})[name] = value
    for key, value in meta["scalars"].items():
        pid, name = key.split(".", 1)
        state.setdefault(int(pid), {})[name] = value
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


def sync_files(folder: Path) -> None:
    """Flush the files of ``folder`` to the disk (before the folder is swapped in)."""
    for f in folder.iterdir():
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())


def _read_json(file: Path) -> Any:
    if not file.is_file():
        raise ValueError(f"{file}: missing (expected a {FORMAT} folder)")
    return read_json(file)


def _expected_shapes(model_cls: type, config: Any, config_file: Path) -> dict[str, tuple]:
    """Tensor name -> shape of the model ``config`` describes, built without memory."""
    try:
        with torch.device("meta"):
            meta_model = model_cls(config)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(f"{config_file}: invalid config: {exc}") from None
    return {name: tuple(t.shape) for name, t in meta_model.state_dict().items()}


def _declared_shapes(weights_file: Path) -> dict[str, tuple]:
    """Tensor name -> shape from a safetensors file's header (no tensor is read)."""
    from safetensors import safe_open

    try:
        with safe_open(str(weights_file), framework="pt") as f:
            return {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118
    except (SafetensorError, OSError, ValueError) as exc:
        raise ValueError(f"{weights_file}: unreadable safetensors file: {exc}") from None


def load_checkpoint(
    path: str | os.PathLike[str], device: str | torch.device = "cpu"
) -> tuple[nn.Module, list[str], dict[str, Any] | None]:
    """Read a checkpoint folder -> (model in eval mode, vocabulary tokens, training metadata)."""
    path = Path(path)
    if not path.is_dir():
        previous = interrupted_swap(path)
        if previous is None:
            raise ValueError(f"{path}: not a checkpoint folder")
        # Only where the system has no atomic exchange: a save killed between its two renames.
        logger.warning(
            "%s is missing (a save was killed while replacing it): loading the previous "
            "checkpoint from %s; the next save puts it back",
            path,
            previous.name,
        )
        path = previous
    config_file = path / CONFIG_FILE
    header = _read_json(config_file)
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        got = header.get("format") if isinstance(header, dict) else type(header).__name__
        raise ValueError(f"{config_file}: expected format {FORMAT!r}, got {got!r}")
    if header.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{config_file}: expected format_version {FORMAT_VERSION}, "
            f"got {header.get('format_version')!r}"
        )
    model_type = header.get("model_type")
    _import_families()
    if model_type not in MODEL_TYPES:
        raise ValueError(
            f"{config_file}: unknown model_type {model_type!r}; expected one of {list(MODEL_TYPES)}"
        )
    config_cls, model_cls = MODEL_TYPES[model_type]
    try:
        config = config_cls.from_json(header.get("config"))  # type: ignore[attr-defined]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{config_file}: invalid config: {exc}") from None

    vocab_file = path / VOCAB_FILE
    if not vocab_file.is_file():
        raise ValueError(f"{vocab_file}: missing")
    tokens = read_tokens(vocab_file)
    if len(tokens) != config.vocab_size:
        raise ValueError(
            f"{vocab_file}: has {len(tokens)} tokens but {CONFIG_FILE} says "
            f"vocab_size={config.vocab_size}"
        )

    weights_file = path / WEIGHTS_FILE
    if not weights_file.is_file():
        raise ValueError(f"{weights_file}: missing")
    # Sizes are checked before anything is allocated: the model is built on the meta device
    # (no memory), the file's header read alone, and its shapes compared with the config's.
    renamed = getattr(model_cls, "RENAMED_TENSORS", {})
    expected = _expected_shapes(model_cls, config, config_file)
    declared = _declared_shapes(weights_file)
    for old, new in renamed.items():  # tensors a family renamed since a checkpoint was written
        if old in declared and new not in declared:
            declared[new] = declared.pop(old)
    missing = sorted(set(expected) - set(declared))
    unexpected = sorted(set(declared) - set(expected))
    if missing or unexpected:
        raise ValueError(
            f"{weights_file}: tensors do not match the {model_type} config: "
            f"missing {missing}, unexpected {unexpected}"
        )
    for name, shape in declared.items():
        if shape != expected[name]:
            raise ValueError(
                f"{weights_file}: tensor {name!r} has shape {shape}, expected {expected[name]}"
            )
    try:
        weights = load_file(str(weights_file), device=str(device))
    except (SafetensorError, OSError, ValueError) as exc:
        raise ValueError(f"{weights_file}: unreadable safetensors file: {exc}") from None
    for old, new in renamed.items():
        if old in weights and new not in weights:
            weights[new] = weights.pop(old)
    for name, tensor in weights.items():
        if not tensor.is_floating_point():
            raise ValueError(f"{weights_file}: tensor {name!r} has dtype {tensor.dtype}")
        if not bool(torch.isfinite(tensor).all()):
            bad = int((~torch.isfinite(tensor)).sum())
            raise ValueError(
                f"{weights_file}: tensor {name!r} holds {bad} NaN/inf value(s) "
                "(expected finite weights: a diverged or damaged checkpoint)"
            )
    model = model_cls(config)
    dtypes = {t.dtype for t in weights.values()}
    model.to(device=device, dtype=dtypes.pop() if len(dtypes) == 1 else None)
    model.load_state_dict(weights, strict=True)
    model.eval()

    meta = None
    training_file = path / TRAINING_FILE
    if training_file.exists():
        meta = _read_json(training_file)
    logger.info("loaded %s checkpoint from %s", model_type, path)
    return model, tokens, meta
