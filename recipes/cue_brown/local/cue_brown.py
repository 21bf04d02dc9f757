"""CUE on the Brown corpus: data, context vectors, pretraining and every experiment.

    python local/cue_brown.py STAGE CONF EXP DATA_DIR

STAGE is one of ``prepare`` (sentences with their context records, vocabulary), ``embed`` (one
MiniLM vector per distinct context string, cached), ``pretrain`` (transformer and LSTM sentence
encoders, proxy auto-encoder), ``experiments`` (the CUE runs of Tables 3-6 and Figure 4) and
``cache`` (the paper's cache analysis of the kept Table 3 models: how much of the context's gain
falls on words that occur in the context itself).
Each stage and each run skips work whose output exists (delete the file to redo it); every
result is a small JSON file under EXP/runs/, written to a temporary name and renamed.

Settings of the conf file that shape the experiments (issue 17's review of the first version):

- ``data.units``: ``"word"`` (the most frequent ``vocab_size`` words, the rest <unk>) or
  ``"subword"`` (a sentencepiece tokenizer of ``data.tokenizer`` trained on the training
  sentences: no word is out of vocabulary, so a repeated rare word or name can be predicted
  from the previous sentence). Perplexities are always per word (a word's pieces summed), so
  both kinds compare; the per-unit value is kept beside (``*_ppl_units``).
- ``data.adapt_sentences``: the adaptation stages (Table 5, Figure 4) train on a sample of
  training sentences disjoint from the CUE training sample (0: reuse the CUE sample, as the
  first version did).
- ``warm_start``: start each new decoder as a copy of the sentence LM's softmax (the first
  version did; false is the paper's set-up). With false, ``warm_start_rows`` trains the Table 3
  control and full rows warm too, as an ablation.
- ``partitions``: ``{"count": K, "seed": S}``: Table 5 again over K random partitions of the
  context types into A and B (the paper: five), besides the fixed A = metadata, B = previous.
- ``sentence_kinds``: the sentence encoders pretrained (default both ``transformer`` and
  ``lstm``; the LSTM serves only Table 6 and its own sentence-only row).
- ``data_sizes``: Table 3's control and previous-sentence rows again, trained on the first N
  sentences of the (randomly ordered) CUE training sample for each N listed, with the same
  epochs and seed: how the previous sentence's gain grows with the training data.
- ``ablation_seeds``: ``{set: [seed, ...]}``, extra seeds (among ``extra_seeds``) for some of
  Table 3's ablation rows (``ABLATION_SETS``), each paired with the control of its seed.
- ``encoder_rows``: ``{set: [embedder, ...]}``: Table 3's row of that set again with each other
  frozen encoder of the context strings (e.g. ``{"prev": ["hash:384"]}``: the previous
  sentence as hashed word and character-trigram features, which keep its words' identity,
  instead of MiniLM's meaning), run ``t3_SET_EMBEDDER`` (``t3_prev_hash384``), seed as Table 3.
- ``stop_after``: ``"t3"`` ends the experiments after Table 3 (and pretraining skips the proxy
  auto-encoder): the context sets alone, for a budget that cannot hold every table; ``"t5"``
  runs Table 3, then Table 5's rows without the proxy (A = metadata adapted to B = previous
  sentence, and to A+B), and stops.
- ``data.corpus``: ``"brown"`` (default; documents split by genre, metadata fields
  ``genre``, ``source``, ``document``) or ``"novels"`` (``corpora/gutenberg``: each novel cut
  into blocks of ``data.block_sentences`` consecutive sentences, the last shorter one dropped,
  ``data.blocks`` of them kept at random (null: all), blocks split by title, so every novel
  is in every split, as a recording's chapters would be; metadata fields ``author``, ``title``,
  ``document`` (the block); the previous sentence is the block's), or ``"plain"``: the
  plain-text file ``data.path`` (relative to the working directory), one tokenised sentence per
  line and a blank line between books (e.g. the LibriSpeech recipe's novels normalised into
  LibriSpeech style, ``exp/lm/books_by_book.txt``), cut and split as the novels are (by book);
  metadata field ``document`` (the block).
- ``data.adapt_corpus``: ``"brown"`` (default: the adaptation sample is drawn from the Brown
  training sentences) or ``"state_union"``: the adaptation stages train on State of the Union
  addresses (``corpora/state_union``, a separate corpus, as issue 17 asks), their early
  stopping on later addresses (``adapt_dev``), and the Table 5 models are scored on the latest
  addresses (``adapt_test``) besides the Brown test set. The addresses are taken in year
  order: the last ``adapt_test_addresses`` for test, the ``adapt_dev_addresses`` before them
  for dev, the rest for adaptation (capped at ``adapt_sentences`` when that is not 0).
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import math
import os
import random
import re
import shutil
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from results import ABLATION_SETS, encoder_row_name  # this folder's tables (no model code)

from rescorer.core.errors import FileError
from rescorer.lm_models.corpora import (
    Document,
    chunk_documents,
    read_brown,
    read_novels,
    read_plain,
    read_state_union,
    split_documents,
)
from rescorer.lm_models.cue.model import CUELM, CUEConfig, CUEModel, SentenceLM, SentenceLMConfig
from rescorer.lm_models.cue.train import (
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
from rescorer.lm_models.text_encoders import VectorCache, make_embedder
from rescorer.lm_models.tokenizer import SubwordTokenizer, TokenizerOptions
from rescorer.lm_models.vocab import Vocabulary

logger = logging.getLogger("cue_brown")

# Under runs/NAME/: the resumable state of the run's training stages
# (rescorer.lm_models.cue.resume).
STAGE = "stage"
# Table 3's context sets, in training order (a conf may define a subset: ``none`` and ``prev``
# are the comparison a short budget must reach).
TABLE3_SETS = ("none", "prev", "meta", "both")
_CONTENTS_RE = re.compile(r"^([A-R])(\d\d)\.\s+(.*\S)\s*$")


class SettingError(ValueError):
    """A conf key or command-line option this recipe cannot run with (exit status 2)."""


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


def corpus_rows(dc: dict, data_dir: Path) -> tuple[dict[str, list[dict]], list[int]]:
    """The rows (:func:`document_rows`) of the ``train``, ``dev`` and ``test`` documents of
    ``data.corpus`` (module docstring), and the number of documents in each split."""
    corpus = dc.get("corpus", "brown")
    if corpus == "brown":
        brown = data_dir / "corpora" / "brown"
        docs = read_brown(brown, lower=True, drop_punct=True)
        sources = read_sources(brown)
        splits = split_documents(docs, tuple(dc["split"]), "genre", dc["split_seed"])

        def metadata(doc: Any) -> dict[str, str]:
            return {
                "genre": doc.fields["genre"].replace("_", " "),
                "source": sources.get(doc.doc_id, ""),
                "document": doc.doc_id,
            }

    elif corpus == "novels":
        blocks = book_blocks(read_novels(data_dir / "corpora" / "gutenberg", lower=True), dc)
        splits = split_documents(blocks, tuple(dc["split"]), "title", dc["split_seed"])

        def metadata(doc: Any) -> dict[str, str]:
            return {
                "author": doc.fields["author"].lower(),
                "title": doc.fields["title"].lower(),
                "document": doc.doc_id.lower(),
            }

    elif corpus == "plain":
        path = dc.get("path")
        if not isinstance(path, str) or not Path(path).is_file():
            raise SettingError(
                "data.path must name a plain-text file (one sentence per line, a blank line "
                f"between books) for corpus 'plain', got {path!r}"
            )
        books = [
            Document(b.doc_id, b.sentences, {"book": b.doc_id})
            for b in read_plain(path, per="block")
        ]
        splits = split_documents(
            book_blocks(books, dc), tuple(dc["split"]), "book", dc["split_seed"]
        )

        def metadata(doc: Any) -> dict[str, str]:
            return {"document": doc.doc_id.lower()}

    else:
        raise SettingError(f"data.corpus must be 'brown', 'novels' or 'plain', got {corpus!r}")
    rows = {
        name: [row for doc in part for row in document_rows(doc, metadata(doc))]
        for name, part in zip(("train", "dev", "test"), splits, strict=True)
    }
    return rows, [len(part) for part in splits]


def book_blocks(books: Sequence[Any], dc: dict) -> list[Any]:
    """``books`` cut into blocks of ``data.block_sentences`` consecutive sentences (a book's
    last, shorter block dropped), ``data.blocks`` of them kept at random (null: all)."""
    size, keep = dc.get("block_sentences", 50), dc.get("blocks")
    if not isinstance(size, int) or size < 1 or not (keep is None or isinstance(keep, int)):
        raise SettingError(
            "data.block_sentences must be a positive sentence count and data.blocks a "
            f"block count or null, got {size!r} and {keep!r}"
        )
    blocks = chunk_documents(books, size, drop_last=True)
    if not blocks:
        raise SettingError(
            f"no book of at least {size} sentences (data.block_sentences) to cut blocks from: "
            f"{len(books)} book(s) read"
        )
    if keep is not None and keep < len(blocks):
        picked = set(random.Random(dc["split_seed"]).sample(range(len(blocks)), keep))
        blocks = [b for i, b in enumerate(blocks) if i in picked]
    return blocks


def prepare(conf: dict, exp: Path, data_dir: Path) -> None:
    dc = conf["data"]
    rows, n_docs = corpus_rows(dc, data_dir)
    train_words = [r["words"] for r in rows["train"]]
    tokenizer = None
    if dc.get("units", "word") == "subword":
        tokenizer = SubwordTokenizer.train(train_words, TokenizerOptions(**dc["tokenizer"]))
        (exp / "data").mkdir(parents=True, exist_ok=True)
        tokenizer.save(exp / "data")
        vocab = tokenizer.vocabulary(train_words)
    else:
        vocab = Vocabulary.from_counts(Counter(w for s in train_words for w in s), dc["vocab_size"])
    vocab.save(exp / "data" / "vocab.txt")
    rng = random.Random(dc["sample_seed"])
    n_train = len(rows["train"])
    order = rng.sample(range(n_train), n_train)  # the CUE sample first, then the adaptation one
    n_cue = min(dc["cue_train_sentences"], n_train)
    corpus = dc.get("adapt_corpus", "brown")
    n_adapt = min(dc.get("adapt_sentences", 0), n_train - n_cue) if corpus == "brown" else 0
    samples = {
        "train_all": rows["train"],
        "train": [rows["train"][i] for i in order[:n_cue]],
        "adapt": [rows["train"][i] for i in order[n_cue : n_cue + n_adapt]],
        "dev": rng.sample(rows["dev"], min(dc["dev_sentences"], len(rows["dev"]))),
        "test": rng.sample(rows["test"], min(dc["test_sentences"], len(rows["test"]))),
    }
    if corpus == "state_union":
        samples.update(state_union_rows(dc, data_dir))
    elif corpus != "brown":
        raise ValueError(f"data.adapt_corpus must be 'brown' or 'state_union', got {corpus!r}")
    stats = {}
    for name, part in samples.items():
        write_json(exp / "data" / f"{name}.json", part)
        words = [w for r in part for w in r["words"]]
        units = [u for w in words for u in (tokenizer.word_pieces(w) if tokenizer else (w,))]
        stats[name] = {
            "sentences": len(part),
            "words": len(words),
            "tokens": len(words) + len(part),
            "units": len(units) + len(part),
            "oov_rate": 0.0
            if tokenizer
            else sum(w not in vocab for w in words) / max(len(words), 1),
        }
    stats["documents"] = dict(zip(("train", "dev", "test"), n_docs, strict=True))
    stats["vocab_size"] = len(vocab)
    stats["units"] = "subword" if tokenizer else "word"
    write_json(exp / "data" / "stats.json", stats)
    logger.info("data: %s", stats)


def document_rows(doc: Any, metadata: dict[str, str]) -> list[dict]:
    """One row per sentence of ``doc``: its words, the document's ``metadata`` fields and the
    previous sentence of the same document (empty for the first)."""
    rows, prev = [], None
    for sent in doc.sentences:
        fields = {**metadata, "prev": " ".join(prev) if prev else ""}
        rows.append({"doc": doc.doc_id, "words": list(sent), "fields": fields})
        prev = sent
    return rows


def state_union_rows(dc: dict, data_dir: Path) -> dict[str, list[dict]]:
    """The adaptation corpus ``state_union``: rows of the ``adapt``, ``adapt_dev`` and
    ``adapt_test`` addresses (module docstring), each sentence with its address's fields."""
    docs = read_state_union(data_dir / "corpora" / "state_union")
    n_test, n_dev = dc.get("adapt_test_addresses", 8), dc.get("adapt_dev_addresses", 5)
    if n_test < 1 or n_dev < 1 or n_test + n_dev >= len(docs):
        raise ValueError(
            f"adapt_test_addresses ({n_test}) and adapt_dev_addresses ({n_dev}) must be >= 1 "
            f"and leave addresses for adaptation (there are {len(docs)})"
        )
    parts = {
        "adapt": docs[: len(docs) - n_test - n_dev],
        "adapt_dev": docs[len(docs) - n_test - n_dev : len(docs) - n_test],
        "adapt_test": docs[len(docs) - n_test :],
    }
    out: dict[str, list[dict]] = {}
    for name, part in parts.items():
        out[name] = [
            row
            for doc in part
            for row in document_rows(
                doc,
                {
                    "genre": "state of the union address",
                    "source": "State of the Union address by President "
                    f"{doc.fields['president']}, {doc.fields['year']}",
                    "document": doc.doc_id.lower(),
                },
            )
        ]
    cap = dc.get("adapt_sentences", 0)
    if cap:
        out["adapt"] = out["adapt"][:cap]
    return out


