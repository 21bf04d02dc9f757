"""Stage 3 of recipes/brown_attributes: the tables -> RESULTS.md.

    python local/results.py RECIPE_DIR EXP_DIR DATA_DIR --seeds 0 1

1. Perplexity of the test documents (every token incl. </s>; words outside the 4k vocabulary
   as <unk>) for the plain LBL and the attribute-gated LBL (ATD) under several attribute
   settings, per seed (mean ± half the range).
2. Genre classification of the held-out (dev + test) documents with the first seed's ATD:
   the genre vector of each document inferred with every weight frozen (section 2.5), then a
   logistic regression trained on the vectors inferred the same way for the training documents;
   against the generative argmax over the 15 learned genre vectors, a bag-of-words logistic
   regression on the same tokens, and the majority class. How inference converges.
3. Conditional word similarity (Table 5 layout) and conditioned samples (Table 2 layout).
4. What the CLI stages wrote (ppl through ``lbl:DIR``, the ONNX export's parity).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import time
from pathlib import Path

import numpy as np
import torch

from lm_models.corpora import Document
from lm_models.lbl.model import LBL, load_lbl
from lm_models.lbl.train import (
    EncodedRows,
    InferenceOptions,
    LBLTrainConfig,
    attribute_loglik,
    attribute_vector,
    conditional_neighbours,
    encode_documents,
    fit_logistic_regression,
    infer_attributes,
    limit_rows,
    perplexity,
    read_documents,
    sample_sentences,
    score_rows,
)
from lm_models.vocab import UNK_ID, Vocabulary
from rescorer.core.machine import describe_machine
from rescorer.core.output import atomic_write

CLASSIFY_TOKENS = 150  # tokens of each document used to infer its genre vector
CLASSIFY_TRAIN_EVERY = 2  # every 2nd training document trains the logistic regression
ADAPT_TOKENS = 300  # tokens of each test document's first half its document vector comes from
INFER = InferenceOptions(steps=25, lr=0.1)
ADAPT_STEPS = InferenceOptions(steps=25, lr=0.1)
QUERIES = [
    ("church", "religion", "news"),
    ("love", "romance", "religion"),
    ("power", "government", "science_fiction"),
    ("money", "news", "romance"),
    ("light", "religion", "learned"),
    ("game", "hobbies", "fiction"),
]
SAMPLE_GENRES = ["news", "religion", "romance", "science_fiction"]
MIX = ("news", "religion")
SAMPLE_SEED = 7  # the same random draws for every attribute: differences come from x alone


def summary(values: list[float], digits: int = 1) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    half = (max(values) - min(values)) / 2
    return f"{float(np.mean(values)):.{digits}f} ± {half:.{digits}f}"


def halves(docs: list[Document]) -> tuple[list[Document], list[Document]]:
    """Each document's first and second half of sentences (for adapt-then-score)."""
    first, second = [], []
    for d in docs:
        k = len(d.sentences) // 2
        first.append(Document(d.doc_id, d.sentences[:k], d.fields))
        second.append(Document(d.doc_id, d.sentences[k:], d.fields))
    return first, second


def rows_subset(rows: EncodedRows, keep: np.ndarray, groups: np.ndarray) -> EncodedRows:
    return EncodedRows(rows.history[keep], rows.targets[keep], rows.attrs[keep], groups, ())


