"""The weight tuner: exact line search, envelope, recovery of known weights."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from rescorer.combine import Weights, feature_matrix, one_best
from rescorer.nbest import Hypothesis, NBest, NBestList
from rescorer.tune import (
    RISK_THREADS,
    TuneOptions,
    _column_scale,
    _Problem,
    _upper_envelope,
    tune,
)
from rescorer.wer import score_corpus


def planted_problem(
    n_utt: int = 150,
    n_hyp: int = 8,
    w_true: tuple[float, float] = (1.0, 0.5),
    length_true: float = 0.0,
    seed: int = 0,
    vary_length: bool = False,
) -> tuple[NBest, dict[str, tuple[str, ...]]]:
    """Lists whose reference is the hypothesis that `w_true` ranks first.

    Every other hypothesis differs from the reference in 1-3 words, so the true weights give
    zero errors and most other weights do not.
    """
    rng = np.random.default_rng(seed)
    lists, refs = [], {}
    for u in range(n_utt):
        utt = f"u{u:03d}"
        base = [f"w{rng.integers(50)}" for _ in range(6)]
        feats = rng.normal(size=(n_hyp, 2)) * [3.0, 5.0]
        hyps_words = []
        for h in range(n_hyp):
            words = list(base)
            for _ in range(1 + h % 3):
                words[rng.integers(len(words))] = f"x{rng.integers(1000)}"
            if vary_length and h % 3 == 1:
                words = words[:-1]
            elif vary_length and h % 3 == 2:
                words = [*words, f"y{rng.integers(1000)}"]
            hyps_words.append(tuple(words))
        totals = feats @ np.array(w_true) + length_true * np.array([len(w) for w in hyps_words])
        best = int(np.argmax(totals))
        refs[utt] = hyps_words[best]
        hyps = [
            Hypothesis(w, {"am": float(f[0]), "lm": float(f[1])})
            for w, f in zip(hyps_words, feats, strict=True)
        ]
        lists.append(NBestList(utt, hyps))
    return NBest(lists), refs


def test_recovers_planted_weights() -> None:
    nbest, refs = planted_problem()
    first = score_corpus(refs, one_best(nbest))
    assert first.total.errors > 100  # the list order is not the planted ranking
    result = tune(nbest, refs, ["am", "lm"], TuneOptions(restarts=3, tune_length=False))
    assert result.errors == 0
    assert result.initial_errors == first.total.errors  # "initial": the lists' own order
    assert result.weights.features["am"] == pytest.approx(1.0)
    # 150 lists of 8 pin the ratio down tightly.
    assert result.weights.features["lm"] == pytest.approx(0.5, abs=0.03)
    assert result.weights.length == 0.0
    # The weights select exactly the references.
    assert score_corpus(refs, one_best(nbest, result.weights)).total.errors == 0
    assert result.trace and result.trace[-1].errors_after == 0


def test_recovers_a_negative_length_weight() -> None:
    nbest, refs = planted_problem(
        n_utt=300, w_true=(1.0, 0.3), length_true=-1.5, seed=3, vary_length=True
    )
    without = tune(nbest, refs, ["am", "lm"], TuneOptions(restarts=2, tune_length=False))
    assert without.errors > 0  # the planted ranking needs the length term
    result = tune(nbest, refs, ["am", "lm"], TuneOptions(restarts=2))
    assert result.errors == 0
    assert result.weights.features["lm"] == pytest.approx(0.3, abs=0.05)
    assert result.weights.length == pytest.approx(-1.5, abs=0.25)


def test_line_search_is_exact_against_a_dense_grid() -> None:
    rng = np.random.default_rng(7)
    feats = [rng.normal(size=(rng.integers(1, 9), 3)) for _ in range(40)]
    errs = [rng.integers(0, 5, size=len(f)) for f in feats]
    problem = _Problem(feats, errs)
    w = np.array([1.0, 0.2, -0.1])
    d = np.array([0.0, 1.0, 0.5])
    step, best = problem.line_search(w, d)
    assert problem.errors(w + step * d) == best
    grid = np.linspace(-20, 20, 20001)
    assert best <= min(problem.errors(w + t * d) for t in grid[::10])
    assert best <= problem.errors(w)


def test_upper_envelope_matches_brute_force() -> None:
    rng = np.random.default_rng(11)
    for _ in range(200):
        n = int(rng.integers(1, 10))
        a = rng.integers(-3, 4, size=n).astype(float)  # small integers: many ties
        b = rng.integers(-3, 4, size=n).astype(float)
        segs = _upper_envelope(a, b)
        starts = [s[0] for s in segs]
        assert starts == sorted(starts)
        for t in rng.uniform(-10, 10, size=25):
            k = max(i for i, s in enumerate(starts) if s <= t)
            if k + 1 < len(starts) and abs(starts[k + 1] - t) < 1e-9:
                continue  # exactly at a breakpoint
            if abs(starts[k] - t) < 1e-9:
                continue
            vals = a + t * b
            # the first index among the maxima, as reranking picks
            assert segs[k][1] == int(np.flatnonzero(vals == vals.max())[0])


def test_initial_weights_and_anchor() -> None:
    nbest, refs = planted_problem(seed=5)
    init = Weights({"am": 2.0, "lm": 1.0})  # the planted ratio, scaled
    result = tune(nbest, refs, ["am", "lm"], TuneOptions(restarts=0, tune_length=False), init)
    assert result.start_errors == (0,) and result.errors == 0
    assert result.initial_errors == score_corpus(refs, one_best(nbest)).total.errors > 0
    anchored = tune(
        nbest, refs, ["am", "lm"], TuneOptions(restarts=1, anchor="lm", tune_length=False)
    )
    assert anchored.weights.features["lm"] == pytest.approx(1.0)
    assert anchored.weights.features["am"] == pytest.approx(2.0, rel=0.08)


def test_bad_arguments() -> None:
    nbest, refs = planted_problem(n_utt=5)
    with pytest.raises(ValueError, match="at least one feature"):
        tune(nbest, refs, [])
    with pytest.raises(ValueError, match="not on every hypothesis"):
        tune(nbest, refs, ["am", "nope"])
    with pytest.raises(ValueError, match="anchor"):
        tune(nbest, refs, ["am"], TuneOptions(anchor="lm"))
    with pytest.raises(ValueError, match="twice"):
        tune(nbest, refs, ["am", "am"])
    with pytest.raises(ValueError, match="max_sweeps"):
        TuneOptions(max_sweeps=0)
    with pytest.raises(ValueError, match="anchor 'am' must be > 0"):
        tune(nbest, refs, ["am", "lm"], initial=Weights({"am": -1.0, "lm": 1.0}))


def test_empty_lists_count_as_deletions() -> None:
    nbest, refs = planted_problem(n_utt=20, seed=2)
    lists = list(nbest.values()) + [NBestList("empty", ())]
    refs = {**refs, "empty": ("one", "two", "three")}
    result = tune(NBest(lists), refs, ["am", "lm"], TuneOptions(restarts=1, tune_length=False))
    assert result.errors == 3


def noisy_problem(seed: int) -> tuple[NBest, dict[str, tuple[str, ...]]]:
    """Planted lists plus a log-zero column (a few -1e30, as SRILM writes them), a column of
    huge offsets (1e12 + small differences) and many exact ties."""
    nbest, refs = planted_problem(n_utt=120, n_hyp=10, seed=seed, vary_length=True)
    rng = np.random.default_rng(seed + 100)
    lists = []
    for nb in nbest.values():
        hyps = []
        for h in nb:
            zero = rng.random() < 0.03
            scores = {
                **h.scores,
                "srilm": -1e30 if zero else float(rng.normal() * 4),
                "huge": 1e12 + float(rng.integers(0, 5)),
                "tied": float(rng.integers(0, 2)),
            }
            hyps.append(Hypothesis(h.words, scores))
        lists.append(NBestList(nb.utt_id, hyps))
    return NBest(lists), refs


@pytest.mark.parametrize("seed", range(6))
def test_reported_errors_equal_a_fresh_rescoring(seed: int, tmp_path: Path) -> None:
    nbest, refs = noisy_problem(seed)
    features = ["am", "lm", "srilm", "huge", "tied"]
    result = tune(nbest, refs, features, TuneOptions(restarts=3, seed=seed))
    # the written weights, read back as rescore reads them, give the reported count
    result.weights.save(tmp_path / "w.json")
    written = Weights.load(tmp_path / "w.json")
    rescored = score_corpus(refs, one_best(nbest, written)).total.errors
    assert result.errors == rescored == written.meta["dev_errors"]
    assert result.errors < score_corpus(refs, one_best(nbest)).total.errors


def test_log_zero_values_do_not_shrink_their_column() -> None:
    from rescorer.tune import _column_scale

    a = np.array([[0.0, 1.0], [2.0, -1e30], [4.0, 3.0]])
    b = np.array([[1.0, -1e30], [3.0, 5.0]])
    scale = _column_scale([a, b])
    np.testing.assert_allclose(scale[0], (np.std([0, 2, 4]) + np.std([1, 3])) / 2)
    assert scale[1] == pytest.approx(1.0)  # list a: std of (1, 3); list b: one value, left out


def test_non_finite_scores_are_refused_with_their_place() -> None:
    nbest, refs = planted_problem(n_utt=5)
    lists = list(nbest.values())
    hyps = list(lists[2].hyps)
    hyps[1] = Hypothesis(hyps[1].words, {**hyps[1].scores, "lm": float("nan")})
    lists[2] = NBestList(lists[2].utt_id, hyps)
    with pytest.raises(ValueError, match=r"feature 'lm' of utterance 'u002', hypothesis 2: nan"):
        tune(NBest(lists), refs, ["am", "lm"])


def test_the_reported_count_is_the_written_weights_even_when_the_search_is_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nbest, refs = noisy_problem(3)  # "am" and "tied" alone cannot get every list right
    real = _Problem.line_search

    def optimistic(
        self: _Problem, w: np.ndarray, d: np.ndarray, t_range: tuple[float, float]
    ) -> tuple[float, int]:
        step, errors = real(self, w, d, t_range)
        return step, max(errors - 7, 0)  # a search that mis-tracks its error count

    monkeypatch.setattr(_Problem, "line_search", optimistic)
    result = tune(nbest, refs, ["am", "tied"], TuneOptions(restarts=2))
    rescored = score_corpus(refs, one_best(nbest, result.weights)).total.errors
    assert rescored > 7  # so an optimistic count would show
    assert result.errors == rescored == result.weights.meta["dev_errors"]


def standardised(nbest: NBest, weights: Weights, features: list[str], anchor: str) -> np.ndarray:
    """The tuned weights in the search's units: w_k * scale_k, relative to the anchor's."""
    feats = [feature_matrix(nbest[u], features) for u in nbest]
    scale = _column_scale(feats)
    w = np.array([weights.features[n] for n in features] + [weights.length]) * scale
    return w / w[features.index(anchor)]


def test_a_bound_keeps_every_weight_in_the_box_and_the_count_exact() -> None:
    nbest, refs = noisy_problem(1)
    features = ["am", "lm", "srilm", "tied"]
    free = standardised(
        nbest, tune(nbest, refs, features, TuneOptions(restarts=4)).weights, features, "am"
    )
    assert np.abs(free[1:]).max() > 0.5  # unbounded, the search leaves the box
    result = tune(nbest, refs, features, TuneOptions(restarts=4, bound=0.5))
    boxed = standardised(nbest, result.weights, features, "am")
    assert np.abs(boxed[1:]).max() <= 0.5 + 1e-9 and np.abs(boxed[1:]).max() > 0
    assert result.errors == score_corpus(refs, one_best(nbest, result.weights)).total.errors
    assert result.weights.meta["bound"] == 0.5


def test_holdout_selection_searches_on_the_other_utterances_only() -> None:
    nbest, refs = noisy_problem(2)
    features = ["am", "lm", "srilm"]
    result = tune(nbest, refs, features, TuneOptions(restarts=0, selection="holdout"))
    kept = NBest([nbest[u] for i, u in enumerate(nbest) if i % 4 != 3])
    alone = tune(kept, {u: refs[u] for u in kept}, features, TuneOptions(restarts=0))
    for name in features:
        assert result.weights.features[name] == pytest.approx(alone.weights.features[name])
    assert result.weights.length == pytest.approx(alone.weights.length)
    # the count is the whole tuning set's, as rescoring counts it
    assert result.errors == score_corpus(refs, one_best(nbest, result.weights)).total.errors
    few = NBest([nbest[u] for u in list(nbest)[:3]])
    with pytest.raises(ValueError, match="needs at least 4 utterances"):
        tune(few, {u: refs[u] for u in few}, features, TuneOptions(selection="holdout"))
    with pytest.raises(ValueError, match="selection must be one of"):
        TuneOptions(selection="best")


def test_risk_recovers_planted_weights_and_reports_the_exact_count() -> None:
    nbest, refs = planted_problem()
    result = tune(nbest, refs, ["am", "lm"], TuneOptions(tune_length=False, method="risk"))
    # the expected-error optimum at a high gamma sits where the planted ranking is
    assert result.weights.features["lm"] == pytest.approx(0.5, abs=0.05)
    assert result.errors == score_corpus(refs, one_best(nbest, result.weights)).total.errors
    assert result.errors <= 10 and result.weights.meta["method"] == "risk"
    assert len(result.start_errors) == 1 and not result.trace  # one deterministic path


def test_risk_with_log_zero_and_huge_values_reports_the_written_count(tmp_path: Path) -> None:
    nbest, refs = noisy_problem(4)
    features = ["am", "lm", "srilm", "huge", "tied"]
    result = tune(nbest, refs, features, TuneOptions(method="risk"))
    result.weights.save(tmp_path / "w.json")
    written = Weights.load(tmp_path / "w.json")
    rescored = score_corpus(refs, one_best(nbest, written)).total.errors
    assert result.errors == rescored == written.meta["dev_errors"]
    assert all(np.isfinite(v) for v in written.features.values())
    assert result.errors < score_corpus(refs, one_best(nbest)).total.errors


def test_risk_pull_toward_the_initial_weights() -> None:
    nbest, refs = planted_problem()
    start = Weights({"am": 1.0, "lm": 0.1})
    loose = tune(nbest, refs, ["am", "lm"], TuneOptions(tune_length=False, method="risk"), start)
    tight = tune(
        nbest,
        refs,
        ["am", "lm"],
        TuneOptions(tune_length=False, method="risk", risk_l2=1e4),
        start,
    )
    assert loose.weights.features["lm"] == pytest.approx(0.5, abs=0.05)
    assert tight.weights.features["lm"] == pytest.approx(0.1, abs=0.01)  # held at the start
    with pytest.raises(ValueError, match="method must be one of"):
        TuneOptions(method="pro")
    with pytest.raises(ValueError, match="risk_gammas must be positive"):
        TuneOptions(method="risk", risk_gammas=(1.0, 0.0))


@pytest.mark.parametrize("seed", range(4))
def test_all_envelopes_at_once_equal_the_walk_of_each_list(seed: int) -> None:
    from rescorer.tune import _envelopes

    rng = np.random.default_rng(seed)
    feats = [rng.integers(-3, 4, size=(rng.integers(1, 12), 3)).astype(float) for _ in range(60)]
    problem = _Problem(feats, [np.zeros(len(f), dtype=np.int64) for f in feats])
    w, d = rng.normal(size=3), rng.integers(-2, 3, size=3).astype(float)  # ties and parallels
    A, B = problem.F @ w, problem.F @ d
    start, times, olds, news = _envelopes(A, B, problem.valid)
    for u, f in enumerate(feats):
        segs = _upper_envelope(f @ w, f @ d)
        mine = np.flatnonzero(news[0] == u)  # this list's changes, in the walk's order
        assert start[u] == segs[0][1]
        assert [(float(times[i]), int(news[1][i])) for i in mine] == segs[1:]
        assert [int(olds[1][i]) for i in mine] == [s[1] for s in segs[:-1]]


def shifted(nbest: NBest, feature: str, offset: float) -> NBest:
    """``nbest`` with ``offset`` added to every value of ``feature`` (the same in every list)."""
    return NBest(
        NBestList(
            nb.utt_id,
            [Hypothesis(h.words, {**h.scores, feature: h.scores[feature] + offset}) for h in nb],
        )
        for nb in nbest.values()
    )


@pytest.mark.parametrize("offset", [1e7, -1e9])
def test_risk_keeps_the_differences_of_a_feature_with_a_large_offset(offset: float) -> None:
    """Softmax is shift-invariant per list: a constant offset of a feature changes nothing
    (it used to be clipped at +-1e6 after standardising, flattening the column)."""
    nbest, refs = planted_problem()
    options = TuneOptions(tune_length=False, method="risk")
    plain = tune(nbest, refs, ["am", "lm"], options)
    offset_result = tune(shifted(nbest, "lm", offset), refs, ["am", "lm"], options)
    mert = tune(shifted(nbest, "lm", offset), refs, ["am", "lm"], TuneOptions(tune_length=False))
    assert plain.errors <= 10 and mert.errors <= 10
    assert offset_result.errors == plain.errors
    assert offset_result.weights.features["lm"] == pytest.approx(
        plain.weights.features["lm"], rel=1e-4
    )


def test_risk_ignores_the_padding_of_uneven_lists() -> None:
    """Lists are padded to the longest one; the padded slots take no probability. A list whose
    hypotheses all have the same errors adds a constant to the expected errors, so adding a
    long one (which pads every other list much further) leaves the risk weights as they were."""
    nbest, refs = planted_problem(n_utt=80, seed=3)
    rng = np.random.default_rng(5)
    uneven = NBest(  # 2 to 8 hypotheses a list
        NBestList(nb.utt_id, nb.hyps[: int(rng.integers(2, len(nb) + 1))]) for nb in nbest.values()
    )
    long_words = ("w1", "w2", "w3")
    long_list = NBestList(
        "long",
        [
            Hypothesis(long_words, {"am": float(rng.normal() * 3), "lm": float(rng.normal() * 5)})
            for _ in range(40)
        ],
    )
    padded = NBest([*uneven.values(), long_list])
    options = TuneOptions(tune_length=False, method="risk")
    alone = tune(uneven, refs, ["am", "lm"], options)
    more = tune(padded, {**refs, "long": long_words}, ["am", "lm"], options)
    assert more.errors == alone.errors
    assert more.weights.features["lm"] == pytest.approx(alone.weights.features["lm"], rel=1e-4)


# -- threads (issue 50): the risk search runs on --threads, or on its own faster default -------
@pytest.fixture()
def search_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """torch's thread count at each L-BFGS step of the risk search; torch's count and the
    recorded runtime settings are restored afterwards."""
    import torch

    from rescorer.core import runtime

    seen: list[int] = []
    real = torch.optim.LBFGS.step

    def step(self: torch.optim.LBFGS, closure: Callable[[], torch.Tensor]) -> torch.Tensor:
        seen.append(torch.get_num_threads())
        return real(self, closure)

    monkeypatch.setattr(torch.optim.LBFGS, "step", step)
    before = torch.get_num_threads()
    yield seen
    runtime.configure(runtime.RuntimeOptions())
    torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("args", "torch_before", "want"),
    [
        (["--threads", "1"], 2, 1),  # --threads 1 was ignored: torch's 2 threads ran the search
        (["--threads", "2"], 1, 2),
        ([], 2, RISK_THREADS),  # nothing chosen: the search's own default (1, the faster)
    ],
)
def test_cli_risk_search_runs_on_the_chosen_threads(
    args: list[str],
    torch_before: int,
    want: int,
    search_threads: list[int],
    espnet_factory: Callable[..., Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch
    from click.testing import CliRunner

    from rescorer.cli.main import main
    from rescorer.core.runtime import THREADS_ENV

    monkeypatch.delenv(THREADS_ENV, raising=False)  # the tests' conftest sets it to "default"
    nbest, refs = planted_problem(n_utt=12)
    utts = [  # ESPnet ids: speaker-utterance
        (f"spk-{u}", [(" ".join(h.words), h.scores["am"], h.scores["lm"], 0.0) for h in nbest[u]])
        for u in nbest
    ]
    dev = espnet_factory("dev", utts, {f"spk-{u}": " ".join(refs[u]) for u in nbest})
    torch.set_num_threads(torch_before)
    result = CliRunner().invoke(
        main,
        [*args, "tune", "--nbest", str(dev), "--ref", str(dev / "references" / "ref_wer.trn"),
         "--features", "decoder,ctc", "--method", "risk", "--out", str(tmp_path / "w.json")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert search_threads and set(search_threads) == {want}


def test_library_risk_search_runs_on_one_thread_and_restores_torch(
    search_threads: list[int],
) -> None:
    """Unconfigured (a library call): the search's default, and torch's count as it was after."""
    import torch

    nbest, refs = planted_problem(n_utt=12)
    torch.set_num_threads(2)
    tune(nbest, refs, ["am", "lm"], TuneOptions(tune_length=False, method="risk"))
    assert search_threads and set(search_threads) == {1}
    assert torch.get_num_threads() == 2