def load_rows(exp: Path, name: str) -> list[dict]:
    """The rows of sample ``name`` (none when the sample was not written: ``adapt_dev`` and
    ``adapt_test`` exist only with ``data.adapt_corpus: "state_union"``)."""
    path = exp / "data" / f"{name}.json"
    if name.startswith("adapt_") and not path.exists():
        return []
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise SettingError(
            f"{path}: line {err.lineno}: not JSON ({err.msg}); rerun stage 1"
        ) from None


# -- stage: embed -------------------------------------------------------------------------------


def field_pairs(conf: dict, set_name: str) -> tuple[tuple[str, str], ...]:
    return tuple((f, conf["fields"][f]) for f in conf["sets"][set_name])


def vector_cache(conf: dict, exp: Path, embedder_spec: str) -> VectorCache:
    cache = VectorCache(make_embedder(embedder_spec))
    cache.load(exp / "vectors" / embedder_spec.replace(":", "_"))
    return cache


def embed(conf: dict, exp: Path, embedder_spec: str) -> None:
    from rescorer.lm_models.cue.model import render_context

    cache = vector_cache(conf, exp, embedder_spec)
    before = len(cache)
    # every field some context set reads (the full set "both", where the conf has one)
    names = dict.fromkeys(f for fields in conf["sets"].values() for f in fields)
    pairs = tuple((f, conf["fields"][f]) for f in names)
    t0 = time.perf_counter()
    for name in ("train", "dev", "test", "adapt", "adapt_dev", "adapt_test"):
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
        self.tokenizer = load_tokenizer(exp)
        # The CUE runs evaluate on the first (random) dev and test sentences of the samples.
        limits = {
            "dev": conf["data"].get("eval_dev_sentences"),
            "test": conf["data"].get("eval_test_sentences"),
        }
        splits = ("train", "adapt", "dev", "test", "adapt_dev", "adapt_test")
        self.rows = {n: load_rows(exp, n)[: limits.get(n)] for n in splits}
        if not self.rows["adapt"]:  # adapt_sentences 0: the CUE training sample
            self.rows["adapt"] = self.rows["train"]
        # A separate adaptation corpus (data.adapt_corpus) with its own dev and test sets.
        self.adapt_splits = ("adapt_dev", "adapt_test") if self.rows["adapt_test"] else ()
        # Words + one </s> per sentence: the denominator of a per-word perplexity.
        self.words = {n: sum(len(r["words"]) + 1 for r in rows) for n, rows in self.rows.items()}
        self.caches: dict[str, VectorCache] = {}
        self._data: dict[tuple, CUEData] = {}
        self.embedder = embedder_spec
        self.warm_start = bool(conf.get("warm_start", True))

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
                [units(self.tokenizer, r["words"]) for r in rows],
                [r["fields"] for r in rows],
                field_pairs(self.conf, set_name),
                self.cache(spec),
            )
        data = self._data[key]
        return CUEData(data.sentences, data.contexts, self.cache(spec).table())

    def options(self, section: str, **overrides: Any) -> CUETrainOptions:
        return stage_options(self.conf, section, **overrides)

    def per_word(self, ppl: float, split: str, data: CUEData) -> float:
        """A per-unit perplexity of ``split`` (``data``) as a per-word one: the same total
        log-likelihood over the words (and </s>) instead of the units."""
        return per_word(ppl, data.tokens, self.words[split])