def perplexity_rows(
    model: LBL, vocab: Vocabulary, test: list[Document], adapt: bool
) -> dict[str, float]:
    """Test perplexity of one model under each attribute setting it supports."""
    cfg = model.config
    out: dict[str, float] = {}
    if not cfg.attributes:
        out["none"] = perplexity(score_rows(model, encode_documents(cfg, vocab, test)))
        _, second = halves(test)
        out["second half: none"] = perplexity(
            score_rows(model, encode_documents(cfg, vocab, second))
        )
        return out
    # The test documents are unseen values of "doc": encoded as missing (expected vector).
    out["genre"] = perplexity(score_rows(model, encode_documents(cfg, vocab, test)))
    out["none"] = perplexity(
        score_rows(model, encode_documents(cfg, vocab, test, {"genre": None, "doc": None}))
    )
    first, second = halves(test)
    out["second half: genre"] = perplexity(score_rows(model, encode_documents(cfg, vocab, second)))
    if adapt:
        # Section 2.5 on unseen documents: infer each test document's doc vector from its first
        # half (genre known), score its second half with it.
        rows = limit_rows(encode_documents(cfg, vocab, first), ADAPT_TOKENS)
        inferred = infer_attributes(model, rows, "doc", ADAPT_STEPS)
        rows2 = encode_documents(cfg, vocab, second)
        a = cfg.attribute_index("doc")
        sl = cfg.slices()[a]
        with torch.no_grad():
            x = model.attribute_vector(torch.from_numpy(rows2.attrs))
            x[:, sl] = torch.from_numpy(inferred.vectors).float()[torch.from_numpy(rows2.doc_index)]
            lp = model(
                torch.from_numpy(rows2.history), torch.from_numpy(rows2.targets), x=x
            ).double()
        out["second half: genre + inferred doc"] = perplexity(lp.numpy())
    return out


def classification(
    model: LBL, vocab: Vocabulary, train: list[Document], held: list[Document]
) -> tuple[list[str], dict[str, object]]:
    """Genre classification of held-out documents (see the module docstring)."""
    cfg = model.config
    genres = list(cfg.attributes[cfg.attribute_index("genre")].values)
    hide = {"genre": None, "doc": None}
    t0 = time.perf_counter()
    train = train[::CLASSIFY_TRAIN_EVERY]  # Brown lists documents by genre: still stratified
    train_rows = limit_rows(encode_documents(cfg, vocab, train, hide), CLASSIFY_TOKENS)
    held_rows = limit_rows(encode_documents(cfg, vocab, held, hide), CLASSIFY_TOKENS)
    inf_train = infer_attributes(model, train_rows, "genre", INFER)
    inf_held = infer_attributes(model, held_rows, "genre", INFER)
    y_train = np.array([genres.index(d.fields["genre"]) for d in train])
    y_held = np.array([genres.index(d.fields["genre"]) for d in held])
    clf = fit_logistic_regression(inf_train.vectors, y_train, len(genres), l2=1e-2)
    acc_lr = float((clf.predict(inf_held.vectors) == y_held).mean())
    loglik = attribute_loglik(model, held_rows, "genre")
    acc_gen = float((loglik.argmax(1) == y_held).mean())

    # Nearest learned genre vector (cosine) to each inferred vector.
    table = model.attribute_table(cfg.attribute_index("genre")).detach().numpy()
    v = inf_held.vectors / np.maximum(np.linalg.norm(inf_held.vectors, axis=1, keepdims=True), 1e-9)
    t = table / np.linalg.norm(table, axis=1, keepdims=True)
    acc_nearest = float(((v @ t.T).argmax(1) == y_held).mean())

    def bow(rows: EncodedRows, n_docs: int) -> np.ndarray:
        m = np.zeros((n_docs, cfg.vocab_size))
        np.add.at(m, (rows.doc_index, rows.targets), 1.0)
        return m / m.sum(1, keepdims=True)

    bow_clf = fit_logistic_regression(
        bow(train_rows, len(train)), y_train, len(genres), l2=1e-2, steps=300
    )
    acc_bow = float((bow_clf.predict(bow(held_rows, len(held))) == y_held).mean())
    majority = float((y_held == np.bincount(y_train).argmax()).mean())
    seconds = time.perf_counter() - t0

    losses = inf_held.losses
    conv = inf_held.steps_to_converge(0.01)
    # Loss of each held-out text with its true genre vector (the target inference aims at).
    true_lp = loglik[np.arange(len(held)), y_held] / inf_held.tokens
    lines = [
        f"Held-out documents: {len(held)} (dev + test, {len(genres)} genres); the first "
        f"{CLASSIFY_TOKENS} tokens of each document; training documents for the logistic "
        f"regression: {len(train)}, their vectors inferred the same way (genre and document "
        f"hidden). Inference: {INFER.steps} Adam steps, learning rate {INFER.lr}, from the "
        f"expected genre vector, every weight frozen, document vector = its expected value.",
        "",
        "| classifier | accuracy |",
        "|---|---|",
        f"| logistic regression on inferred genre vectors | {100 * acc_lr:.1f} % |",
        f"| nearest learned genre vector (cosine) to the inferred one | "
        f"{100 * acc_nearest:.1f} % |",
        f"| generative argmax_g P(text \\| genre g) (uniform prior) | {100 * acc_gen:.1f} % |",
        f"| reference: logistic regression on bag-of-words frequencies (same tokens, the "
        f"model's {cfg.vocab_size:,}-unit vocabulary) | {100 * acc_bow:.1f} % |",
        f"| reference: majority class ({genres[int(np.bincount(y_train).argmax())]}) "
        f"| {100 * majority:.1f} % |",
        "",
        "Convergence of inference on the held-out documents (mean per-token loss, nats):",
        "",
        "| step | " + " | ".join(str(s) for s in range(0, INFER.steps + 1, 5)) + " |",
        "|---|" + "---|" * len(range(0, INFER.steps + 1, 5)),
        "| mean loss | "
        + " | ".join(f"{losses[s].mean():.4f}" for s in range(0, INFER.steps + 1, 5))
        + " |",
        "",
        f"- Steps until the loss is within 0.01 nats of its final value: median "
        f"{int(np.median(conv))}, 90th percentile {int(np.percentile(conv, 90))}, "
        f"max {int(conv.max())}; change over the last 5 steps: mean "
        f"{float(np.abs(losses[-1] - losses[-6]).mean()):.5f} nats.",
        f"- Mean loss with the expected genre vector (step 0) {losses[0].mean():.4f}, after "
        f"inference {losses[-1].mean():.4f}, with the true genre's learned vector "
        f"{float(-true_lp.mean()):.4f} nats per token.",
        f"- Inference and classification took {seconds:.0f} s in all.",
    ]
    stats = {"lr": acc_lr, "generative": acc_gen, "bow": acc_bow, "majority": majority}
    return lines, stats


