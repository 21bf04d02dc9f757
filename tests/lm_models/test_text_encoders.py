"""The hashed text encoder: its cached, vectorised form equals the feature-by-feature definition."""

from __future__ import annotations

import hashlib
import random
import re

import numpy as np
import pytest

from rescorer.lm_models import text_encoders
from rescorer.lm_models.text_encoders import HashEmbedder


def reference(texts: list[str], dim: int) -> np.ndarray:
    """The definition, one feature at a time: each word and each trigram of #word#, hashed to a
    column with a sign, summed, then each row L2-normalised."""
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for i, text in enumerate(texts):
        for word in re.findall(r"\w+", text.lower()):
            padded = f"#{word}#"
            for feat in [f"w:{word}"] + [f"c:{padded[j : j + 3]}" for j in range(len(word))]:
                h = int.from_bytes(hashlib.blake2b(feat.encode(), digest_size=8).digest(), "little")
                out[i, h % dim] += 1.0 if (h >> 32) & 1 else -1.0
        norm = float(np.linalg.norm(out[i]))
        if norm > 0:
            out[i] /= norm
    return out


def random_texts(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    words = ["the", "The", "cat", "a", "I", "naïve", "x_1", "42", "sat", "sat's", "", "!!"]
    return [" ".join(rng.choice(words) for _ in range(rng.randrange(0, 12))) for _ in range(n)]


@pytest.mark.parametrize("dim", [1, 7, 64])
def test_hash_embedder_equals_the_feature_by_feature_definition(dim: int) -> None:
    emb = HashEmbedder(dim)
    for seed in range(3):  # later batches reuse the words the first ones hashed
        texts = random_texts(seed, 40)
        assert np.array_equal(emb.embed(texts), reference(texts, dim))
    # a text's vector does not depend on the batch it is in, nor on what was embedded before
    texts = random_texts(9, 20)
    alone = np.stack([HashEmbedder(dim).embed([t])[0] for t in texts])
    assert np.array_equal(emb.embed(texts[::-1])[::-1], alone)


def test_hash_embedder_edge_cases() -> None:
    emb = HashEmbedder(16)
    assert emb.embed([]).shape == (0, 16)
    empty = emb.embed(["", "?!", "   "])
    assert empty.dtype == np.float32 and not empty.any()  # no words: the zero vector
    repeated = emb.embed(["cat cat cat"])[0]
    assert np.array_equal(repeated, emb.embed(["cat"])[0])  # normalised: counts scale away
    with pytest.raises(ValueError, match="dim must be >= 1"):
        HashEmbedder(0)


def test_hash_embedder_cache_is_bounded_and_clearing_it_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(text_encoders, "HASH_WORD_CACHE", 5)
    emb = HashEmbedder(32)
    for seed in range(4):
        texts = random_texts(seed, 30)
        assert np.array_equal(emb.embed(texts), reference(texts, 32))
        assert len(emb._ids) <= 5 + len({w for t in texts for w in re.findall(r"\w+", t.lower())})


def _planted_pickle(folder) -> None:  # type: ignore[no-untyped-def]
    """A folder sentence-transformers would load, whose weights are a pickle that runs code."""
    import json
    import pickle

    class Boom:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (print, ("the pickle ran",))

    folder.mkdir()
    module = {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}
    (folder / "modules.json").write_text(json.dumps([module]))
    (folder / "config.json").write_text('{"model_type": "bert"}')
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps(Boom()))


@pytest.mark.parametrize("kind", ["st", "hf"])
def test_encoder_folders_with_pickled_weights_are_refused(tmp_path, capsys, kind) -> None:  # type: ignore[no-untyped-def]
    """issue 52: an ``st:DIR`` context encoder (like ``hf:DIR``) is read only from safetensors;
    a folder with a pickled ``pytorch_model.bin`` is refused in one line before any loader
    sees it, whatever sentence-transformers or torch would do with it."""
    folder = tmp_path / "enc"
    _planted_pickle(folder)
    with pytest.raises(ValueError, match=r"enc: .*pytorch_model\.bin.*not loaded") as info:
        text_encoders.make_embedder(f"{kind}:{folder}")
    assert "\n" not in str(info.value)
    assert "the pickle ran" not in capsys.readouterr().out
    # a nested module's pickle (a Dense layer's) is refused the same way
    (folder / "pytorch_model.bin").unlink()
    (folder / "model.safetensors").write_bytes(b"")
    (folder / "2_Dense").mkdir()
    (folder / "2_Dense" / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(ValueError, match=r"2_Dense/pytorch_model\.bin"):
        text_encoders.make_embedder(f"{kind}:{folder}")