def stage_options(conf: dict, section: str, **overrides: Any) -> CUETrainOptions:
    """The options of one training stage: the conf's section, its seed and its ``device``
    (default cpu; the environment's CUE_DEVICE wins, e.g. cuda on a lent GPU)."""
    device = os.environ.get("CUE_DEVICE") or conf.get("device", "cpu")
    return CUETrainOptions(**{**conf[section], "seed": conf["seed"], "device": device, **overrides})


def load_tokenizer(exp: Path) -> SubwordTokenizer | None:
    folder = exp / "data"
    return SubwordTokenizer.load(folder) if SubwordTokenizer.present(folder) else None


def units(tokenizer: SubwordTokenizer | None, words: list[str]) -> list[str]:
    """The model's units of a sentence: its words, or their pieces."""
    return words if tokenizer is None else tokenizer.encode(words)


def per_word(ppl: float, units: int, words: int) -> float:
    """exp(total nll / words) from exp(total nll / units)."""
    return math.exp(math.log(ppl) * units / words)


def partition_sets(conf: dict) -> dict[str, list[str]]:
    """Random partitions of the context types into A and B (both non-empty), as the sets
    ``pK_A`` / ``pK_B`` (and ``both`` = A + B for every K); the same conf gives the same."""
    spec = conf.get("partitions") or {"count": 0, "seed": 0}
    types = list(conf["sets"].get("both", []))
    rng = random.Random(spec["seed"])
    out: dict[str, list[str]] = {}
    seen: set[frozenset[str]] = set()
    while len(seen) < min(spec["count"], 2 ** len(types) - 2):
        a = frozenset(t for t in types if rng.random() < 0.5)
        if not a or len(a) == len(types) or a in seen:
            continue
        seen.add(a)
        k = len(seen) - 1
        out[f"p{k}_A"] = [t for t in types if t in a]
        out[f"p{k}_B"] = [t for t in types if t not in a]
    return out


