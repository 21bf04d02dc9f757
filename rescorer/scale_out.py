"""Scoring N-best sets with language models: in this process, on a Ray cluster, or under torchrun.

All three give the same features: :func:`score_values` scores a set of lists with each model in
turn (:func:`rescorer.features.add_lm_scores`) and returns the new feature values by utterance;
the caller adds them to the whole set in the set's order (:func:`apply_values`), so a feature
that came from a shard scored elsewhere sits where one process would have put it, and the
JSONL written from it is the single-process file (byte-identical for models whose scores do not
depend on which other sentences share a batch, e.g. KenLM; within float rounding for batched
neural models).

- :class:`Scorer`: in this process, the models loaded once, set after set (a streamed
  set's chunks).
- :func:`score_on_ray`: the set cut into shards by utterance id (:mod:`rescorer.shards`) and
  handed to a pool of Ray actors (as many as the cluster runs at once: 1 CPU each, or 1 GPU
  each for a CUDA device), each loading the models once; results stream back as shards
  finish. Ray is an optional extra (``pip install 'rescorer[ray]'``); the model paths must be
  readable by every node.
- :func:`score_under_torchrun`: each torchrun process (rank r of W, on ``cuda:LOCAL_RANK`` when
  CUDA is there) scores shard r+1/W, and rank 0 gathers the values and has the whole set.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from rescorer.core.constants import OOV_SUFFIX
from rescorer.features import LMFeatureReport, add_lm_scores
from rescorer.lms.contract import Context, LMSpec
from rescorer.nbest import Hypothesis, NBest, NBestList
from rescorer.shards import Shard, take_shard

logger = logging.getLogger(__name__)

Values = dict[str, dict[str, list[float]]]
"""Feature name -> utterance id -> one value per hypothesis, features in the order added."""

TORCHRUN_TIMEOUT = timedelta(hours=12)
"""How long a torchrun process waits for the others to finish their shards."""


@dataclass(frozen=True)
class ScoringJob:
    """Which models to score with, and how (the same for every shard)."""

    # The models, as [NAME=]KIND:PATH specs; their features are added in this order.
    specs: tuple[LMSpec, ...]
    # Case mapping of words into the models' vocabularies (auto, upper, lower, none).
    case: str = "auto"
    # Add each word model's OOV count as a feature NAME_oov beside its score.
    oov_feature: bool = True
    # Device of torch and onnx models (None: the loader's default, CUDA when available).
    device: str | None = None

    def __post_init__(self) -> None:
        if not self.specs:
            raise ValueError("expected at least one model to score with, got none")


def check_new_features(nbest: NBest, job: ScoringJob) -> None:
    """ValueError when a model's feature (or its OOV count's) is already in the lists."""
    existing = set(nbest.score_names())
    for spec in job.specs:
        for name in (spec.name, f"{spec.name}{OOV_SUFFIX}"):
            if name in existing:
                raise ValueError(
                    f"feature {name!r} already exists in the N-best lists; name the model otherwise"
                )


class Scorer:
    """The models of a job, loaded once, adding their features to set after set (a streamed
    set's chunks, a Ray actor's shards); the reports add up over the sets scored.

    Use as a context manager: on leaving, the progress bar closes and ``on_report(report, lm)``
    is called once per model with its summed report (e.g. to print what it found).
    """

    def __init__(
        self,
        job: ScoringJob,
        progress: bool = False,
        total: int | None = None,
        on_report: Callable[[LMFeatureReport, Any], None] | None = None,
    ) -> None:
        from rescorer.lms import load_lm

        options = {} if job.device is None else {"device": job.device}
        self.job = job
        self.models = [load_lm(spec, case=job.case, **options) for spec in job.specs]
        self.reports: list[list[LMFeatureReport]] = []
        self._on_report = on_report
        self._bar: Any = None
        if progress:
            from tqdm import tqdm

            hyps = None if total is None else total * len(self.models)
            names = ", ".join(spec.name for spec in job.specs)
            self._bar = tqdm(total=hyps, desc=f"scoring with {names}", unit="hyp")

    def score(self, nbest: NBest, contexts: Mapping[str, Context] | None = None) -> NBest:
        """``nbest`` with each model's features added, in the job's order."""
        check_new_features(nbest, self.job)
        reports = []
        for spec, lm in zip(self.job.specs, self.models, strict=True):
            nbest, report = add_lm_scores(
                nbest,
                lm,
                spec.name,
                contexts=contexts,
                oov_feature=self.job.oov_feature,
                on_progress=None if self._bar is None else self._bar.update,
            )
            reports.append(report)
        self.reports.append(reports)
        return nbest

    def summed_reports(self) -> list[LMFeatureReport]:
        """One report per model over everything scored so far."""
        return sum_reports(self.reports)

    def __enter__(self) -> Scorer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()
        if exc[0] is None:
            for report, lm in zip(self.summed_reports(), self.models, strict=False):
                logger.info("%s", report.describe())
                if self._on_report is not None:
                    self._on_report(report, lm)


def score_values(
    nbest: NBest,
    job: ScoringJob,
    contexts: Mapping[str, Context] | None = None,
    progress: bool = False,
    on_report: Callable[[LMFeatureReport, Any], None] | None = None,
) -> tuple[Values, list[LMFeatureReport]]:
    """The new features of ``nbest`` under ``job`` (not added to it), and a report per model.

    ``on_report(report, lm)`` is called after each model, e.g. to print what it found.
    """
    with Scorer(job, progress, nbest.num_hyps(), on_report) as scorer:
        scored = scorer.score(nbest, contexts)
    return new_values(nbest, scored), scorer.summed_reports()


def new_values(before: NBest, after: NBest) -> Values:
    """The features of ``after`` that ``before`` lacks (same lists), by utterance."""
    old = set(before.score_names())
    return {
        name: {utt: [h.scores[name] for h in nb] for utt, nb in after.items()}
        for name in after.score_names()
        if name not in old
    }


def apply_values(nbest: NBest, values: Values) -> NBest:
    """``nbest`` with the features of ``values`` added, in their order."""
    for name, by_utt in values.items():
        nbest = nbest.with_scores(name, by_utt)
    return nbest


def merge_values(parts: Sequence[Values]) -> Values:
    """The features of disjoint shards as one (feature order: the first part's)."""
    merged: Values = {}
    for part in parts:
        for name, by_utt in part.items():
            merged.setdefault(name, {}).update(by_utt)
    return merged


def sum_reports(parts: Sequence[Sequence[LMFeatureReport]]) -> list[LMFeatureReport]:
    """Per-model reports of the shards added up (an empty shard has none)."""
    parts = [p for p in parts if p]
    if not parts:
        return []
    totals = list(parts[0])
    for part in parts[1:]:
        totals = [
            replace(
                t,
                sentences=t.sentences + r.sentences,
                words=t.words + r.words,
                oov_words=t.oov_words + r.oov_words,
            )
            for t, r in zip(totals, part, strict=True)
        ]
    return totals


# -- Ray ------------------------------------------------------------------------------------------

# Lists travel to the actors as plain tuples (utterance id, hypotheses' words): the actors need
# nothing else, and the data model's read-only mappings do not pickle.
_Payload = list[tuple[str, list[tuple[str, ...]]]]


def _payload(nbest: NBest) -> _Payload:
    return [(utt, [h.words for h in nb]) for utt, nb in nbest.items()]


def _from_payload(payload: _Payload) -> NBest:
    return NBest([NBestList(utt, tuple(Hypothesis(w) for w in hyps)) for utt, hyps in payload])


class _ScoringActor:
    """One Ray actor: scores the shards it is given with the job's models."""

    def __init__(self, job: ScoringJob) -> None:
        self.scorer = Scorer(job)  # the models, loaded once per actor

    def score(
        self, payload: _Payload, contexts: dict[str, Context] | None
    ) -> tuple[Values, list[LMFeatureReport]]:
        nbest = _from_payload(payload)
        self.scorer.reports.clear()
        scored = self.scorer.score(nbest, contexts)
        return new_values(nbest, scored), self.scorer.summed_reports()


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ValueError(
            "scoring on Ray needs the ray package: pip install 'rescorer[ray]' "
            "(or pip install 'ray>=2.9')"
        ) from None
    return ray


def _wants_gpu(device: str | None, ray: Any) -> bool:
    if device is not None and device.startswith("cuda"):
        return True
    if device in (None, "auto"):
        return ray.cluster_resources().get("GPU", 0) > 0
    return False


def score_on_ray(
    nbest: NBest,
    job: ScoringJob,
    contexts: Mapping[str, Context] | None = None,
    shards: int | None = None,
    address: str | None = None,
    progress: bool = False,
) -> tuple[NBest, list[LMFeatureReport]]:
    """``nbest`` scored by a pool of Ray actors, shard by shard.

    ``address``: a running cluster (``auto``, ``ray://host:10001``, ``host:6379``), or None to
    start a local instance on this machine's cores. ``shards``: how many (default: one per CPU
    of the cluster, or per GPU when scoring on CUDA). The result equals one process's.
    """
    ray = _import_ray()
    check_new_features(nbest, job)
    started = not ray.is_initialized()
    if started:
        kwargs: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,
            "configure_logging": False,
        }
        if address is None:
            kwargs["num_cpus"] = os.cpu_count() or 1
        ray.init(address=address, **kwargs)
    try:
        gpu = _wants_gpu(job.device, ray)
        capacity = max(1, int(ray.cluster_resources().get("GPU" if gpu else "CPU", 1)))
        shards = capacity if shards is None else shards
        if shards < 1:
            raise ValueError(f"expected at least 1 shard, got {shards}")
        device = job.device if not gpu or job.device not in (None, "auto") else "cuda"
        actor_job = replace(job, device=device)
        queue = []
        for k in range(1, shards + 1):
            part, _ = take_shard(nbest, Shard(k, shards))
            if len(part):
                part_contexts = None if contexts is None else {u: contexts[u] for u in part}
                queue.append((k, _payload(part), part_contexts))
        # As many actors as the cluster runs at once (each loads the models once); a shard
        # goes to the next actor that is free, and a finished actor is let go.
        actor_class = ray.remote(num_cpus=1, num_gpus=1 if gpu else 0)(_ScoringActor)
        actors = [actor_class.remote(actor_job) for _ in range(min(capacity, len(queue)))]
        logger.info(
            "scoring %d lists in %d shards on Ray: %d actors with 1 %s each",
            len(nbest), len(queue), len(actors), "GPU" if gpu else "CPU",
        )  # fmt: skip
        results: dict[int, tuple[Values, list[LMFeatureReport]]] = {}
        pending: dict[Any, tuple[int, int, Any]] = {}

        def submit(actor: Any) -> None:
            k, payload, part_contexts = queue.pop(0)
            pending[actor.score.remote(payload, part_contexts)] = (k, len(payload), actor)

        for actor in actors:
            submit(actor)
        from tqdm import tqdm

        bar = tqdm(total=len(nbest), desc="scoring on Ray", unit="list", disable=not progress)
        with bar:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                k, n, actor = pending.pop(done[0])
                results[k] = ray.get(done[0])
                bar.update(n)
                if queue:
                    submit(actor)
                else:
                    ray.kill(actor)
    finally:
        if started:
            ray.shutdown()
    ordered = [results[k] for k in sorted(results)]
    values = merge_values([v for v, _ in ordered])
    return apply_values(nbest, values), sum_reports([r for _, r in ordered])


