"""TrainingSummary: what a training folder says of its run, read without building the model."""

from __future__ import annotations

from pathlib import Path

from rescorer.lm_models.checkpoint import load_checkpoint
from rescorer.lm_models.lstm.summary import TrainingSummary, output_layer
from rescorer.lm_models.lstm.train import train
from tests.lm_models.lstm.test_train import config, write_corpus


def test_summary_of_a_run(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "c.jsonl")
    result = train(
        config(corpus, "unadapted", epochs=2, model={"num_classes": 3, "shortlist": 4}),
        tmp_path,
        tmp_path / "out",
        progress=False,
    )
    run = TrainingSummary.of(tmp_path / "out")
    model, tokens, _ = load_checkpoint(tmp_path / "out" / "best")
    assert run.parameters == sum(p.numel() for p in model.parameters())
    assert run.vocab_size == len(tokens) and run.units == "words"
    assert run.epochs == 2 and run.tokens == sum(e.tokens for e in result.epochs)
    assert run.dev_ppl == result.best_dev_ppl and run.best_epoch == result.best_epoch
    assert (
        run.output
        == "a class-factored softmax (4 frequent units each a class, 3 clusters of the rest)"
    )


def test_output_layer_in_words() -> None:
    assert output_layer({"num_classes": 0}) == "the full softmax"
    assert output_layer({"num_classes": 0}, sampled=512) == "a sampled softmax of 512"
    assert output_layer({"num_classes": 200}) == "a class-factored softmax (200 frequency classes)"


def test_summary_of_a_best_folder_alone(tmp_path: Path) -> None:
    # A run copied without last/ (trained elsewhere): best/ carries the epochs up to the best.
    import shutil

    corpus = write_corpus(tmp_path / "c.jsonl")
    result = train(
        config(corpus, "unadapted", epochs=2), tmp_path, tmp_path / "out", progress=False
    )
    shutil.rmtree(tmp_path / "out" / "last")
    run = TrainingSummary.of(tmp_path / "out")
    upto = [e for e in result.epochs if e.epoch <= result.best_epoch]
    assert run.epochs == len(upto) and run.tokens == sum(e.tokens for e in upto)
    assert run.training_words().startswith(f"{len(upto)} epoch(s): {run.tokens:,} tokens seen")
