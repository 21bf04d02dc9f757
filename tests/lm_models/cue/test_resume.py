"""Resumable CUE stages (rescorer.lm_models.cue.resume): a stage stopped after an epoch and called
again with its folder ends where an uninterrupted run ends."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from rescorer.lm_models.cue.train import (
    CUETrainOptions,
    StageResult,
    make_data,
    train_cue,
    train_sentence_lm,
)
from rescorer.lm_models.text_encoders import HashEmbedder, VectorCache
from tests.lm_models.cue.test_cue import CTX_DIM, FIELDS, tiny_corpus, tiny_lm

pytestmark = pytest.mark.usefixtures("one_torch_thread")

OPTS = CUETrainOptions(epochs=3, max_tokens=60, lr=1e-2, seed=4)


def _run(mode: str, opts: CUETrainOptions, resume: Path | None) -> tuple[dict, StageResult]:
    """A fresh model (dropout on, so the dropout generator matters) trained in ``mode``."""
    lm = tiny_lm(seed=1, dropout=0.2)
    sents, records = tiny_corpus(40)
    data = make_data(lm.vocab, sents, records, FIELDS, VectorCache(HashEmbedder(CTX_DIM)))
    result = train_cue(lm.model, data, data, mode, opts, resume=resume)
    return {k: v.clone() for k, v in lm.model.state_dict().items()}, result


@pytest.mark.parametrize("mode", ["joint", "proxy"])
def test_a_stopped_stage_resumes_to_the_uninterrupted_result(mode: str, tmp_path: Path) -> None:
    whole, expected = _run(mode, OPTS, None)
    folder = tmp_path / "stage"
    # The first call stops after epoch 1 (its time budget is spent at once), the second goes on.
    _, first = _run(mode, replace(OPTS, max_seconds=1e-9), folder)
    assert [e.epoch for e in first.epochs] == [1]
    resumed, result = _run(mode, OPTS, folder)
    assert [e.epoch for e in result.epochs] == [1, 2, 3]
    assert [e.dev for e in result.epochs] == [e.dev for e in expected.epochs]
    assert [e.train_loss for e in result.epochs] == [e.train_loss for e in expected.epochs]
    assert (result.best_epoch, result.best_dev) == (expected.best_epoch, expected.best_dev)
    assert result.initial_dev == expected.initial_dev
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)


def test_with_other_generator_states_the_run_differs(tmp_path: Path) -> None:
    """The check above can fail: the same saved weights and optimizer, but a batch generator
    in another state, do not reproduce the uninterrupted run."""
    _, expected = _run("joint", OPTS, None)
    folder = tmp_path / "stage"
    _run("joint", replace(OPTS, max_seconds=1e-9), folder)
    rng = load_file(str(folder / "rng.safetensors"))
    rng["batches"] = torch.Generator().manual_seed(99).get_state()
    save_file(rng, str(folder / "rng.safetensors"))
    _, result = _run("joint", OPTS, folder)
    assert [e.dev for e in result.epochs][1:] != [e.dev for e in expected.epochs][1:]


def test_a_damaged_folder_is_a_clear_error(tmp_path: Path) -> None:
    folder = tmp_path / "stage"
    _run("joint", replace(OPTS, max_seconds=1e-9), folder)
    (folder / "rng.safetensors").unlink()
    with pytest.raises(ValueError, match=r"stage: cannot read the saved stage .*rng"):
        _run("joint", OPTS, folder)


def test_a_finished_stage_called_again_trains_no_further(tmp_path: Path) -> None:
    folder = tmp_path / "stage"
    weights, result = _run("joint", OPTS, folder)
    again, second = _run("joint", OPTS, folder)
    assert second.epochs == result.epochs and second.best_dev == result.best_dev
    assert all(torch.equal(weights[k], again[k]) for k in weights)


def test_a_folder_of_another_run_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "stage"
    _run("joint", replace(OPTS, max_seconds=1e-9), folder)
    with pytest.raises(ValueError, match=r"another run \(lr 0\.01 \(this run: 0\.02\)\)"):
        _run("joint", replace(OPTS, lr=2e-2), folder)
    with pytest.raises(ValueError, match="stage 'CUE joint' \\(this run: 'CUE adapt'\\)"):
        _run("adapt", OPTS, folder)


def test_the_sentence_lm_stage_resumes(tmp_path: Path) -> None:
    lm = tiny_lm(seed=2)
    sents, records = tiny_corpus(40)
    data = make_data(lm.vocab, sents, records, FIELDS, VectorCache(HashEmbedder(CTX_DIM)))
    opts = CUETrainOptions(epochs=2, max_tokens=60, lr=1e-2)

    def fresh() -> torch.nn.Module:
        torch.manual_seed(0)
        return type(lm.model.sentence)(lm.config.sentence)

    a = fresh()
    expected = train_sentence_lm(a, data, data, opts)
    b = fresh()
    train_sentence_lm(b, data, data, replace(opts, max_seconds=1e-9), resume=tmp_path / "s")
    c = fresh()
    result = train_sentence_lm(c, data, data, opts, resume=tmp_path / "s")
    assert [e.dev for e in result.epochs] == [e.dev for e in expected.epochs]
    sa, sc = a.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sc[k]) for k in sa)


def test_max_seconds_is_validated() -> None:
    with pytest.raises(ValueError, match="max_seconds must be > 0"):
        CUETrainOptions(max_seconds=0)