# -- torchrun ---------------------------------------------------------------------------------


def under_torchrun() -> bool:
    """Whether this process is one of several that torchrun started (``WORLD_SIZE`` > 1; read
    here without importing torch, which a KenLM-only ``score`` does not need)."""
    return os.environ.get("WORLD_SIZE", "1").strip() not in ("", "0", "1")


def score_under_torchrun(
    nbest: NBest,
    job: ScoringJob,
    contexts: Mapping[str, Context] | None = None,
    progress: bool = False,
    on_report: Callable[[LMFeatureReport, Any], None] | None = None,
) -> tuple[NBest | None, list[LMFeatureReport]]:
    """This rank's shard scored; rank 0 gets the whole set (others None) and the summed reports.

    Every rank reads the whole set (the shards are cut by id, so they agree without talking);
    the values go to rank 0 over a gloo process group (the CPU; the models run on
    ``cuda:LOCAL_RANK`` when CUDA is there and ``job.device`` is unset or ``auto``).
    """
    import torch
    import torch.distributed as dist

    from rescorer.lm_models.distributed import close_world, world_from_env

    me = world_from_env()
    check_new_features(nbest, job)
    if job.device in (None, "auto") and torch.cuda.is_available():
        job = replace(job, device=f"cuda:{me.local_rank}")
    started = not dist.is_initialized()
    if started:
        dist.init_process_group(backend="gloo", timeout=TORCHRUN_TIMEOUT)
    try:
        part, _ = take_shard(nbest, Shard(me.rank + 1, me.size))
        part_contexts = None if contexts is None else {u: contexts[u] for u in part}
        logger.info("rank %d of %d: scoring shard %d/%d (%d lists)",
                    me.rank, me.size, me.rank + 1, me.size, len(part))  # fmt: skip
        mine: tuple[Values, list[LMFeatureReport]] = ({}, [])
        if len(part):
            mine = score_values(part, job, part_contexts, progress and me.rank == 0, None)
        gathered: list[Any] = [None] * me.size if me.rank == 0 else []
        dist.gather_object(mine, gathered if me.rank == 0 else None, dst=0)
        if started:
            close_world()  # every process leaves the group together
    finally:
        if started and dist.is_initialized():  # after an error: leave without waiting
            dist.destroy_process_group()
    if me.rank != 0:
        return None, mine[1]
    values = merge_values([v for v, _ in gathered])
    reports = sum_reports([r for _, r in gathered])
    if on_report is not None:
        for report in reports:
            on_report(report, None)
    return apply_values(nbest, values), reports