def sentence_kinds(conf: dict) -> list[str]:
    """The sentence encoders the conf pretrains (``sentence_kinds``, default both)."""
    kinds = list(conf.get("sentence_kinds", ["transformer", "lstm"]))
    if "transformer" not in kinds or not set(kinds) <= {"transformer", "lstm"}:
        raise ValueError(f"sentence_kinds must hold 'transformer' (and may 'lstm'), got {kinds}")
    return kinds


def sentence_config(conf: dict, vocab: Vocabulary, kind: str) -> SentenceLMConfig:
    return SentenceLMConfig(vocab_size=len(vocab), kind=kind, **conf["sentence"])


# -- stage: pretrain ----------------------------------------------------------------------------


def pretrain(conf: dict, exp: Path) -> None:
    vocab = Vocabulary.load(exp / "data" / "vocab.txt")
    tokenizer = load_tokenizer(exp)
    rows = load_rows(exp, "train_all")
    dev_rows = load_rows(exp, "dev")
    test_rows = load_rows(exp, "test")
    test_words = sum(len(r["words"]) + 1 for r in test_rows)

    def plain(rs: list[dict]) -> CUEData:
        import numpy as np

        return CUEData(
            tuple(
                np.asarray(vocab.encode(units(tokenizer, r["words"])), dtype=np.int64) for r in rs
            ),
            tuple(() for _ in rs),
            np.zeros((0, 1), dtype=np.float32),
        )

    train, dev, test = plain(rows), plain(dev_rows), plain(test_rows)
    opts = stage_options(conf, "train_sentence")
    for kind in sentence_kinds(conf):
        out = exp / "runs" / f"sentence_{kind}"
        if (out / "result.json").exists():
            continue
        torch.manual_seed(conf["seed"])
        model = SentenceLM(sentence_config(conf, vocab, kind))
        logger.info(
            "pretraining the %s sentence encoder (%d parameters)", kind, model.num_parameters()
        )
        result = train_sentence_lm(model, train, dev, opts, resume=out / STAGE / "1")
        from rescorer.lm_models.checkpoint import save_checkpoint

        save_checkpoint(out / "model", model, vocab.tokens, {"stage": "sentence", "kind": kind})
        test_units = sentence_lm_perplexity(model, test)
        write_json(
            out / "result.json",
            {
                "dev_ppl_units": result.best_dev,
                "test_ppl": per_word(test_units, test.tokens, test_words),
                "test_ppl_units": test_units,
                "initial_dev_ppl": result.initial_dev,
                "epochs": [e.__dict__ for e in result.epochs],
                "parameters": model.num_parameters(),
                "seconds": result.seconds,
                "train_tokens": train.tokens,
            },
        )
        shutil.rmtree(out / STAGE, ignore_errors=True)
    out = exp / "runs" / "proxy_ae"
    if conf.get("stop_after") not in ("t3", "t5") and not (out / "result.json").exists():
        model = new_cue_model(conf, vocab, "transformer", exp, "both", "minilm")
        popts = stage_options(conf, "train_proxy")
        result = train_proxy_autoencoder(model, train, dev, popts, resume=out / STAGE / "1")
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
        shutil.rmtree(out / STAGE, ignore_errors=True)


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

    from rescorer.lm_models.cue.model import load_sentence_lm

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
    def __init__(self, setup: Setup, only: frozenset[str] | None = None) -> None:
        self.s = setup
        self.models: dict[str, CUEModel] = {}
        # The runs this process may train (None: all): two processes given disjoint sets share
        # the cores without training the same run.
        self.only = only
        # Every run name met so far (to check ``only`` against).
        self.seen: set[str] = set()
        # The run under way and how many training stages it has begun (next_stage).
        self._run: Path | None = None
        self._stages = 0

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
        splits: tuple[str, ...] = ("dev", "test"),
    ) -> dict:
        """Per-word (and per-unit) perplexity of ``model`` on ``splits``, read with context set
        ``set_name``: ``{split}_ppl`` and ``{split}_ppl_units``."""
        spec = spec or model.config.embedder
        out = {}
        for split in splits:
            data = self.s.data(split, set_name, spec)
            ppl = cue_perplexity(model, data, source, sigma, seed=1)
            out[f"{split}_ppl"] = self.s.per_word(ppl, split, data)
            out[f"{split}_ppl_units"] = ppl
        return out

    def load(self, name: str) -> CUEModel:
        if name not in self.models:
            from rescorer.lm_models.cue.model import load_cue

            self.models[name] = load_cue(self.runs / name / "model").model
        return self.models[name]

    def next_stage(self) -> Path:
        """The folder where the run's next training stage saves its state after each epoch
        (runs/NAME/stage/K for its K-th stage): a run killed mid-training goes on from its last
        epoch when the recipe is started again; the folder goes once the run is done."""
        if self._run is None:
            raise ValueError("a training stage outside a run")
        self._stages += 1
        return self._run / STAGE / str(self._stages)

    def run(self, name: str, fn: Any, keep: bool = False) -> dict:
        """Run ``fn() -> (model, info)`` unless runs/NAME/result.json exists."""
        out = self.runs / name
        self.seen.add(name)
        if (out / "result.json").exists():
            return json.loads((out / "result.json").read_text())
        if self.only is not None and name not in self.only:
            logger.info("run %s: not in --only, left to another process", name)
            return {}
        logger.info("run %s", name)
        self._run, self._stages = out, 0
        t0 = time.perf_counter()
        model, info = fn()
        info["seconds"] = time.perf_counter() - t0
        info["parameters"] = model.num_parameters()
        if keep:
            lm = CUELM(model, self.s.vocab, tokenizer=self.s.tokenizer)
            lm.save(out / "model", {"run": name, **info})
            self.models[name] = model
        write_json(out / "result.json", info)
        shutil.rmtree(out / STAGE, ignore_errors=True)  # the stage's resumable state, now done
        logger.info("run %s: %s", name, {k: v for k, v in info.items() if "ppl" in k})
        return info

    def train(
        self,
        model: CUEModel,
        set_name: str,
        mode: str,
        seed: int | None = None,
        spec: str | None = None,
        sentences: int | None = None,
        **options: Any,
    ) -> Any:
        """``train_cue`` in ``mode`` on the training sample read with context set ``set_name``
        (its first ``sentences``, a random subset, when given; the best dev epoch kept), the
        recipe's train_cue options with ``seed`` (default: the recipe's) and ``options``;
        resumable (:meth:`next_stage`)."""
        seeded = {} if seed is None else {"seed": seed}
        train = self.s.data("train", set_name, spec)
        if sentences is not None:  # checked against the sample in experiments()
            train = CUEData(train.sentences[:sentences], train.contexts[:sentences], train.table)
        return train_cue(
            model,
            train,
            self.s.data("dev", set_name, spec),
            mode,
            self.s.options("train_cue", **seeded, **options),
            resume=self.next_stage(),
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
        warm: bool | None = None,
        sentences: int | None = None,
        **overrides: Any,
    ) -> dict:
        """Train a new decoder and context encoder jointly; ``seed`` (default: the recipe's)
        sets their initialisation and the order of the training batches; ``warm`` (default:
        the conf's ``warm_start``) starts the decoder from the sentence LM's softmax;
        ``sentences`` trains on that many of the training sample (default: all)."""
        spec = embedder or self.s.embedder
        warm = self.s.warm_start if warm is None else warm

        def fn() -> tuple[CUEModel, dict]:
            model = new_cue_model(
                self.s.conf, self.s.vocab, kind, self.s.exp, set_name, spec, seed, **overrides
            )
            if model.config.sentence_inputs and warm:
                warm_start_decoder(model)
            result = self.train(model, set_name, "joint", seed, spec, sentences)
            info = {**self.evaluate(model, set_name), **_stage(result)}
            if sentences is not None:
                info["train_sentences"] = sentences
            return model, info

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
        # With a separate adaptation corpus: early stopping on its dev set, and its test set
        # scored beside Brown's.
        splits = ("dev", "test", *self.s.adapt_splits)
        dev = "adapt_dev" if self.s.adapt_splits else "dev"

        def fn() -> tuple[CUEModel, dict]:
            model = with_fields(self.load(base), self.s.conf, set_name)
            before = self.evaluate(model, set_name, splits=splits)
            result = train_cue(
                model,
                self.s.data("adapt", set_name),
                self.s.data(dev, set_name),
                mode,
                self.s.options("train_adapt"),
                resume=self.next_stage(),
            )
            info = {**self.evaluate(model, set_name, splits=splits), **_stage(result)}
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


