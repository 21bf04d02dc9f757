"""Checkpoint folders: round trips, atomic writes, and refusal of tampered files."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from rescorer.core.errors import OutputError
from rescorer.lm_models import checkpoint as checkpoint_module
from rescorer.lm_models.checkpoint import MODEL_TYPES, load_checkpoint, save_checkpoint
from rescorer.lm_models.lstm.context import ContextVariable
from rescorer.lm_models.lstm.model import ContextLSTM, LSTMConfig

VARS = (
    ContextVariable.categorical("genre", ["news", "chat"], [3, 1], embed_dim=2, one_hot_bias=True),
    ContextVariable.numerical("geo", 2, [1.0, 2.0]),
)
VOCAB = ["<unk>", "<s>", "</s>", "the", "cat", "sat", "naïve", "a b"]
RECORDS = [{"genre": "chat", "geo": [0.5, 0.1]}, None, {"geo": [3.0, -1.0]}]


def make_model(mode: str = "factor") -> ContextLSTM:
    torch.manual_seed(0)
    kwargs: dict = dict(vocab_size=len(VOCAB), embed_dim=4, hidden_dim=6, num_layers=2, mode=mode)
    if mode != "unadapted":
        kwargs.update(context_dim=3, context_vars=VARS, rank=2 if mode == "factor" else 0)
    model = ContextLSTM(LSTMConfig(**kwargs, layer_norm=True))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


@pytest.fixture()
def saved(tmp_path: Path) -> Path:
    return save_checkpoint(tmp_path / "ckpt", make_model(), VOCAB, {"steps": 3, "ppl": 9.5})


def test_round_trip_identical_log_probs(tmp_path: Path) -> None:
    toks = torch.randint(0, len(VOCAB), (3, 5), generator=torch.Generator().manual_seed(0))
    for mode in ("factor", "concat", "softmax_bias", "unadapted"):
        model = make_model(mode)
        path = save_checkpoint(tmp_path / mode, model, VOCAB, {"mode": mode})
        assert sorted(p.name for p in path.iterdir()) == [
            "config.json",
            "model.safetensors",
            "training.json",
            "vocab.txt",
        ]
        loaded, vocab, meta = load_checkpoint(path)
        assert isinstance(loaded, ContextLSTM) and loaded.config == model.config
        assert vocab == VOCAB and meta == {"mode": mode}
        assert not loaded.training
        torch.testing.assert_close(
            loaded(toks, RECORDS)[0], model(toks, RECORDS)[0], atol=0, rtol=0
        )


def test_locked_model_round_trip(tmp_path: Path) -> None:
    locked = make_model().lock({"genre": "news"})
    loaded, _, meta = load_checkpoint(save_checkpoint(tmp_path / "locked", locked, VOCAB))
    assert meta is None and loaded.config.mode == "unadapted"
    toks = torch.tensor([[1, 3, 4, 5]])
    torch.testing.assert_close(loaded(toks)[0], locked(toks)[0], atol=0, rtol=0)


def test_files_are_what_the_format_says(saved: Path) -> None:
    header = json.loads((saved / "config.json").read_text())
    assert header["format"] == "rescorer-checkpoint" and header["format_version"] == 1
    assert header["model_type"] == "context_lstm"
    assert LSTMConfig.from_json(header["config"]) == make_model().config
    assert (saved / "vocab.txt").read_text(encoding="utf-8") == "\n".join(VOCAB) + "\n"
    weights = load_file(str(saved / "model.safetensors"))
    assert set(weights) == set(make_model().state_dict())
    assert MODEL_TYPES["context_lstm"] == (LSTMConfig, ContextLSTM)


def test_overwrite_and_no_leftovers(tmp_path: Path) -> None:
    path = tmp_path / "ckpt"
    save_checkpoint(path, make_model("concat"), VOCAB)
    save_checkpoint(path, make_model("factor"), VOCAB, {"second": True})
    model, _, meta = load_checkpoint(path)
    assert model.config.mode == "factor" and meta == {"second": True}
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]  # no temporary folders left


def test_folder_mode_is_the_umask_default_or_kept(tmp_path: Path) -> None:
    mask = os.umask(0o022)
    try:
        path = save_checkpoint(tmp_path / "ckpt", make_model(), VOCAB)
        assert stat.S_IMODE(path.stat().st_mode) == 0o755  # not a temporary folder's 0700
        os.chmod(path, 0o750)
        save_checkpoint(path, make_model("concat"), VOCAB)
        assert stat.S_IMODE(path.stat().st_mode) == 0o750
    finally:
        os.umask(mask)


def test_refuses_to_overwrite_other_things(tmp_path: Path) -> None:
    other = tmp_path / "notes"
    other.mkdir()
    (other / "readme.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not a checkpoint folder"):
        save_checkpoint(other, make_model(), VOCAB)
    assert (other / "readme.txt").read_text() == "keep me"


def test_failed_write_leaves_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = save_checkpoint(tmp_path / "ckpt", make_model("concat"), VOCAB)

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint_module, "save_file", broken)
    # the output layer's error: one line naming the checkpoint (exit status 2 in the CLI)
    with pytest.raises(OutputError, match=r"ckpt: cannot write: disk full"):
        save_checkpoint(path, make_model("factor"), VOCAB)
    with pytest.raises(OutputError, match=r"new: cannot write: disk full"):
        save_checkpoint(tmp_path / "new", make_model("factor"), VOCAB)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    assert load_checkpoint(path)[0].config.mode == "concat"


@pytest.mark.parametrize(
    ("vocab", "message"),
    [
        (VOCAB[:-1], "7 tokens but the model's vocab_size is 8"),
        ([*VOCAB[:-1], "two\nlines"], "one-line"),
        ([*VOCAB[:-1], "the"], "distinct"),
    ],
)
def test_save_checks_the_vocabulary(tmp_path: Path, vocab: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        save_checkpoint(tmp_path / "ckpt", make_model(), vocab)
    assert not (tmp_path / "ckpt").exists()


def _edit_header(path: Path, edit) -> None:  # type: ignore[no-untyped-def]
    header = json.loads((path / "config.json").read_text())
    edit(header)
    (path / "config.json").write_text(json.dumps(header))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda h: h.update(format="pickle"), r"config\.json: expected format 'rescorer-check"),
        (lambda h: h.update(format_version=2), r"config\.json: expected format_version 1, got 2"),
        (lambda h: h.update(model_type="gpt"), r"config\.json: unknown model_type 'gpt'"),
        (lambda h: h["config"].update(rank=0), r"config\.json: invalid config: .*rank >= 1"),
        (
            lambda h: h["config"].update(depth=3),
            r"config\.json: invalid config: .*unknown LSTM config key",
        ),
        (lambda h: h["config"].update(vocab_size=9), r"vocab\.txt: has 8 tokens but .*=9"),
        (lambda h: h["config"].update(hidden_dim=7), r"model\.safetensors: tensor .* has shape"),
        (lambda h: h["config"].update(mode="concat", rank=0), r"model\.safetensors: .*Z_L"),
    ],
)
def test_tampered_config(saved: Path, edit, message: str) -> None:  # type: ignore[no-untyped-def]
    _edit_header(saved, edit)
    with pytest.raises(ValueError, match=message):
        load_checkpoint(saved)


def test_tampered_weights(saved: Path) -> None:
    weights_file = saved / "model.safetensors"
    weights = load_file(str(weights_file))
    good = dict(weights)

    weights.pop("cells.1.Z_R")
    save_file(weights, str(weights_file))
    with pytest.raises(ValueError, match=r"model\.safetensors: .*missing \['cells\.1\.Z_R'\]"):
        load_checkpoint(saved)

    save_file(good | {"extra.weight": torch.zeros(2)}, str(weights_file))
    with pytest.raises(ValueError, match=r"model\.safetensors: .*unexpected \['extra\.weight'\]"):
        load_checkpoint(saved)

    for bad in (float("nan"), float("inf")):
        poisoned = dict(good)
        poisoned["cells.1.Z_R"] = good["cells.1.Z_R"].clone()
        poisoned["cells.1.Z_R"].view(-1)[1] = bad
        save_file(poisoned, str(weights_file))
        with pytest.raises(ValueError, match=r"'cells\.1\.Z_R' holds 1 NaN/inf value"):
            load_checkpoint(saved)

    weights_file.write_bytes(weights_file.read_bytes()[:100])
    with pytest.raises(ValueError, match=r"model\.safetensors: unreadable"):
        load_checkpoint(saved)

    weights_file.unlink()
    with pytest.raises(ValueError, match=r"model\.safetensors: missing"):
        load_checkpoint(saved)


def test_tampered_vocab_and_missing_files(saved: Path, tmp_path: Path) -> None:
    vocab_file = saved / "vocab.txt"
    vocab_file.write_text("\n".join(VOCAB[:-1]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"vocab\.txt: has 7 tokens but config\.json says"):
        load_checkpoint(saved)
    vocab_file.write_text("\n".join([*VOCAB[:-1], "cat"]) + "\n", encoding="utf-8")
    with pytest.raises(
        ValueError, match=r"vocab\.txt:8: expected each token once, got 'cat' again"
    ):
        load_checkpoint(saved)
    (saved / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"config\.json:1: invalid JSON"):
        load_checkpoint(saved)
    (saved / "config.json").unlink()
    with pytest.raises(ValueError, match=r"config\.json: missing"):
        load_checkpoint(saved)
    with pytest.raises(ValueError, match="not a checkpoint folder"):
        load_checkpoint(tmp_path / "nowhere")


def test_sizes_are_checked_before_anything_is_allocated(saved: Path) -> None:
    """A config claiming a huge model (here 3 * 10**6 x 10**6 recurrent weights, ~12 TB) is
    refused by comparing shapes on the meta device with the file's header, before any memory
    is taken; building the model for real would fail with an allocation error instead."""
    _edit_header(saved, lambda h: h["config"].update(hidden_dim=10**6))
    with pytest.raises(ValueError, match=r"model\.safetensors: tensor .* has shape .*1000000"):
        load_checkpoint(saved)


def test_non_finite_weights_and_repeated_tokens_are_refused(saved: Path) -> None:
    weights_file = saved / "model.safetensors"
    weights = load_file(str(weights_file))
    good = dict(weights)
    weights["b_out"] = weights["b_out"].clone()
    weights["b_out"][3] = float("nan")
    save_file(weights, str(weights_file))
    with pytest.raises(ValueError, match=r"model\.safetensors: tensor 'b_out' holds 1 NaN/inf"):
        load_checkpoint(saved)
    save_file(good, str(weights_file))
    load_checkpoint(saved)  # the untouched weights load
    tokens = [*VOCAB[:-1], "cat"]  # 'cat' twice: two ids for one word
    (saved / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"vocab\.txt:8: expected each token once, got 'cat'"):
        load_checkpoint(saved)


def test_class_factored_models_build_on_the_meta_device_too(tmp_path: Path) -> None:
    from rescorer.lm_models.checkpoint import _expected_shapes

    cfg = LSTMConfig(vocab_size=8, embed_dim=4, hidden_dim=6, word_classes=(0, 0, 1, 1, 2, 2, 2, 3))
    shapes = _expected_shapes(ContextLSTM, cfg, tmp_path / "config.json")
    real = {k: tuple(v.shape) for k, v in ContextLSTM(cfg).state_dict().items()}
    assert shapes == real and any(k.startswith("class_output") for k in shapes)


def test_transformers_embedders_load_safetensors_only(tmp_path: Path) -> None:
    from rescorer.lm_models.text_encoders import TransformersCLSEmbedder

    folder = tmp_path / "bert"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "pytorch_model.bin").write_bytes(b"a pickle would be here")
    with pytest.raises(ValueError, match=r"pickled weights \(pytorch_model\.bin\) are not loaded"):
        TransformersCLSEmbedder(folder, "bert")