@torch.no_grad()
def attribute_effect(model: LBL) -> list[str]:
    """How far the learned attribute vectors move the gate and the distributions."""
    cfg = model.config
    lines = []
    for a, spec in enumerate(cfg.attributes):
        gate = model.attribute_table(a) @ model.W_fd[:, cfg.slices()[a]].T  # (values, F)
        lines.append(
            f"- {spec.name}: its part of the gate W^fd x varies across the {len(spec.values)} "
            f"values with a standard deviation of {float(gate.std(0).mean()):.3f} (mean over "
            f"factors) around a mean magnitude of {float(gate.abs().mean()):.3f}."
        )
    genres = cfg.attributes[cfg.attribute_index("genre")].values
    start = torch.full((1, cfg.order - 1), 1)
    lps = [model.log_probs(start, x=attribute_vector(model, {"genre": g})[None])[0] for g in genres]
    kls = []
    for i, p in enumerate(lps):
        for j, q in enumerate(lps):
            if i != j:
                kls.append(float((p.exp() * (p - q)).nan_to_num().sum()))
    lines.append(
        f"- KL divergence between the first-word distributions of two genres (document "
        f"expected): mean {np.mean(kls):.4f} nats over the {len(kls)} ordered pairs, largest "
        f"{max(kls):.4f}."
    )
    return lines