def experiments(conf: dict, exp: Path, only: frozenset[str] | None = None) -> None:
    """Every run of the tables (those named in ``only``, when given: a name the configuration
    has no run of is a :class:`SettingError`, raised after the runs; so is a ``data_sizes``
    entry outside the training sample, or an ``ablation_seeds`` one outside ``extra_seeds``,
    raised before them)."""
    for set_name, more in conf.get("ablation_seeds", {}).items():
        stray = sorted(set(more) - set(conf.get("extra_seeds", [])))
        if set_name not in ABLATION_SETS or set_name not in conf["sets"] or stray:
            raise SettingError(
                f"ablation_seeds: expected {{set: seeds}} with a set of {list(ABLATION_SETS)} "
                f"the conf defines and seeds among extra_seeds {conf.get('extra_seeds', [])} "
                f"(each is paired with that seed's control), got {set_name!r}: {more}"
            )
    for set_name, specs in conf.get("encoder_rows", {}).items():
        if set_name not in conf["sets"] or not isinstance(specs, list) or not specs:
            raise SettingError(
                f"encoder_rows: expected {{set: [embedder, ...]}} with a set of "
                f"{sorted(conf['sets'])}, got {set_name!r}: {specs!r}"
            )
    setup = Setup(conf, exp, conf["embedder"])
    n_train = len(setup.rows["train"])
    bad = [n for n in conf.get("data_sizes", []) if not (isinstance(n, int) and 0 < n <= n_train)]
    if bad:
        raise SettingError(
            f"data_sizes must be sentence counts in 1..{n_train} (the CUE training sample), "
            f"got {bad}"
        )
    r = Runner(setup, only)
    _all_runs(r, conf, exp, setup)
    unknown = sorted((only or frozenset()) - r.seen)
    if unknown:
        raise SettingError(
            f"--only names runs this configuration does not have: {unknown} "
            f"(it has {sorted(r.seen)})"
        )


