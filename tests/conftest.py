"""Shared fixtures: the real data folder, a hand-written ARPA model, small ESPnet sets."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from rescorer.core.data import default_data_dir
from rescorer.core.runtime import THREADS_ENV

# The bad-input suite's cases by class (@pytest.mark.bad_input), counted in the summary.
pytest_plugins = ["tests.bad_input_classes"]

# CLI invocations in tests leave torch's thread count alone (the CLI's default is "auto"): the
# tests of --threads pass it explicitly.
os.environ.setdefault(THREADS_ENV, "default")

DATA_DIR = default_data_dir()
ESPNET_DIR = DATA_DIR / "nbest" / "librispeech-espnet"


@pytest.fixture()
def restore_logging() -> Iterator[None]:
    """``main`` reconfigures the root logger onto the runner's (soon closed) stderr; undo it
    after the test (``pytestmark = pytest.mark.usefixtures("restore_logging")``)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """One torch thread for a module's tests (``pytestmark = pytest.mark.usefixtures(...)``):
    with tiny models, thread start-up and contention cost more than they save."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA_DIR.is_dir():
        pytest.skip(f"real data not found at {DATA_DIR} (set RESCORER_DATA)")
    return DATA_DIR


@pytest.fixture(scope="session")
def espnet_dir() -> Path:
    if not (ESPNET_DIR / "dev_clean").is_dir():
        pytest.skip(f"LibriSpeech ESPnet N-best lists not found at {ESPNET_DIR}")
    return ESPNET_DIR


# A bigram whose probabilities are easy to follow by hand (log10, as ARPA files hold them).
TINY_ARPA = """\\data\\
ngram 1=5
ngram 2=4

\\1-grams:
-1.0\t<unk>\t0
-99\t<s>\t-0.30103
-0.69897\t</s>\t0
-0.52288\ta\t-0.1
-0.52288\tb\t-0.2

\\2-grams:
-0.30103\t<s> a
-0.39794\ta b
-0.2\tb </s>
-0.5\ta </s>

\\end\\
"""


@pytest.fixture()
def tiny_arpa(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.arpa"
    path.write_text(TINY_ARPA, encoding="utf-8")
    return path


Utt = Mapping[str, object]


def write_espnet_set(
    root: Path,
    utts: Sequence[tuple[str, Sequence[tuple[str, float, float, float]]]],
    refs: Mapping[str, str] | None = None,
) -> Path:
    """An ESPnet set folder: utts = [(utt_id, [(text, decoder, ctc, lm), ...]), ...].

    ``score`` is written as 0.6 decoder + 0.4 ctc + 0.6 lm, as in the real lists.
    """
    n = max(len(h) for _, h in utts)
    for k in range(1, n + 1):
        d = root / "raw_hypotheses" / f"{k}best_recog"
        d.mkdir(parents=True, exist_ok=True)
        text, score, scores = [], [], []
        for utt, hyps in utts:
            if k > len(hyps):
                continue
            words, dec, ctc, lm = hyps[k - 1]
            text.append(f"{utt} {words}".rstrip())
            score.append(f"{utt} tensor({0.6 * dec + 0.4 * ctc + 0.6 * lm:.4f})")
            scores.append(
                f'{utt} {{"decoder": "tensor({dec})", "ctc": "tensor({ctc})", '
                f'"lm": "tensor({lm})"}}'
            )
        (d / "text").write_text("\n".join(text) + "\n", encoding="utf-8")
        (d / "score").write_text("\n".join(score) + "\n", encoding="utf-8")
        (d / "scores").write_text("\n".join(scores) + "\n", encoding="utf-8")
    if refs is not None:
        (root / "references").mkdir(parents=True, exist_ok=True)
        lines = [f"{words}\t(spk-{utt})" for utt, words in refs.items()]
        (root / "references" / "ref_wer.trn").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture()
def espnet_factory(tmp_path: Path) -> Callable[..., Path]:
    def make(name: str, utts, refs=None) -> Path:  # type: ignore[no-untyped-def]
        return write_espnet_set(tmp_path / name, utts, refs)

    return make
