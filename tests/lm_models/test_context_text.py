"""Derived text contexts (rescorer.lm_models.context_text): previous sentences of the same document
only, ASR-like noise at its rates, seeded draws."""

from __future__ import annotations

import random

import pytest

from rescorer.lm_models.context_text import WordNoise, WordSampler, corrupt, previous_texts
from rescorer.lm_models.corpora import Document

N_WORDS = 120_000  # clean words the rates are measured over (5 standard errors ~ 0.004)
TOLERANCE = 0.005


def unique_doc(doc: int, sentences: int, words: int = 3) -> Document:
    """Every word names its document, sentence and position: d{doc}s{i}w{j}."""
    return Document(
        f"doc{doc}",
        [[f"d{doc}s{i}w{j}" for j in range(words)] for i in range(sentences)],
    )


def test_previous_texts_are_the_k_earlier_sentences_of_the_same_document() -> None:
    docs = [unique_doc(d, 6) for d in range(3)]
    for doc in docs:
        texts = previous_texts(doc, 2)
        assert texts[0] is None  # a document's first sentence has no earlier text
        for i, text in enumerate(texts[1:], start=1):
            expected = [w for s in doc.sentences[max(0, i - 2) : i] for w in s]
            assert text == " ".join(expected)
            # nothing of the sentence itself, of later ones, or of another document
            assert all(w.startswith(f"d{doc.doc_id[3:]}s") for w in text.split())
            assert all(int(w.split("s")[1].split("w")[0]) < i for w in text.split())
    # the order documents come in changes nothing
    assert [previous_texts(d, 2) for d in reversed(docs)] == [previous_texts(d, 2) for d in docs][
        ::-1
    ]
    with pytest.raises(ValueError, match="integer >= 1"):
        previous_texts(docs[0], 0)


def test_earlier_sentences_without_words_give_none() -> None:
    doc = Document("x", [["a"], [], ["b"]])
    assert previous_texts(doc, 1) == [None, "a", None]
    assert previous_texts(doc, 3) == [None, "a", "a"]


def sampler() -> WordSampler:
    # Substitutes and insertions never equal a clean word (those all start with "d").
    return WordSampler({f"x{i}": 100 - i for i in range(50)})


def rates(noise: WordNoise) -> tuple[float, float]:
    """(clean words missing, drawn words present) per clean word over N_WORDS words."""
    draw = sampler()
    rng = random.Random(7)
    missing = drawn = 0
    for start in range(0, N_WORDS, 20):
        words = [f"d{start + j}" for j in range(20)]
        out = corrupt(words, noise, draw, rng)
        kept = [w for w in out if w.startswith("d")]
        assert kept == [w for w in words if w in set(kept)]  # kept words stay in order
        missing += len(words) - len(kept)
        drawn += len(out) - len(kept)
    return missing / N_WORDS, drawn / N_WORDS


@pytest.mark.parametrize(
    ("sub", "dele", "ins"),
    [(0.1, 0.0, 0.0), (0.0, 0.08, 0.0), (0.0, 0.0, 0.05), (0.06, 0.03, 0.02)],
)
def test_noise_rates_hold_on_a_large_sample(sub: float, dele: float, ins: float) -> None:
    missing, drawn = rates(WordNoise(substitution=sub, deletion=dele, insertion=ins, seed=1))
    # a substitution removes a clean word and adds a drawn one; a deletion only removes; an
    # insertion only adds: with each rate alone, or all three, the counts pin every rate
    assert missing == pytest.approx(sub + dele, abs=TOLERANCE)
    assert drawn == pytest.approx(sub + ins, abs=TOLERANCE)


def test_substitutes_differ_from_the_word_and_follow_training_counts() -> None:
    draw = WordSampler({"a": 900, "b": 90, "c": 10})
    rng = random.Random(3)
    subs = [draw.substitute("a", rng) for _ in range(20_000)]
    assert "a" not in subs
    assert subs.count("b") / len(subs) == pytest.approx(0.9, abs=0.02)  # 90 : 10
    inserted = corrupt(["z"] * 20_000, WordNoise(insertion=1.0), draw, rng)[1::2]
    assert inserted.count("a") / len(inserted) == pytest.approx(0.9, abs=0.02)


def test_same_seed_same_noise_other_seed_or_epoch_other_noise() -> None:
    doc = unique_doc(0, 40, words=8)
    noise = WordNoise(substitution=0.2, deletion=0.1, insertion=0.1, seed=5)
    a = previous_texts(doc, 3, noise, sampler(), epoch=1)
    assert a == previous_texts(doc, 3, noise, sampler(), epoch=1)
    assert a != previous_texts(doc, 3, noise, sampler(), epoch=2)
    other = WordNoise(substitution=0.2, deletion=0.1, insertion=0.1, seed=6)
    assert a != previous_texts(doc, 3, other, sampler(), epoch=1)
    assert a != previous_texts(doc, 3)  # the clean text
    # one draw per sentence and epoch: a sentence's errors are the same in every context
    # holding it (one ASR output per utterance)
    noisy = previous_texts(doc, 1, noise, sampler(), epoch=1)  # noisy[i]: sentence i - 1
    for i in range(3, len(doc.sentences)):
        assert a[i] == " ".join(t for t in noisy[i - 2 : i + 1] if t)


def test_noise_validation() -> None:
    with pytest.raises(ValueError, match=r"noise.deletion: expected a rate in \[0, 1\]"):
        WordNoise(deletion=1.5)
    with pytest.raises(ValueError, match="substitution \\+ deletion"):
        WordNoise(substitution=0.6, deletion=0.6)
    with pytest.raises(ValueError, match="seed"):
        WordNoise(seed=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="WordSampler"):
        previous_texts(unique_doc(0, 2), 1, WordNoise(deletion=0.1))
    with pytest.raises(ValueError, match="some training words"):
        WordSampler({})
    assert not WordNoise().active