def _all_runs(r: Runner, conf: dict, exp: Path, setup: Setup) -> None:
    # The sentence encoders alone, on the evaluation sentences of every table.
    for kind in sentence_kinds(conf):
        r.run(f"sentence_only_{kind}", lambda kind=kind: _sentence_only(r, kind))
    # Table 3: context sets, jointly trained decoder + context encoder (the control and the
    # previous sentence first: the comparison a short budget must reach).
    table3 = [name for name in TABLE3_SETS if name in conf["sets"]]
    for set_name in table3:
        r.joint(f"t3_{set_name}", set_name, keep=True)  # kept: the cache analysis reads them
    # Ablations, where the conf has their sets: the metadata with the fields that name a text
    # (the source, the document id), which test sentences mostly have values unseen in training.
    for set_name in ABLATION_SETS:
        if set_name in conf["sets"]:
            r.joint(f"t3_{set_name}", set_name, keep=True)
    # Table 3 again with every extra seed (the rows ``stop_after: "t3"`` still runs).
    for seed in conf.get("extra_seeds", []):
        for set_name in table3:
            r.joint(f"t3_{set_name}_seed{seed}", set_name, seed=seed, keep=True)
    for set_name, more in conf.get("ablation_seeds", {}).items():
        for seed in more:
            r.joint(f"t3_{set_name}_seed{seed}", set_name, seed=seed, keep=True)
    # The control and the previous sentence on smaller training samples (``data_sizes``): how
    # the previous sentence's gain grows with the data, at the same epochs and seed.
    for n in conf.get("data_sizes", []):
        for set_name in ("none", "prev"):
            r.joint(f"t3_{set_name}_n{n}", set_name, sentences=n)
    # Table 3's rows with another frozen encoder of the context strings (``encoder_rows``).
    for set_name, specs in conf.get("encoder_rows", {}).items():
        for spec in specs:
            r.joint(encoder_row_name(set_name, spec), set_name, embedder=spec, keep=True)
    stop_after = conf.get("stop_after")
    if stop_after == "t3":
        return
    if stop_after == "t5":
        table5_ab(r)
        return
    # Table 4: ablations of the full model.
    r.joint("t4_no_context_transformer", "both", context_transformer=False)
    r.joint("t4_concat", "both", decoder="concat")
    r.joint("t4_hash_encoder", "both", embedder="hash:384")
    r.joint("t4_no_sentence_inputs", "both", sentence_inputs=False)
    if not setup.warm_start and conf.get("warm_start_rows"):  # the first version's start
        for set_name in ("none", "both"):
            r.joint(f"t3_{set_name}_warm", set_name, warm=True)
    # More seeds for the Table 3-6 rows whose differences are a few percent.
    for seed in conf.get("extra_seeds", []):
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
    table5_ab(r)
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
    # Table 5 over random partitions of the context types into A and B (the paper: five).
    proxy_name = f"f4_proxy_s{best_sigma:g}"
    for k in range(len(partition_sets(conf)) // 2):
        a, b = f"p{k}_A", f"p{k}_B"
        r.joint(f"t5p{k}_joint_A", a, keep=True)
        r.joint(f"t5p{k}_joint_B", b)
        for target, label in ((b, "B"), ("both", "AB")):
            r.run(
                f"t5p{k}_noadapt_A_to_{label}",
                lambda t=target, k=k: _eval_only(
                    r, with_fields(r.load(f"t5p{k}_joint_A"), conf, t), t
                ),
            )
            r.adapt(f"t5p{k}_adapt_A_to_{label}", f"t5p{k}_joint_A", target)
            r.adapt(f"t5p{k}_proxy_to_{label}", proxy_name, target)
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


def table5_ab(r: Runner) -> None:
    """Table 5's rows without the proxy: A = metadata (t3_meta) not adapted and adapted to
    B = previous sentence and to A+B, and adapted to A itself (a control); with a separate
    adaptation corpus, the jointly trained A and A+B models scored on it too (the references
    of its columns)."""
    conf = r.s.conf
    for target in ("prev", "both"):
        r.run(
            f"t5_noadapt_meta_to_{target}",
            lambda t=target: _eval_only(r, with_fields(r.load("t3_meta"), conf, t), t),
        )
        r.adapt(f"t5_adapt_meta_to_{target}", "t3_meta", target)
    # Control (not a row of the paper): the same adaptation with no new context type, A to A;
    # what it gains is the adaptation data's, not context B's.
    r.adapt("t5_adapt_meta_to_meta", "t3_meta", "meta")
    if r.s.adapt_splits:
        for name, set_name in (("t3_meta", "meta"), ("t3_both", "both")):
            r.run(f"t5_{name}_scored", lambda n=name, s=set_name: _eval_only(r, r.load(n), s))


def _proxy(r: Runner, sigma: float, seed: int | None = None) -> tuple[CUEModel, dict]:
    """A decoder trained with proxy contexts of noise ``sigma`` (Figure 4, Table 5 rows 2, 4
    and 8); ``seed`` as in :meth:`Runner.joint`."""
    conf, s = r.s.conf, r.s
    model = new_cue_model(conf, s.vocab, "transformer", s.exp, "both", conf["embedder"], seed)
    if s.warm_start:
        warm_start_decoder(model)
    result = r.train(model, "both", "proxy", seed, sigma=sigma)
    info = {f"proxy_{k}": v for k, v in r.evaluate(model, "both", "proxy", sigma).items()}
    info["sigma"] = sigma
    return model, {**info, **_stage(result)}


def _sentence_only(r: Runner, kind: str) -> tuple[CUEModel, dict]:
    model = new_cue_model(r.s.conf, r.s.vocab, kind, r.s.exp, "none", r.s.embedder)
    out = {}
    for split in ("dev", "test"):
        data = r.s.data(split, "none")
        ppl = sentence_lm_perplexity(model.sentence, data)
        out[f"{split}_ppl"], out[f"{split}_ppl_units"] = r.s.per_word(ppl, split, data), ppl
    return model, out


def _eval_only(r: Runner, model: CUEModel, set_name: str) -> tuple[CUEModel, dict]:
    """Scores of a trained model, on the adaptation corpus's dev and test sets too."""
    return model, r.evaluate(model, set_name, splits=("dev", "test", *r.s.adapt_splits))


def _swap(
    r: Runner, sentence_from: str, context_from: str, seed: int | None = None
) -> tuple[CUEModel, dict]:
    """New decoder on ``sentence_from``'s sentence encoder with ``context_from``'s context
    encoder frozen (Table 6); ``seed`` as in :meth:`Runner.joint`."""
    conf, s = r.s.conf, r.s
    kind = r.load(sentence_from).config.sentence.kind
    model = new_cue_model(conf, s.vocab, kind, s.exp, "both", conf["embedder"], seed)
    model.context.load_state_dict(r.load(context_from).context.state_dict(), strict=True)
    if s.warm_start:
        warm_start_decoder(model)
    result = r.train(model, "both", "decoder", seed)
    return model, {**r.evaluate(model, "both"), **_stage(result)}


# -- stage: cache ---------------------------------------------------------------------------------


def context_words(fields: dict[str, Any], names: Sequence[str]) -> set[str]:
    """The words of a sentence's context values for the fields ``names`` (the field labels of
    the rendered strings left out: "previous sentence:" is not the sentence's text)."""
    return {w for n in names if fields.get(n) for w in str(fields[n]).split()}


def cache_split(
    word_lp: Sequence[tuple[np.ndarray, np.ndarray]],
    rows: Sequence[dict],
    names: Sequence[str],
) -> dict[str, float]:
    """The paper's cache analysis (section 5, "whether a sentence's context behaves like a
    cache"): the test words split into those that occur in the sentence's own context values
    (``names``) and the rest; in each bin the share of words and the relative gain in
    likelihood of the context model over the control: the geometric mean over the bin's words
    of P_context / P_control, minus 1 (the bin's perplexity ratio control / context, minus 1).
    That is the reading of the paper's "relative gain in log likelihood" its figures agree
    with: 30 % of the tokens gaining 74 % and 70 % gaining 26 % make a perplexity ratio of
    1.39, against 36.6 / 27.4 = 1.34 for its full model (a fraction of the log-likelihood
    could not gain 26 % on 70 % of the tokens when the total changes by 8 %). ``word_lp``
    holds per sentence the (control, context) ln P of each word and of </s>; </s> counts in
    ``all`` only."""
    nll = {b: [0.0, 0.0] for b in ("in", "out", "all")}
    count = {"in": 0, "out": 0, "all": 0}
    for (base, ctx), row in zip(word_lp, rows, strict=True):
        seen = context_words(row["fields"], names)
        words = row["words"]
        if len(base) != len(words) + 1 or len(ctx) != len(words) + 1:
            raise ValueError(f"{len(base)}/{len(ctx)} scores for {len(words)} words + </s>")
        for i, w in enumerate([*words, None]):
            bins = ["all"] if w is None else ["all", "in" if w in seen else "out"]
            for b in bins:
                nll[b][0] -= float(base[i])
                nll[b][1] -= float(ctx[i])
                count[b] += 1
    out: dict[str, float] = {"words": count["all"]}
    for b in ("in", "out", "all"):
        control, context = nll[b]
        out[f"{b}_share"] = count[b] / count["all"]
        out[f"{b}_gain"] = math.exp((control - context) / count[b]) - 1 if count[b] else 0.0
        out[f"{b}_ppl_control"] = math.exp(control / count[b]) if count[b] else math.nan
        out[f"{b}_ppl_context"] = math.exp(context / count[b]) if count[b] else math.nan
    return out


def cache_analysis(conf: dict, exp: Path) -> None:
    """runs/cache_split.json: :func:`cache_split` on the tables' test sentences for every
    kept Table 3 context run against the control of the same seed (runs/NAME/model)."""
    from rescorer.lm_models.cue.model import load_cue

    runs = exp / "runs"
    if not (exp / "data" / "test.json").is_file():
        raise SettingError(f"{exp / 'data' / 'test.json'}: missing (run stages 1-4 first)")
    rows = load_rows(exp, "test")[: conf["data"].get("eval_test_sentences")]
    sentences = [r["words"] for r in rows]
    seeds = [conf["seed"], *conf.get("extra_seeds", [])]
    embedder = make_embedder(conf["embedder"])
    path = runs / "cache_split.json"
    done = json.loads(path.read_text()) if path.exists() else {}
    for seed in seeds:
        suffix = "" if seed == conf["seed"] else f"_seed{seed}"
        control = runs / f"t3_none{suffix}" / "model"
        if not control.is_dir():
            continue
        base = None
        for set_name in ("prev", "meta", "both"):
            name = f"t3_{set_name}{suffix}"
            if name in done or not (runs / name / "model").is_dir():
                continue
            if base is None:
                base = load_cue(control, embedder=embedder).token_logprobs(sentences)
            lm = load_cue(runs / name / "model", embedder=embedder)
            ctx = lm.token_logprobs(sentences, [r["fields"] for r in rows])
            done[name] = {
                "control": f"t3_none{suffix}",
                "fields": conf["sets"][set_name],
                **cache_split(list(zip(base, ctx, strict=True)), rows, conf["sets"][set_name]),
            }
            logger.info("cache split %s: %s", name, done[name])
            write_json(path, done)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("stage", choices=("prepare", "embed", "pretrain", "experiments", "cache"))
    ap.add_argument("conf", type=Path)
    ap.add_argument("exp", type=Path)
    ap.add_argument("data_dir", type=Path)
    ap.add_argument(
        "--only",
        default=None,
        help="experiments: train only these runs (comma-separated names, e.g. t3_none,t3_meta);"
        " the others are left to another process",
    )
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    logging.getLogger("sentence_transformers").setLevel(logging.WARNING)
    # OMP_NUM_THREADS, where set, is honoured (one thread per run when runs share the cores).
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or min(2, os.cpu_count() or 1)))
    conf = json.loads(args.conf.read_text(encoding="utf-8"))
    conf["sets"].update(partition_sets(conf))  # pK_A / pK_B: random partitions of the types
    only = frozenset(n for n in args.only.split(",") if n) if args.only else None
    try:
        run_stage(args.stage, conf, args.exp, args.data_dir, only)
    except (SettingError, FileError) as err:  # a bad setting, or a bad or missing input file
        print(f"cue_brown.py: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def run_stage(
    stage: str, conf: dict, exp: Path, data_dir: Path, only: frozenset[str] | None
) -> None:
    if stage == "prepare":
        prepare(conf, exp, data_dir)
    elif stage == "embed":
        embed(conf, exp, conf["embedder"])
        embed(conf, exp, "hash:384")
    elif stage == "pretrain":
        pretrain(conf, exp)
    elif stage == "cache":
        cache_analysis(conf, exp)
    else:
        experiments(conf, exp, only)


if __name__ == "__main__":
    main()