def similarity_table(model: LBL, vocab: Vocabulary) -> list[str]:
    lines = [
        "| query | A | B | common | unique to A | unique to B |",
        "|---|---|---|---|---|---|",
    ]
    for word, a, b in QUERIES:
        if word not in vocab:
            continue
        nb = conditional_neighbours(
            model,
            vocab,
            word,
            attribute_vector(model, {"genre": a}),
            attribute_vector(model, {"genre": b}),
            top=15,
            show=3,
        )
        lines.append(
            f"| {word} | {a} | {b} | {', '.join(nb.common) or '-'} | "
            f"{', '.join(nb.unique_a) or '-'} | {', '.join(nb.unique_b) or '-'} |"
        )
    # How much the attribute moves the neighbourhoods at all: overlap of the top-15 lists.
    overlaps = []
    for word, a, b in QUERIES:
        if word in vocab:
            nb = conditional_neighbours(
                model,
                vocab,
                word,
                attribute_vector(model, {"genre": a}),
                attribute_vector(model, {"genre": b}),
                top=15,
            )
            overlaps.append(len(set(nb.top_a) & set(nb.top_b)))
    lines += ["", f"Top-15 lists shared between A and B: {overlaps} words (of 15) per query."]
    return lines


def samples_table(model: LBL, vocab: Vocabulary) -> list[str]:
    lines = ["| attribute | sample |", "|---|---|"]
    for genre in SAMPLE_GENRES:
        x = attribute_vector(model, {"genre": genre})
        for s in sample_sentences(model, vocab, x, n=2, max_words=30, seed=SAMPLE_SEED):
            lines.append(f"| {genre} | {' '.join(s).replace('|', '/')} |")
    x = (
        attribute_vector(model, {"genre": MIX[0]}) + attribute_vector(model, {"genre": MIX[1]})
    ) / 2
    for s in sample_sentences(model, vocab, x, n=2, max_words=30, seed=SAMPLE_SEED):
        lines.append(f"| ({MIX[0]} + {MIX[1]}) / 2 | {' '.join(s).replace('|', '/')} |")
    return lines


UD_MODELS = {
    "ud_lbl": "LBL, no attributes",
    "ud_shared": "ATD, language attribute, shared vocabulary",
    "ud_unshared": "ATD, language attribute, unshared vocabularies (section 2.4)",
}


