"""Context variables, record encoding and the context embedding with missing values."""

from __future__ import annotations

import json

import pytest
import torch
from torch.nn import functional as F

from rescorer.lm_models.lstm import context as context_module
from rescorer.lm_models.lstm.context import ContextEncoder, ContextVariable, encode_records

GENRE = ContextVariable.categorical(
    "genre", ["news", "sport", "chat"], [6, 3, 1], embed_dim=3, one_hot_bias=True
)
SPEAKER = ContextVariable.categorical("speaker", ["a", "b", "c", "d"], [1, 0, 2, 5], embed_dim=2)
GEO = ContextVariable.numerical("geo", 2, [0.5, -1.5])
VARS = (GENRE, GEO, SPEAKER)


def make_encoder(seed: int = 0, k: int = 5) -> ContextEncoder:
    torch.manual_seed(seed)
    enc = ContextEncoder(VARS, k).double()
    with torch.no_grad():  # a bias around 0 so that the ReLU is active for some rows only
        enc.proj.bias.uniform_(-0.5, 0.5)
    return enc


# ------------------------------------------------------------------------- ContextVariable


def test_variable_json_round_trip() -> None:
    for var in VARS:
        data = json.loads(json.dumps(var.to_json()))
        assert ContextVariable.from_json(data) == var
    assert GEO.mean == (0.5, -1.5) and GENRE.probabilities == (0.6, 0.3, 0.1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(name="g", kind="categorical", values=(), embed_dim=2), "at least one value"),
        (dict(name="g", kind="categorical", values=("a", "a"), embed_dim=2), "distinct"),
        (
            dict(name="g", kind="categorical", values=("a", "b"), counts=(1,), embed_dim=2),
            "one count per value",
        ),
        (
            dict(name="g", kind="categorical", values=("a",), counts=(0,), embed_dim=2),
            "positive total",
        ),
        (dict(name="g", kind="categorical", values=("a",)), "embed_dim"),
        (dict(name="g", kind="ordinal"), "kind must be one of"),
        (dict(name="g.x", kind="numerical", dim=1), "name must be"),
        (dict(name="g", kind="numerical", dim=0), "dim must be"),
        (dict(name="g", kind="numerical", dim=2, mean=(1.0,)), "expected 2 mean values"),
        (dict(name="g", kind="numerical", dim=1, one_hot_bias=True), "categorical only"),
    ],
)
def test_variable_validation(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ContextVariable(**kwargs)


def test_variable_from_json_rejects_unknown_fields() -> None:
    data = GENRE.to_json() | {"colour": "red"}
    with pytest.raises(ValueError, match="unknown .* key"):
        ContextVariable.from_json(data)


def test_uniform_probabilities_without_counts() -> None:
    var = ContextVariable.categorical("g", ["a", "b", "c", "d"], embed_dim=2)
    assert var.probabilities == (0.25, 0.25, 0.25, 0.25)
    assert ContextVariable.numerical("x", 3).mean == (0.0, 0.0, 0.0)


# --------------------------------------------------------------------------- encode_records


def test_encode_records() -> None:
    records = [
        {"genre": "sport", "geo": [1.0, 2.0], "speaker": "d"},
        None,
        {"genre": "news", "geo": ("3", None)},
        {"speaker": "", "genre": None},
    ]
    batch = encode_records(VARS, records)
    assert batch["genre"].tolist() == [1, -1, 0, -1]
    assert batch["speaker"].tolist() == [3, -1, -1, -1]
    geo = batch["geo"]
    assert geo.shape == (4, 2) and geo.dtype == torch.float32
    assert geo[0].tolist() == [1.0, 2.0] and geo[2, 0].item() == 3.0
    assert torch.isnan(geo[1]).all() and torch.isnan(geo[2, 1]) and torch.isnan(geo[3]).all()


def test_encode_records_accepts_int_values() -> None:
    stars = ContextVariable.categorical("stars", ["1", "2", "3"], embed_dim=2)
    assert encode_records([stars], [{"stars": 2}])["stars"].tolist() == [1]


def test_unknown_value_names_variable_and_values() -> None:
    with pytest.raises(ValueError, match=r"'genre'.*'weather'.*'news', 'sport', 'chat'"):
        encode_records(VARS, [{"genre": "weather"}])


def test_unknown_field_is_an_error_unless_ignored() -> None:
    with pytest.raises(ValueError, match=r"unknown fields \['colour'\]"):
        encode_records(VARS, [{"genre": "news", "colour": "red"}])
    batch = encode_records(VARS, [{"genre": "news", "colour": "red"}], ignore_unknown_fields=True)
    assert batch["genre"].tolist() == [0]


def test_bad_numbers() -> None:
    with pytest.raises(ValueError, match=r"'geo': expected 2 number"):
        encode_records(VARS, [{"geo": 1.0}])
    with pytest.raises(ValueError, match=r"'geo': expected a number"):
        encode_records(VARS, [{"geo": ["north", 1.0]}])


# --------------------------------------------------------------------------- ContextEncoder


def test_encoder_is_relu_of_linear_over_concatenation() -> None:
    enc = make_encoder()
    batch = encode_records(VARS, [{"genre": "chat", "geo": [0.25, 2.0], "speaker": "b"}])
    x = torch.cat(
        [
            enc.embeddings[0].weight[2],  # genre=chat
            torch.tensor([0.25, 2.0], dtype=torch.float64),
            enc.embeddings[1].weight[1],  # speaker=b
        ]
    )
    expected = torch.relu(enc.proj.weight @ x + enc.proj.bias)
    torch.testing.assert_close(enc(batch)[0], expected)


def _with(record: dict, **fields: object) -> dict:
    return {**record, **fields}


def test_missing_categorical_is_frequency_weighted_mean_of_c() -> None:
    enc = make_encoder()
    base = {"geo": [0.3, -0.2], "speaker": "c"}
    missing = enc(encode_records(VARS, [base]))[0]
    per_value = torch.stack(
        [enc(encode_records(VARS, [_with(base, genre=v)]))[0] for v in GENRE.values]
    )  # (3, k)
    weights = torch.tensor(GENRE.counts, dtype=torch.float64) / sum(GENRE.counts)
    torch.testing.assert_close(missing, weights @ per_value)
    # The test discriminates: the ReLU makes E[c] differ from c at the mean embedding, and
    # the counts make it differ from the uniform mean.
    mean_emb = weights @ enc.embeddings[0].weight
    x = torch.cat([mean_emb, torch.tensor([0.3, -0.2]).double(), enc.embeddings[1].weight[2]])
    at_mean = F.relu(enc.proj(x))
    assert (at_mean - missing).abs().max() > 1e-3
    assert (per_value.mean(0) - missing).abs().max() > 1e-3


def test_two_missing_categoricals_enumerate_all_combinations() -> None:
    enc = make_encoder(seed=1)
    base = {"geo": [1.0, 0.0]}
    missing = enc(encode_records(VARS, [base]))[0]
    total = torch.zeros_like(missing)
    for g, pg in zip(GENRE.values, GENRE.probabilities, strict=True):
        for s, ps in zip(SPEAKER.values, SPEAKER.probabilities, strict=True):
            c = enc(encode_records(VARS, [_with(base, genre=g, speaker=s)]))[0]
            total += pg * ps * c
    torch.testing.assert_close(missing, total)


def test_enumeration_in_chunks_gives_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    enc = make_encoder(seed=2)
    batch = encode_records(VARS, [None, {"genre": "news"}, {"speaker": "a"}, None])
    whole = enc(batch)
    monkeypatch.setattr(context_module, "_ENUM_CHUNK_ELEMENTS", 7)
    torch.testing.assert_close(enc(batch), whole)


def test_missing_numerical_uses_training_mean_per_component() -> None:
    enc = make_encoder()
    got = enc(encode_records(VARS, [{"genre": "news", "speaker": "a", "geo": [None, 4.0]}]))
    want = enc(encode_records(VARS, [{"genre": "news", "speaker": "a", "geo": [0.5, 4.0]}]))
    torch.testing.assert_close(got, want)
    all_missing = enc(encode_records(VARS, [{"genre": "news", "speaker": "a"}]))
    at_mean = enc(encode_records(VARS, [{"genre": "news", "speaker": "a", "geo": [0.5, -1.5]}]))
    torch.testing.assert_close(all_missing, at_mean)


def test_mixed_batch_rows_are_independent() -> None:
    enc = make_encoder(seed=3)
    records = [{"genre": "sport", "speaker": "b", "geo": [1, 1]}, None, {"speaker": "d"}]
    together = enc(encode_records(VARS, records))
    for i, record in enumerate(records):
        torch.testing.assert_close(together[i], enc(encode_records(VARS, [record]))[0])
    # An empty batch (or None) with a batch size: every variable missing.
    torch.testing.assert_close(enc(None, batch_size=3), together[1].expand(3, -1))


def test_encoder_batch_validation() -> None:
    enc = make_encoder()
    with pytest.raises(ValueError, match="unknown variables"):
        enc({"genre": torch.tensor([0]), "mood": torch.tensor([0])})
    with pytest.raises(ValueError, match=r"value ids must be in \[-1, 3\)"):
        enc({"genre": torch.tensor([3])})
    with pytest.raises(ValueError, match="LongTensor"):
        enc({"genre": torch.tensor([0.0])})
    with pytest.raises(ValueError, match="different row counts"):
        enc({"genre": torch.tensor([0, 1]), "speaker": torch.tensor([0])})
    with pytest.raises(ValueError, match="distinct"):
        ContextEncoder((GENRE, GENRE), 3)


# --------------------------------------------------------------------------- text variables

PREVIOUS = ContextVariable.text("previous", "hash:8", 8, [0.1 * i for i in range(8)])


def test_text_variable_json_and_validation() -> None:
    data = json.loads(json.dumps(PREVIOUS.to_json()))
    assert data == {
        "name": "previous",
        "kind": "text",
        "dim": 8,
        "mean": [0.1 * i for i in range(8)],
        "encoder": "hash:8",
    }
    assert ContextVariable.from_json(data) == PREVIOUS and PREVIOUS.input_dim == 8
    with pytest.raises(ValueError, match="needs its string encoder's spec"):
        ContextVariable(name="p", kind="text", dim=8)
    with pytest.raises(ValueError, match="encoder is for text variables only"):
        ContextVariable(name="p", kind="numerical", dim=8, encoder="hash:8")
    with pytest.raises(ValueError, match="encoder is for text variables only"):
        ContextVariable(name="p", kind="categorical", values=("a",), embed_dim=2, encoder="x")
    with pytest.raises(ValueError, match="categorical only"):
        ContextVariable(name="p", kind="text", dim=8, encoder="hash:8", values=("a",))


def test_old_checkpoint_variables_load_unchanged() -> None:
    # context_vars of a config.json written before text variables existed
    old = [
        {"name": "genre", "kind": "categorical", "values": ["a", "b"], "counts": [3, 1],
         "embed_dim": 2, "one_hot_bias": True},
        {"name": "geo", "kind": "numerical", "dim": 2, "mean": [0.5, -1.5]},
    ]  # fmt: skip
    variables = [ContextVariable.from_json(v) for v in old]
    assert [v.to_json() for v in variables] == old  # written back byte for byte
    assert [v.encoder for v in variables] == ["", ""]


def test_text_values_are_embedded_by_their_encoder_missing_ones_nan() -> None:
    from rescorer.lm_models.text_encoders import HashEmbedder

    records = [{"previous": "the cat sat"}, {"previous": ""}, None, {"previous": "  "}, {}]
    batch = encode_records([PREVIOUS, GENRE], records)
    got = batch["previous"]
    assert got.shape == (5, 8) and got.dtype == torch.float32
    want = torch.from_numpy(HashEmbedder(8).embed(["the cat sat"]))
    torch.testing.assert_close(got[0:1], want)
    assert torch.isnan(got[1:]).all()
    with pytest.raises(ValueError, match="'previous': expected a string, got int"):
        encode_records([PREVIOUS], [{"previous": 3}])


def test_a_text_variable_is_a_numerical_one_fed_its_vector() -> None:
    from rescorer.lm_models.text_encoders import HashEmbedder

    geo8 = ContextVariable.numerical("previous", 8, PREVIOUS.mean)
    torch.manual_seed(0)
    text_enc = ContextEncoder((GENRE, PREVIOUS), 5)
    num_enc = ContextEncoder((GENRE, geo8), 5)
    num_enc.load_state_dict(text_enc.state_dict())
    texts = ["a b c", "the previous sentences", "a b c"]
    vectors = HashEmbedder(8).embed(texts).tolist()
    got = text_enc(encode_records(text_enc.variables, [{"previous": t} for t in texts]))
    want = num_enc(encode_records(num_enc.variables, [{"previous": v} for v in vectors]))
    torch.testing.assert_close(got, want)
    # a missing text is the training mean vector, as a missing numerical variable is
    missing = text_enc(encode_records(text_enc.variables, [{"genre": "news"}]))
    at_mean = num_enc(encode_records(num_enc.variables, [{"genre": "news", "previous": geo8.mean}]))
    torch.testing.assert_close(missing, at_mean)
    assert "previous" not in " ".join(text_enc.state_dict())  # the encoder is not a weight


def test_text_vectors_are_cached_per_distinct_string(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(context_module, "_TEXT_CACHES", {})
    cache = context_module.text_encoder("hash:8")
    embedded: list[str] = []
    embed = cache.embedder.embed
    monkeypatch.setattr(
        cache.embedder, "embed", lambda texts: embedded.extend(texts) or embed(texts)
    )
    encode_records([PREVIOUS], [{"previous": t} for t in ["x y", "z", "x y", "z"]])
    encode_records([PREVIOUS], [{"previous": "x y"}, {"previous": "w"}])
    assert embedded == ["x y", "z", "w"]
    # past the bound the cache starts again
    monkeypatch.setattr(context_module, "TEXT_CACHE_STRINGS", 3)
    encode_records([PREVIOUS], [{"previous": "v"}])
    assert len(cache) == 1 and embedded[-1] == "v"


def test_an_encoder_of_another_width_is_refused() -> None:
    wrong = ContextVariable.text("previous", "hash:4", 8)
    with pytest.raises(ValueError, match=r"encoder 'hash:4' gives 4-dim vectors.*dim=8"):
        encode_records([wrong], [{"previous": "some text"}])
    with pytest.raises(ValueError, match="expected minilm, st:PATH, hf:PATH or hash:DIM"):
        encode_records([ContextVariable.text("p", "bert", 8)], [{"p": "some text"}])
