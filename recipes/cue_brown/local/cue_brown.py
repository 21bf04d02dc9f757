"""CUE on the Brown corpus: data, context vectors, pretraining and every experiment.

    python local/cue_brown.py STAGE CONF EXP DATA_DIR

STAGE is one of ``prepare`` (sentences with their context records, vocabulary), ``embed`` (one
MiniLM vector per distinct context string, cached), ``pretrain`` (transformer and LSTM sentence
encoders, proxy auto-encoder) and ``experiments`` (the CUE runs of Tables 3-6 and Figure 4).
Each stage and each run skips work whose output exists (delete the file to redo it); every
result is a small JSON file under EXP/runs/, written to a temporary name and renamed.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import random
import re
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from lm_models.corpora import read_brown, split_documents
from lm_models.cue.encoders import VectorCache, make_embedder
from lm_models.cue.model import CUELM, CUEConfig, CUEModel, SentenceLM, SentenceLMConfig
from lm_models.cue.train import (
    CUEData,
    CUETrainOptions,
    cue_perplexity,
    make_data,
    proxy_kl,
    sentence_lm_perplexity,
    train_cue,
    train_proxy_autoencoder,
    train_sentence_lm,
    warm_start_decoder,
)
from lm_models.vocab import Vocabulary

logger = logging.getLogger("cue_brown")
_CONTENTS_RE = re.compile(r"^([A-R])(\d\d)\.\s+(.*\S)\s*$")


def write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_sources(brown: Path) -> dict[str, str]:
    """File id -> its source line in CONTENTS ("The Atlanta Constitution")."""
    out = {}
    for line in (brown / "CONTENTS").read_text(encoding="latin-1").splitlines():
        m = _CONTENTS_RE.match(line)
        if m:
            out[f"c{m.group(1).lower()}{m.group(2)}"] = m.group(3)
    return out


# -- stage: prepare -----------------------------------------------------------------------------


def prepare(conf: dict, exp: Path, data_dir: Path) -> None:
    brown = data_dir / "corpora" / "brown"
    docs = read_brown(brown, lower=True, drop_punct=True)
    sources = read_sources(brown)
    dc = conf["data"]
    splits = split_documents(docs, tuple(dc["split"]), "genre", dc["split_seed"])
    rows: dict[str, list[dict]] = {}
    for name, part in zip(("train", "dev", "test"), splits, strict=True):
        rows[name] = []
        for doc in part:
            prev = None
            for sent in doc.sentences:
                rows[name].append(
                    {
                        "doc": doc.doc_id,
                        "words": list(sent),
                        "fields": {
                            "genre": doc.fields["genre"].replace("_", " "),
                            "source": sources.get(doc.doc_id, ""),
                            "document": doc.doc_id,
                            "prev": " ".join(prev) if prev else "",
                        },
                    }
                )
                prev = sent
    counts = Counter(w for r in rows["train"] for w in r["words"])
    vocab = Vocabulary.from_counts(counts, max_size=dc["vocab_size"])
    vocab.save(exp / "data" / "vocab.txt")
    rng = random.Random(dc["sample_seed"])
    samples = {
        "train_all": rows["train"],
        "train": rng.sample(rows["train"], min(dc["cue_train_sentences"], len(rows["train"]))),
        "dev": rng.sample(rows["dev"], min(dc["dev_sentences"], len(rows["dev"]))),
        "test": rng.sample(rows["test"], min(dc["test_sentences"], len(rows["test"]))),
    }
    stats = {}
    for name, part in samples.items():
        write_json(exp / "data" / f"{name}.json", part)
        words = [w for r in part for w in r["words"]]
        stats[name] = {
            "sentences": len(part),
            "words": len(words),
            "tokens": len(words) + len(part),
            "oov_rate": sum(w not in vocab for w in words) / max(len(words), 1),
        }
    stats["documents"] = {n: len(p) for n, p in zip(("train", "dev", "test"), splits, strict=True)}
    stats["vocab_size"] = len(vocab)
    write_json(exp / "data" / "stats.json", stats)
    logger.info("data: %s", stats)


def load_rows(exp: Path, name: str) -> list[dict]:
    return json.loads((exp / "data" / f"{name}.json").read_text(encoding="utf-8"))


# -- stage: embed -------------------------------------------------------------------------------


def field_pairs(conf: dict, set_name: str) -> tuple[tuple[str, str], ...]:
    return tuple((f, conf["fields"][f]) for f in conf["sets"][set_name])


def vector_cache(conf: dict, exp: Path, embedder_spec: str) -> VectorCache:
    cache = VectorCache(make_embedder(embedder_spec))
    cache.load(exp / "vectors" / embedder_spec.replace(":", "_"))
    return cache


def embed(conf: dict, exp: Path, embedder_spec: str) -> None:
    from lm_models.cue.model import render_context

    cache = vector_cache(conf, exp, embedder_spec)
    before = len(cache)
    pairs = field_pairs(conf, "both")
    t0 = time.perf_counter()
    for name in ("train", "dev", "test"):
        cache.add(s for r in load_rows(exp, name) for s in render_context(r["fields"], pairs))
    if len(cache) > before:
        cache.save(exp / "vectors" / embedder_spec.replace(":", "_"))
    logger.info(
        "%s: %d strings (%d new) in %.0f s",
        embedder_spec,
        len(cache),
        len(cache) - before,
        time.perf_counter() - t0,
    )
    write_json(
        exp / "vectors" / f"{embedder_spec.replace(':', '_')}.json",
        {"strings": len(cache), "new": len(cache) - before, "seconds": time.perf_counter() - t0},
    )


# -- shared set-up ------------------------------------------------------------------------------


class Setup:
    """Vocabulary, data sets per context set, options."""

    def __init__(self, conf: dict, exp: Path, embedder_spec: str) -> None:
        self.conf = conf
        self.exp = exp
        self.vocab = Vocabulary.load(exp / "data" / "vocab.txt")
        # The CUE runs evaluate on the first (random) dev and test sentences of the samples.
        limits = {
            "dev": conf["data"].get("eval_dev_sentences"),
            "test": conf["data"].get("eval_test_sentences"),
        }
        self.rows = {n: load_rows(exp, n)[: limits.get(n)] for n in ("train", "dev", "test")}
        self.caches: dict[str, VectorCache] = {}
        self._data: dict[tuple, CUEData] = {}
        self.embedder = embedder_spec

    def cache(self, spec: str) -> VectorCache:
        if spec not in self.caches:
            self.caches[spec] = vector_cache(self.conf, self.exp, spec)
        return self.caches[spec]

    def data(self, split: str, set_name: str, spec: str | None = None) -> CUEData:
        spec = spec or self.embedder
        key = (split, set_name, spec)
        if key not in self._data:
            rows = self.rows[split]
            self._data[key] = make_data(
                self.vocab,
                [r["words"] for r in rows],
                [r["fields"] for r in rows],
                field_pairs(self.conf, set_name),
                self.cache(spec),
            )
        data = self._data[key]
        return CUEData(data.sentences, data.contexts, self.cache(spec).table())

    def options(self, section: str, **overrides: Any) -> CUETrainOptions:
        return CUETrainOptions(**{**self.conf[section], "seed": self.conf["seed"], **overrides})


def sentence_config(conf: dict, vocab: Vocabulary, kind: str) -> SentenceLMConfig:
    return SentenceLMConfig(vocab_size=len(vocab), kind=kind, **conf["sentence"])


# -- stage: pretrain ----------------------------------------------------------------------------


def pretrain(conf: dict, exp: Path) -> None:
    vocab = Vocabulary.load(exp / "data" / "vocab.txt")
    rows = load_rows(exp, "train_all")
    dev_rows = load_rows(exp, "dev")
    test_rows = load_rows(exp, "test")

    def plain(rs: list[dict]) -> CUEData:
        import numpy as np

        return CUEData(
            tuple(np.asarray(vocab.encode(r["words"]), dtype=np.int64) for r in rs),
            tuple(() for _ in rs),
            np.zeros((0, 1), dtype=np.float32),
        )

    train, dev, test = plain(rows), plain(dev_rows), plain(test_rows)
    opts = CUETrainOptions(**{**conf["train_sentence"], "seed": conf["seed"]})
    for kind in ("transformer", "lstm"):
        out = exp / "runs" / f"sentence_{kind}"
        if (out / "result.json").exists():
            continue
        torch.manual_seed(conf["seed"])
        model = SentenceLM(sentence_config(conf, vocab, kind))
        logger.info(
            "pretraining the %s sentence encoder (%d parameters)", kind, model.num_parameters()
        )
        result = train_sentence_lm(model, train, dev, opts)
        from lm_models.checkpoint import save_checkpoint

        save_checkpoint(out / "model", model, vocab.tokens, {"stage": "sentence", "kind": kind})
        write_json(
            out / "result.json",
            {
                "dev_ppl": result.best_dev,
                "test_ppl": sentence_lm_perplexity(model, test),
                "initial_dev_ppl": result.initial_dev,
                "epochs": [e.__dict__ for e in result.epochs],
                "parameters": model.num_parameters(),
                "seconds": result.seconds,
                "train_tokens": train.tokens,
            },
        )
    out = exp / "runs" / "proxy_ae"
    if not (out / "result.json").exists():
        model = new_cue_model(conf, vocab, "transformer", exp, "both", "minilm")
        popts = CUETrainOptions(**{**conf["train_proxy"], "seed": conf["seed"]})
        result = train_proxy_autoencoder(model, train, dev, popts)
        assert model.proxy is not None
        from safetensors.torch import save_file

        out.mkdir(parents=True, exist_ok=True)
        save_file(
            {k: v.contiguous() for k, v in model.proxy.state_dict().items()},
            str(out / "proxy.safetensors"),
        )
        write_json(
            out / "result.json",
            {
                "initial_dev_kl": result.initial_dev,
                "dev_kl": result.best_dev,
                "test_kl": proxy_kl(model, test),
                "epochs": [e.__dict__ for e in result.epochs],
                "parameters": sum(p.numel() for p in model.proxy.parameters()),
                "seconds": result.seconds,
            },
        )


def new_cue_model(
    conf: dict,
    vocab: Vocabulary,
    sentence_kind: str,
    exp: Path,
    set_name: str,
    embedder: str,
    seed: int | None = None,
    **overrides: Any,
) -> CUEModel:
    """A CUE model with the pretrained sentence encoder (and proxy AE when trained) loaded;
    the new modules initialised from ``seed`` (default: the recipe's seed)."""
    from safetensors.torch import load_file

    from lm_models.cue.model import load_sentence_lm

    dim = 384 if embedder == "minilm" or embedder.startswith("hash") else 0
    if embedder.startswith("hash:"):
        dim = int(embedder.split(":")[1])
    cfg = CUEConfig(
        vocab_size=len(vocab),
        sentence=sentence_config(conf, vocab, sentence_kind),
        embedder=embedder,
        context_dim=dim,
        context_fields=field_pairs(conf, set_name),
        **{**conf["cue"], **overrides},
    )
    torch.manual_seed(conf["seed"] if seed is None else seed)
    model = CUEModel(cfg)
    se_dir = exp / "runs" / f"sentence_{sentence_kind}" / "model"
    if se_dir.exists():
        se, _ = load_sentence_lm(se_dir)
        model.sentence.load_state_dict(se.state_dict(), strict=True)
    proxy_file = exp / "runs" / "proxy_ae" / "proxy.safetensors"
    if proxy_file.exists() and model.proxy is not None:
        model.proxy.load_state_dict(load_file(str(proxy_file)), strict=True)
    return model


# -- stage: experiments -------------------------------------------------------------------------


def with_fields(model: CUEModel, conf: dict, set_name: str) -> CUEModel:
    """The same weights reading another context set (config changed, weights shared)."""
    clone = copy.deepcopy(model)
    clone.config = replace(model.config, context_fields=field_pairs(conf, set_name))
    clone.decoder.config = clone.config
    return clone


class Runner:
    def __init__(self, setup: Setup) -> None:
        self.s = setup
        self.models: dict[str, CUEModel] = {}

    @property
    def runs(self) -> Path:
        return self.s.exp / "runs"

    def evaluate(
        self,
        model: CUEModel,
        set_name: str,
        source: str = "context",
        sigma: float = 0.0,
        spec: str | None = None,
    ) -> dict:
        spec = spec or model.config.embedder
        dev = self.s.data("dev", set_name, spec)
        test = self.s.data("test", set_name, spec)
        return {
            "dev_ppl": cue_perplexity(model, dev, source, sigma, seed=1),
            "test_ppl": cue_perplexity(model, test, source, sigma, seed=1),
        }

    def load(self, name: str) -> CUEModel:
        if name not in self.models:
            from lm_models.cue.model import load_cue

            self.models[name] = load_cue(self.runs / name / "model").model
        return self.models[name]

    def run(self, name: str, fn: Any, keep: bool = False) -> dict:
        """Run ``fn() -> (model, info)`` unless runs/NAME/result.json exists."""
        out = self.runs / name
        if (out / "result.json").exists():
            return json.loads((out / "result.json").read_text())
        logger.info("run %s", name)
        t0 = time.perf_counter()
        model, info = fn()
        info["seconds"] = time.perf_counter() - t0
        info["parameters"] = model.num_parameters()
        if keep:
            CUELM(model, self.s.vocab).save(out / "model", {"run": name, **info})
            self.models[name] = model
        write_json(out / "result.json", info)
        logger.info("run %s: %s", name, {k: v for k, v in info.items() if "ppl" in k})
        return info

    def train(
        self,
        model: CUEModel,
        set_name: str,
        mode: str,
        seed: int | None = None,
        spec: str | None = None,
        **options: Any,
    ) -> Any:
        """``train_cue`` in ``mode`` on the training sample read with context set ``set_name``
        (the best dev epoch kept), the recipe's train_cue options with ``seed`` (default: the
        recipe's) and ``options``."""
        seeded = {} if seed is None else {"seed": seed}
        return train_cue(
            model,
            self.s.data("train", set_name, spec),
            self.s.data("dev", set_name, spec),
            mode,
            self.s.options("train_cue", **seeded, **options),
        )

    # one training stage + evaluation
    def joint(
        self,
        name: str,
        set_name: str,
        kind: str = "transformer",
        embedder: str | None = None,
        keep: bool = False,
        seed: int | None = None,
        **overrides: Any,
    ) -> dict:
        """Train a new decoder and context encoder jointly; ``seed`` (default: the recipe's)
        sets their initialisation and the order of the training batches."""
        spec = embedder or self.s.embedder

        def fn() -> tuple[CUEModel, dict]:
            model = new_cue_model(
                self.s.conf, self.s.vocab, kind, self.s.exp, set_name, spec, seed, **overrides
            )
            if model.config.sentence_inputs:
                warm_start_decoder(model)
            result = self.train(model, set_name, "joint", seed, spec)
            return model, {**self.evaluate(model, set_name), **_stage(result)}

        return self.run(name, fn, keep)

    def adapt(
        self,
        name: str,
        base: str,
        set_name: str,
        mode: str = "adapt",
        base_fields: str | None = None,
        keep: bool = False,
    ) -> dict:
        def fn() -> tuple[CUEModel, dict]:
            model = with_fields(self.load(base), self.s.conf, set_name)
            before = self.evaluate(model, set_name)
            result = train_cue(
                model,
                self.s.data("train", set_name),
                self.s.data("dev", set_name),
                mode,
                self.s.options("train_adapt"),
            )
            info = {**self.evaluate(model, set_name), **_stage(result)}
            info["before"] = before
            return model, info

        return self.run(name, fn, keep)


def _stage(result: Any) -> dict:
    return {
        "best_epoch": result.best_epoch,
        "initial_dev": result.initial_dev,
        "trained_parameters": result.trained_parameters,
        "train_seconds": result.seconds,
        "epochs": [e.__dict__ for e in result.epochs],
    }


def experiments(conf: dict, exp: Path) -> None:
    setup = Setup(conf, exp, conf["embedder"])
    r = Runner(setup)
    # The sentence encoders alone, on the evaluation sentences of every table.
    for kind in ("transformer", "lstm"):
        r.run(f"sentence_only_{kind}", lambda kind=kind: _sentence_only(r, kind))
    # Table 3: context sets, jointly trained decoder + context encoder.
    for set_name in ("none", "meta", "prev", "both"):
        r.joint(f"t3_{set_name}", set_name, keep=set_name in ("meta", "both"))
    # Table 4: ablations of the full model.
    r.joint("t4_no_context_transformer", "both", context_transformer=False)
    r.joint("t4_concat", "both", decoder="concat")
    r.joint("t4_hash_encoder", "both", embedder="hash:384")
    r.joint("t4_no_sentence_inputs", "both", sentence_inputs=False)
    # More seeds for the Table 3-6 rows whose differences are a few percent.
    for seed in conf.get("extra_seeds", []):
        for set_name in ("none", "meta", "prev", "both"):
            r.joint(
                f"t3_{set_name}_seed{seed}", set_name, seed=seed, keep=set_name in ("meta", "both")
            )
        r.joint(f"t4_no_context_transformer_seed{seed}", "both", seed=seed,
                context_transformer=False)  # fmt: skip
        r.joint(f"t4_hash_encoder_seed{seed}", "both", seed=seed, embedder="hash:384")
        base = f"t3_meta_seed{seed}"
        for target in ("prev", "both"):
            r.run(
                f"t5_noadapt_meta_to_{target}_seed{seed}",
                lambda t=target, b=base: _eval_only(r, with_fields(r.load(b), conf, t), t),
            )
            r.adapt(f"t5_adapt_meta_to_{target}_seed{seed}", base, target)
        t3, lstm = f"t3_both_seed{seed}", f"t6_lstm_joint_seed{seed}"
        r.joint(lstm, "both", kind="lstm", keep=True, seed=seed)
        r.run(f"t6_transformer_frozen_ce_from_lstm_seed{seed}",
              lambda a=t3, b=lstm, s=seed: _swap(r, a, b, s))  # fmt: skip
        r.run(f"t6_lstm_frozen_ce_from_transformer_seed{seed}",
              lambda a=lstm, b=t3, s=seed: _swap(r, a, b, s))  # fmt: skip
    # Table 5: A = metadata, B = previous sentence.
    for target in ("prev", "both"):
        r.run(
            f"t5_noadapt_meta_to_{target}",
            lambda t=target: _eval_only(r, with_fields(r.load("t3_meta"), conf, t), t),
        )
        r.adapt(f"t5_adapt_meta_to_{target}", "t3_meta", target)
    # Figure 4: proxy noise sweep; proxy-trained decoder, then adaptation to A+B.
    best_sigma, best_dev = None, float("inf")
    for sigma in conf["proxy_sigmas"]:
        name = f"f4_proxy_s{sigma:g}"
        r.run(name, lambda sigma=sigma: _proxy(r, sigma), keep=True)
        res = r.adapt(f"f4_adapt_s{sigma:g}_to_both", name, "both")
        if res["dev_ppl"] < best_dev:
            best_sigma, best_dev = sigma, res["dev_ppl"]
    assert best_sigma is not None
    write_json(exp / "runs" / "best_sigma.json", {"sigma": best_sigma, "dev_ppl": best_dev})
    r.adapt(f"t5_proxy_s{best_sigma:g}_to_prev", f"f4_proxy_s{best_sigma:g}", "prev")
    # Table 6: LSTM sentence encoder; context encoders swapped and frozen.
    r.joint("t6_lstm_joint", "both", kind="lstm", keep=True)
    r.run("t6_transformer_frozen_ce_from_lstm", lambda: _swap(r, "t3_both", "t6_lstm_joint"))
    r.run("t6_lstm_frozen_ce_from_transformer", lambda: _swap(r, "t6_lstm_joint", "t3_both"))
    # Figure 4 with the extra seeds.
    for seed in conf.get("extra_seeds", []):
        for sigma in conf["proxy_sigmas"]:
            name = f"f4_proxy_s{sigma:g}_seed{seed}"
            r.run(name, lambda sigma=sigma, seed=seed: _proxy(r, sigma, seed), keep=True)
            r.adapt(f"f4_adapt_s{sigma:g}_to_both_seed{seed}", name, "both")


def _proxy(r: Runner, sigma: float, seed: int | None = None) -> tuple[CUEModel, dict]:
    """A decoder trained with proxy contexts of noise ``sigma`` (Figure 4, Table 5 rows 2, 4
    and 8); ``seed`` as in :meth:`Runner.joint`."""
    conf, s = r.s.conf, r.s
    model = new_cue_model(conf, s.vocab, "transformer", s.exp, "both", conf["embedder"], seed)
    warm_start_decoder(model)
    result = r.train(model, "both", "proxy", seed, sigma=sigma)
    info = {f"proxy_{k}": v for k, v in r.evaluate(model, "both", "proxy", sigma).items()}
    info["sigma"] = sigma
    return model, {**info, **_stage(result)}


def _sentence_only(r: Runner, kind: str) -> tuple[CUEModel, dict]:
    model = new_cue_model(r.s.conf, r.s.vocab, kind, r.s.exp, "none", r.s.embedder)
    return model, {
        split + "_ppl": sentence_lm_perplexity(model.sentence, r.s.data(split, "none"))
        for split in ("dev", "test")
    }


def _eval_only(r: Runner, model: CUEModel, set_name: str) -> tuple[CUEModel, dict]:
    return model, r.evaluate(model, set_name)


def _swap(
    r: Runner, sentence_from: str, context_from: str, seed: int | None = None
) -> tuple[CUEModel, dict]:
    """New decoder on ``sentence_from``'s sentence encoder with ``context_from``'s context
    encoder frozen (Table 6); ``seed`` as in :meth:`Runner.joint`."""
    conf, s = r.s.conf, r.s
    kind = r.load(sentence_from).config.sentence.kind
    model = new_cue_model(conf, s.vocab, kind, s.exp, "both", conf["embedder"], seed)
    model.context.load_state_dict(r.load(context_from).context.state_dict(), strict=True)
    warm_start_decoder(model)
    result = r.train(model, "both", "decoder", seed)
    return model, {**r.evaluate(model, "both"), **_stage(result)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("stage", choices=("prepare", "embed", "pretrain", "experiments"))
    ap.add_argument("conf", type=Path)
    ap.add_argument("exp", type=Path)
    ap.add_argument("data_dir", type=Path)
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    logging.getLogger("sentence_transformers").setLevel(logging.WARNING)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    conf = json.loads(args.conf.read_text(encoding="utf-8"))
    if args.stage == "prepare":
        prepare(conf, args.exp, args.data_dir)
    elif args.stage == "embed":
        embed(conf, args.exp, conf["embedder"])
        embed(conf, args.exp, "hash:384")
    elif args.stage == "pretrain":
        pretrain(conf, args.exp)
    else:
        experiments(conf, args.exp)


if __name__ == "__main__":
    main()