def unshared_section(ud_exp: Path) -> list[str]:
    """Section 2.4: per-language test perplexity of the three UD models (stage 3)."""
    if not all((ud_exp / name / "model.safetensors").exists() for name in UD_MODELS):
        return []
    lines = [
        "## Unshared vocabularies (section 2.4): English, Turkish and Uyghur UD treebanks",
        "",
    ]
    table: list[str] = []
    langs: list[str] | None = None
    blocks: dict[str, int] = {}
    for name, label in UD_MODELS.items():
        model, vocab = load_lbl(ud_exp / name)
        meta = json.loads((ud_exp / name / "training.json").read_text(encoding="utf-8"))
        cfg = LBLTrainConfig.from_json(meta["config"])
        docs = {d.doc_id: d for d in read_documents(cfg.data, ud_exp)}
        test = [docs[i] for i in meta["split"]["test"]]
        rows = encode_documents(model.config, vocab, test)
        lang = np.array([test[i].fields["lang"] for i in rows.doc_index])
        langs = langs or sorted(set(lang))
        lp = score_rows(model, rows)
        targets = torch.from_numpy(rows.targets)
        if model.config.vocab_attribute:
            targets = model.in_vocabulary(targets, torch.from_numpy(rows.attrs))
        unk = targets.numpy() == UNK_ID
        cells = [
            f"{perplexity(lp[lang == g]):.1f} ({100 * unk[lang == g].mean():.1f} %)" for g in langs
        ]
        table.append(
            f"| {label} | {model.num_parameters():,} | {meta['best_dev_ppl']:.1f} | "
            + " | ".join(cells)
            + f" | {perplexity(lp):.1f} |"
        )
        blocks = meta["data"].get("vocabulary_blocks", blocks)
    assert langs is not None
    n_docs = len(docs)
    lines += [
        f"One multilingual LBL over {n_docs} runs of 20 consecutive sentences from "
        "UD_English-LinES, UD_Turkish-IMST and UD_Uyghur-UDT (all their files), split 80/10/10 "
        "stratified by language; the language is the attribute. Unshared: a word seen in "
        "training under one language only belongs to that language's output vocabulary "
        f"({', '.join(f'{k} {v:,}' for k, v in blocks.items())} units), and in a text of "
        "another language it is that language's <unk>. Test perplexity per language (natural "
        "logs, <unk> as a word), with the share of test tokens scored as <unk> in brackets.",
        "",
        "| model | parameters | dev ppl | " + " | ".join(langs) + " | all |",
        "|---|---|---|" + "---|" * len(langs) + "---|",
        *table,
    ]
    cli = ud_exp / "ppl_unshared.txt"
    if cli.exists():
        lines += [
            "",
            "The unshared model through `rescorer ppl --lm lbl:exp/ud/ud_unshared --context "
            "test_context.jsonl` (the context gives each sentence's language; the CLI's OOV "
            "count is of the whole vocabulary, so a word of another language's block counts as "
            "in vocabulary there but is scored as <unk>):",
            "",
            "```",
            cli.read_text().strip(),
            "```",
        ]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("recipe_dir", type=Path)
    ap.add_argument("exp_dir", type=Path)
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--seeds", nargs="+", default=["0", "1"])
    args = ap.parse_args()
    t_start = time.perf_counter()
    torch.manual_seed(0)
    exp: Path = args.exp_dir
    seeds = args.seeds
    first = exp / f"atd_seed{seeds[0]}"
    meta = json.loads((first / "training.json").read_text(encoding="utf-8"))
    cfg = LBLTrainConfig.from_json(meta["config"])
    docs = {d.doc_id: d for d in read_documents(cfg.data, args.data_dir)}
    split = {k: [docs[i] for i in ids] for k, ids in meta["split"].items()}
    test = split["test"]

    # 1. perplexity
    rows: dict[str, dict[str, list[float]]] = {}
    sizes: dict[str, int] = {}
    train_secs: dict[str, list[float]] = {}
    dev: dict[str, list[float]] = {}
    for kind in ("lbl", "atd"):
        for seed in seeds:
            path = exp / f"{kind}_seed{seed}"
            model, vocab = load_lbl(path)
            m = json.loads((path / "training.json").read_text(encoding="utf-8"))
            sizes[kind] = model.num_parameters()
            train_secs.setdefault(kind, []).append(m["seconds"])
            dev.setdefault(kind, []).append(m["best_dev_ppl"])
            for setting, value in perplexity_rows(model, vocab, test, adapt=True).items():
                rows.setdefault(f"{kind}/{setting}", {}).setdefault("v", []).append(value)
    n_test_tokens = sum(len(s) + 1 for d in test for s in d.sentences)

    model, vocab = load_lbl(first)
    class_lines, _ = classification(model, vocab, split["train"], split["dev"] + split["test"])
    sim_lines = similarity_table(model, vocab)
    sample_lines = samples_table(model, vocab)

    times = {}
    times_file = exp / "times.tsv"
    if times_file.exists():
        for line in times_file.read_text().splitlines():
            if not line.strip():
                continue
            name, secs = line.split("\t")
            times[name] = times.get(name, 0) + int(secs)
    cli_ppl = (exp / "cli" / "ppl.txt").read_text() if (exp / "cli" / "ppl.txt").exists() else ""
    export = (
        (exp / "cli" / "export.txt").read_text() if (exp / "cli" / "export.txt").exists() else ""
    )
    results_secs = time.perf_counter() - t_start
    total = sum(times.values()) + results_secs
    c = cfg.model
    label = {
        "lbl/none": "LBL (no attributes)",
        "atd/genre": "ATD, genre known, document vector expected",
        "atd/none": "ATD, no attributes (both expected)",
    }
    half_label = {
        "lbl/second half: none": "LBL",
        "atd/second half: genre": "ATD, genre known, document expected",
        "atd/second half: genre + inferred doc": "ATD, genre known, document vector inferred "
        f"from the first {ADAPT_TOKENS} tokens of the first half",
    }
    out = [
        "# Multiplicative attribute LBL on the Brown corpus (Kiros et al. 2014): results",
        "",
        f"- Command: `bash recipes/brown_attributes/run.sh` (every step niced; seeds "
        f"{' '.join(seeds)})",
        f"- Date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- Device: {describe_machine()}; models trained on the CPU, other jobs sharing it",
        f"- Wall time: {total / 60:.1f} min in all (training "
        f"{sum(sum(v) for v in train_secs.values()) / 60:.1f} min, tables "
        f"{results_secs / 60:.1f} min)",
        f"- Data: Brown, {len(docs)} documents split by document, stratified by genre: "
        f"{len(split['train'])} train, {len(split['dev'])} dev, {len(test)} test; lower-cased, "
        f"punctuation kept; vocabulary: the {cfg.data.max_vocab} most frequent units, the rest "
        f"<unk> (training <unk> rate {100 * meta['data']['train_unk_rate']:.1f} %).",
        f"- Models: order {c.order} (context of {c.order - 1} words), K = {c.embed_dim}; ATD: "
        f"F = {c.factors} factors, attributes genre (15 values) and document (one per training "
        f"document), {c.attr_dims} dimensions, rectified lookups; LBL: its own V x K matrix. "
        f"Parameters: LBL {sizes['lbl']:,}, ATD {sizes['atd']:,}. Training: "
        f"{json.dumps(cfg.to_json()['train'])}.",
        f"- Perplexity: natural logs, every token of the {len(test)} test documents "
        f"({n_test_tokens:,} tokens incl. one </s> per sentence), <unk> as a word. Test "
        f"documents are unseen values of the document attribute.",
        "",
        "## Perplexity",
        "",
        "| model | dev ppl (training's pick) | test ppl |",
        "|---|---|---|",
    ]
    for key, name in label.items():
        kind = key.split("/")[0]
        d = summary(dev[kind]) if key in ("lbl/none", "atd/genre") else "-"
        out.append(f"| {name} | {d} | {summary(rows[key]['v'])} |")
    out += [
        "",
        "Second halves of the test documents (each document's later sentences):",
        "",
        "| model | test ppl, second halves |",
        "|---|---|",
    ]
    for key, name in half_label.items():
        out.append(f"| {name} | {summary(rows[key]['v'])} |")
    out += [
        "",
        f"Training time per model (s): LBL {summary(train_secs['lbl'], 0)}, ATD "
        f"{summary(train_secs['atd'], 0)}. The inferred document vectors: "
        f"{ADAPT_STEPS.steps} Adam steps, learning rate {ADAPT_STEPS.lr}.",
        "",
        f"How much the attributes change the ATD (seed {seeds[0]}):",
        "",
        *attribute_effect(model),
        "",
        f"## Genre classification of held-out documents (ATD seed {seeds[0]})",
        "",
        *class_lines,
        "",
        f"## Conditional word similarity (Table 5 layout; ATD seed {seeds[0]})",
        "",
        "Top 15 neighbours by cosine among the rows of T^x, x = [genre vector; expected "
        "document vector]; up to 3 shown of the common ones and of those unique to each side.",
        "",
        *sim_lines,
        "",
        f"## Samples (Table 2 layout; ATD seed {seeds[0]})",
        "",
        "Ancestral sampling from <s> with the genre's vector (document vector expected), "
        "<unk> never drawn, cut at 30 words; the last rows condition on the average of two "
        "genre vectors. Every row uses the same random numbers (seed "
        f"{SAMPLE_SEED}), so where two rows differ, the attribute vector made the difference.",
        "",
        *sample_lines,
        "",
        *unshared_section(exp / "ud"),
        "",
        "## Through the CLI",
        "",
        "`rescorer ppl --lm atd=lbl:exp/atd_seed0 --text-format kaldi --context "
        "test_context.jsonl` on the test sentences (the row 'ATD, genre known' above):",
        "",
        "```",
        cli_ppl.strip(),
        "```",
        "",
        "`rescorer lbl-export exp/atd_seed0 atd_news.onnx --context genre=news`:",
        "",
        "```",
        export.strip(),
        "```",
        "",
        "Stage wall times (s): " + ", ".join(f"{k} {v}" for k, v in times.items()),
    ]
    with atomic_write(args.recipe_dir / "RESULTS.md") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
