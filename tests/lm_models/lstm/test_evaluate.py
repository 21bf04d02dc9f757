"""Perplexity per context value and generative classification (eq. 7)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from rescorer.lm_models.checkpoint import load_checkpoint
from rescorer.lm_models.corpora import read_jsonl, split_documents
from rescorer.lm_models.lstm.evaluate import classify, document_logprobs, perplexity
from rescorer.lm_models.lstm.train import train
from rescorer.lm_models.vocab import Vocabulary

from .test_train import config, write_corpus

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("eval")
    corpus = write_corpus(root / "c.jsonl", n_docs=60)
    train(config(corpus, "factor", epochs=6), root, root / "out", progress=False)
    return corpus, root / "out" / "best"


def test_classification_finds_the_topic(trained: tuple[Path, Path]) -> None:
    corpus, ckpt = trained
    model, tokens, _ = load_checkpoint(ckpt)
    vocab = Vocabulary(tokens)
    _, dev, _ = split_documents(read_jsonl(corpus), (0.7, 0.3, 0.0), "topic", 0)
    report = classify(model, vocab, dev, "topic", ["money", "sport"], CPU)
    # Five sentences of mostly topic words: the topic is easy to tell.
    assert report.accuracy >= 0.9
    assert sum(map(sum, report.confusion)) == len(dev)
    assert sum(report.confusion[i][i] for i in range(2)) == round(report.accuracy * len(dev))
    # The locked scoring agrees with the dynamic model under each value.
    for doc, pred in list(zip(dev, report.predictions, strict=True))[:4]:
        scores = [
            document_logprobs(model, vocab, [doc], [{"topic": v}], CPU)[0][0]
            for v in ("money", "sport")
        ]
        assert pred == ("money", "sport")[int(np.argmax(scores))]
    assert "money" in report.table()


def test_perplexity_per_value_combines_to_the_total(trained: tuple[Path, Path]) -> None:
    corpus, ckpt = trained
    model, tokens, _ = load_checkpoint(ckpt)
    vocab = Vocabulary(tokens)
    docs = read_jsonl(corpus)[:10]
    rep = perplexity(model, vocab, docs, "topic", CPU)
    assert set(rep.per_value) == {"money", "sport"}
    assert sum(n for _, n in rep.per_value.values()) == rep.tokens
    log_total = sum(n * math.log(p) for p, n in rep.per_value.values())
    assert math.exp(log_total / rep.tokens) == pytest.approx(rep.perplexity, rel=1e-9)
    # tokens: every word plus one </s> per sentence
    assert rep.tokens == sum(len(s) + 1 for d in docs for s in d.sentences)


def test_unadapted_models_cannot_classify(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "c.jsonl", n_docs=10)
    train(config(corpus, "unadapted", epochs=1), tmp_path, tmp_path / "u", progress=False)
    model, tokens, _ = load_checkpoint(tmp_path / "u" / "best")
    with pytest.raises(ValueError, match="unadapted"):
        classify(model, Vocabulary(tokens), read_jsonl(corpus), "topic", ["a", "b"], CPU)


def test_classify_and_inspect_commands(trained: tuple[Path, Path], tmp_path: Path) -> None:
    from click.testing import CliRunner

    from rescorer.cli.main import main

    corpus, ckpt = trained
    result = CliRunner().invoke(
        main, ["classify", "--model", str(ckpt), "--docs", str(corpus), "--field", "topic"]
    )
    assert result.exit_code == 0, result.output
    accuracy = float(result.output.split()[1])
    assert accuracy >= 90.0 and "over 60 documents" in result.output
    png = tmp_path / "pca.png"
    result = CliRunner().invoke(
        main, ["inspect", "--model", str(ckpt), "--field", "topic", "--top", "3", "--pca", str(png)]
    )
    assert result.exit_code == 0, result.output
    lines = dict(line.split(": ", 1) for line in result.output.splitlines()[:2])
    # Each topic boosts its own words (the corpus draws 60 % of words from them).
    assert set(lines["sport"].split()) <= {"ball", "goal", "team", "score", "match"}
    assert set(lines["money"].split()) <= {"bank", "price", "stock", "market", "fund"}
    assert png.read_bytes()[:4] == b"\x89PNG"
    bad = CliRunner().invoke(main, ["inspect", "--model", str(ckpt), "--field", "genre"])
    assert bad.exit_code == 2 and "no context variable 'genre'" in bad.output


def test_documents_score_as_the_sum_of_their_sentences(trained: tuple[Path, Path]) -> None:
    from rescorer.lm_models.corpora import Document
    from rescorer.lm_models.lstm.evaluate import report_from_scores, value_scores

    corpus, ckpt = trained
    model, tokens, _ = load_checkpoint(ckpt)
    vocab = Vocabulary(tokens)
    docs = read_jsonl(corpus)[:6]
    values = ["money", "sport"]
    whole = value_scores(model, vocab, docs, "topic", values, CPU)
    sentences = [
        Document(f"{d.doc_id}#{i}", (s,), d.fields) for d in docs for i, s in enumerate(d.sentences)
    ]
    parts = value_scores(model, vocab, sentences, "topic", values, CPU)
    summed = parts.reshape(len(docs), -1, len(values)).sum(axis=1)  # 5 sentences each
    np.testing.assert_allclose(summed, whole, rtol=1e-9, atol=1e-6)
    rep = report_from_scores(whole, [d.fields["topic"] for d in docs], values)
    assert rep == classify(model, vocab, docs, "topic", values, CPU)


def test_classify_command_refuses_empty_documents(
    trained: tuple[Path, Path], tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from rescorer.cli.main import main

    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    _, ckpt = trained
    result = CliRunner().invoke(
        main, ["classify", "--model", str(ckpt), "--docs", str(empty), "--field", "topic"]
    )
    assert result.exit_code == 2 and "no documents in it" in result.output
