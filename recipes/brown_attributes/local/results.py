"""Stage 4 of recipes/brown_attributes: the tables -> RESULTS.md (and training_curves.png).

    python local/results.py RECIPE_DIR EXP_DIR DATA_DIR --seeds 0 1 [--out DIR]

Both go into --out (default EXP_DIR); `run.sh --publish` merges the page into the committed
RESULTS.md (recipes/common/publish.py).

1. Perplexity of the test documents (every token incl. </s>; words outside the vocabulary as
   <unk>) for the plain LBL, the genre-gated LBL (ATD) and, where trained, the ATD with genre
   and document attributes, under several attribute settings, per seed (mean ± half the
   range); on the second halves of the test documents, with attribute vectors inferred from the
   first halves (section 2.5). The dev perplexity per epoch of every run -> training_curves.png.
2. How far the genre moves the ATD's distributions: KL divergences between genres, of the
   first word and of the next word over test histories.
3. Genre classification of the held-out (dev + test) documents with the first seed's ATD: the
   genre vector of each document inferred with every weight frozen (section 2.5), then a
   logistic regression trained on the vectors inferred the same way for the training documents;
   against the generative argmax over the 15 learned genre vectors, a bag-of-words logistic
   regression on the same tokens, and the majority class. How inference converges. The
   paper's section 3.3 features (eqs. 8-9): the unit-norm sum of a text's word vectors under the
   LBL, the unconditioned ATD and the ATD conditioned on an inferred genre vector, alone and
   beside tf-idf.
4. Conditional word similarity (Table 5 layout) and conditioned samples (Table 2 layout).
5. What the CLI stages wrote (ppl through ``lbl:DIR``, the ONNX export's parity).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import time
from pathlib import Path

import numpy as np
import torch

from rescorer.core.machine import describe_machine
from rescorer.core.output import atomic_write
from rescorer.lm_models.corpora import Document
from rescorer.lm_models.curves import LINE_STYLES, plot_dev_curves
from rescorer.lm_models.lbl.model import LBL, load_lbl
from rescorer.lm_models.lbl.train import (
    EncodedRows,
    InferenceOptions,
    LBLTrainConfig,
    LogisticRegression,
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
from rescorer.lm_models.vocab import BOS_ID, SPECIAL_TOKENS, UNK_ID, Vocabulary

CLASSIFY_TOKENS = 150  # tokens of each document used to infer its genre vector
CLASSIFY_TRAIN_EVERY = 2  # every 2nd training document trains the logistic regression
ADAPT_TOKENS = 300  # tokens of each test document's first half its document vector comes from
# Adam on attribute vectors: the trained genre vectors have entries of about 0.1 (a quarter to
# a half of them 0), so a learning rate of 0.1 overshoots (the loss rises for the first steps);
# 0.03 descends monotonically and ends lowest after 25 steps (of 0.01, 0.03, 0.1 on 21 held-out
# documents).
INFER = InferenceOptions(steps=25, lr=0.03)
ADAPT_STEPS = InferenceOptions(steps=25, lr=0.03)
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
SCORE_CHUNK = 4096  # rows per scoring call
KL_ROWS = 400  # test histories the next-word KL between genres is averaged over


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


def score_x(model: LBL, rows: EncodedRows, x: torch.Tensor) -> np.ndarray:
    """ln P of every row with explicit attribute vectors x (N, D)."""
    out = np.empty(len(rows.targets))
    with torch.no_grad():
        for lo in range(0, len(out), SCORE_CHUNK):
            sl = slice(lo, lo + SCORE_CHUNK)
            h, t = torch.from_numpy(rows.history[sl]), torch.from_numpy(rows.targets[sl])
            out[sl] = model(h, t, x=x[sl]).double().numpy()
    return out


def inferred_second_halves(
    model: LBL, vocab: Vocabulary, test: list[Document], attribute: str
) -> float:
    """Section 2.5 on unseen documents: each test document's ``attribute`` vector inferred from
    the first ADAPT_TOKENS tokens of its first half (that attribute hidden, the others as
    given, every weight frozen), its second half scored with it: the perplexity."""
    cfg = model.config
    hide = {attribute: None}
    first, second = halves(test)
    rows = limit_rows(encode_documents(cfg, vocab, first, hide), ADAPT_TOKENS)
    inferred = infer_attributes(model, rows, attribute, ADAPT_STEPS)
    if len(inferred.vectors) != len(test):
        raise ValueError("every test document needs tokens in its first half")
    rows2 = encode_documents(cfg, vocab, second, hide)
    sl = cfg.slices()[cfg.attribute_index(attribute)]
    with torch.no_grad():
        x = model.attribute_vector(torch.from_numpy(rows2.attrs))
        x[:, sl] = torch.from_numpy(inferred.vectors).float()[torch.from_numpy(rows2.doc_index)]
    return perplexity(score_x(model, rows2, x))


def perplexity_rows(model: LBL, vocab: Vocabulary, test: list[Document]) -> dict[str, float]:
    """Test perplexity of one model under each attribute setting it supports.

    Keys: "all: ..." over every test token, "second: ..." over the second halves. The test
    documents are unseen values of "doc": encoded as missing (its expected vector).
    """
    cfg = model.config
    names = [a.name for a in cfg.attributes]
    hide_all: dict[str, str | None] = dict.fromkeys(names)
    first, second = halves(test)
    del first

    def ppl(docs: list[Document], override: dict[str, str | None] | None = None) -> float:
        return perplexity(score_rows(model, encode_documents(cfg, vocab, docs, override)))

    if not names:
        return {"all": ppl(test), "second": ppl(second)}
    out = {
        "all: genre": ppl(test),
        "all: none": ppl(test, hide_all),
        "second: genre": ppl(second),
    }
    if "doc" in names:
        out["second: genre + inferred doc"] = inferred_second_halves(model, vocab, test, "doc")
    else:
        out["second: inferred genre"] = inferred_second_halves(model, vocab, test, "genre")
    return out


def word_counts(rows: EncodedRows, n_docs: int, vocab_size: int) -> np.ndarray:
    """(documents, V) counts of each document's words (the specials left out)."""
    m = np.zeros((n_docs, vocab_size))
    np.add.at(m, (rows.doc_index, rows.targets), 1.0)
    m[:, : len(SPECIAL_TOKENS)] = 0.0
    return m


def unit_rows(a: np.ndarray) -> np.ndarray:
    return a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)


def class_probabilities(clf: LogisticRegression, features: np.ndarray) -> np.ndarray:
    z = ((features - clf.mean) / clf.std) @ clf.weight.T + clf.bias
    z = np.exp(z - z.max(1, keepdims=True))
    return z / z.sum(1, keepdims=True)


@torch.no_grad()
def paper_features(
    model: LBL,
    lbl: LBL | None,
    counts: tuple[np.ndarray, np.ndarray],
    inferred: tuple[np.ndarray, np.ndarray],
    labels: tuple[np.ndarray, np.ndarray],
    n_classes: int,
) -> list[str]:
    """Section 3.3 (Fig. 3b-c) on genre: a text is the unit-norm sum of its word vectors, under
    the LBL (rows of R), the unconditioned ATD (eq. 8, rows of (W^fv)^T W^fk) and the ATD
    conditioned on a genre vector x (eq. 9, rows of T^x); x is not the label, so it is
    inferred: by gradient descent (section 2.5, the vectors of the classification above) or, as
    in the paper's section 3.3, as the genre vectors averaged with the probabilities of a
    tf-idf logistic regression (cross-fitted on the training documents: two halves, each
    predicted by a classifier of the other). Each alone and beside tf-idf features; a
    logistic regression on the training documents, accuracy on the held-out ones."""
    cfg = model.config
    a = cfg.attribute_index("genre")
    sl = cfg.slices()[a]
    (c_tr, c_he), (y_tr, y_he) = counts, labels
    df = (c_tr > 0).sum(0)
    idf = np.log((1 + len(c_tr)) / (1 + df)) + 1.0

    def tfidf(c: np.ndarray) -> np.ndarray:
        return unit_rows(c / np.maximum(c.sum(1, keepdims=True), 1) * idf)

    tf_tr, tf_he = tfidf(c_tr), tfidf(c_he)

    def accuracy(f_tr: np.ndarray, f_he: np.ndarray) -> float:
        clf = fit_logistic_regression(f_tr, y_tr, n_classes, l2=1e-2, steps=300)
        return float((clf.predict(f_he) == y_he).mean())

    # x from a tf-idf classifier's probabilities (training documents cross-fitted).
    table = model.attribute_table(a).numpy().astype(np.float64)  # (genres, dim)
    half = np.arange(len(c_tr)) % 2 == 0
    p_tr = np.zeros((len(c_tr), n_classes))
    for part in (half, ~half):
        clf = fit_logistic_regression(tf_tr[~part], y_tr[~part], n_classes, l2=1e-2, steps=300)
        p_tr[part] = class_probabilities(clf, tf_tr[part])
    clf = fit_logistic_regression(tf_tr, y_tr, n_classes, l2=1e-2, steps=300)
    weighted = (p_tr @ table, class_probabilities(clf, tf_he) @ table)

    w_fv, w_fk, w_fd = (t.double().numpy() for t in (model.W_fv, model.W_fk, model.W_fd))
    expected = torch.cat([model.expected_attribute(i) for i in range(len(cfg.attributes))])

    def conditioned(c: np.ndarray, genre_x: np.ndarray) -> np.ndarray:
        x = np.tile(expected.double().numpy(), (len(c), 1))
        x[:, sl] = genre_x
        return unit_rows(((c @ w_fv.T) * (x @ w_fd.T)) @ w_fk)  # sum_w T^x(w, :), eq. 9

    rows: list[tuple[str, tuple[np.ndarray, np.ndarray]]] = []
    if lbl is not None:
        r = lbl.R.double().numpy()
        rows.append(("LBL: rows of R", (unit_rows(c_tr @ r), unit_rows(c_he @ r))))
    e = w_fv.T @ w_fk  # eq. 8
    rows += [
        ("unconditioned ATD (eq. 8)", (unit_rows(c_tr @ e), unit_rows(c_he @ e))),
        (
            "conditioned ATD (eq. 9), x inferred by gradient descent (section 2.5)",
            (conditioned(c_tr, inferred[0]), conditioned(c_he, inferred[1])),
        ),
        (
            "conditioned ATD (eq. 9), x = genre vectors weighted by a tf-idf classifier",
            (conditioned(c_tr, weighted[0]), conditioned(c_he, weighted[1])),
        ),
    ]
    lines = [
        "| word vectors summed over the text | alone | beside tf-idf |",
        "|---|---|---|",
        f"| none: tf-idf only | - | {100 * accuracy(tf_tr, tf_he):.1f} % |",
    ]
    for name, (f_tr, f_he) in rows:
        alone = accuracy(f_tr, f_he)
        both = accuracy(np.hstack([tf_tr, f_tr]), np.hstack([tf_he, f_he]))
        lines.append(f"| {name} | {100 * alone:.1f} % | {100 * both:.1f} % |")
    return lines


def classification(
    model: LBL,
    vocab: Vocabulary,
    train: list[Document],
    held: list[Document],
    lbl: LBL | None = None,
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

    # The section 3.3 features are sums over whole documents (the paper's blog posts).
    whole_train = encode_documents(cfg, vocab, train, hide)
    whole_held = encode_documents(cfg, vocab, held, hide)
    paper = paper_features(
        model,
        lbl,
        (word_counts(whole_train, len(train), cfg.vocab_size),
         word_counts(whole_held, len(held), cfg.vocab_size)),
        (inf_train.vectors, inf_held.vectors),
        (y_train, y_held),
        len(genres),
    )  # fmt: skip

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
        "",
        "The paper's section 3.3 setup (Fig. 3b-c, eqs. 8-9) on the same documents, whole (as "
        "the paper's blog posts): each text is the unit-norm sum of its words' vectors "
        "(specials left out), alone or "
        "beside its tf-idf vector (idf of the training documents), and a logistic regression "
        "on the training documents predicts the genre. The conditioned ATD needs a genre "
        "vector x, which is the label here, so x is inferred as in the paper: by gradient "
        f"descent (section 2.5, from the first {CLASSIFY_TOKENS} tokens as above), or as the "
        "learned genre vectors averaged with the probabilities of a tf-idf classifier (section "
        "3.3; for the training documents a classifier of the other half of them). The LBL is "
        "the first seed's. Features are standardised (the logistic regression above), so "
        "beside tf-idf the 64 summed dimensions sit among 10,000 tf-idf columns. With "
        f"{len(held)} held-out documents one document is {100 / len(held):.1f} points and the "
        "binomial standard error of an accuracy near 35 % is about "
        f"{100 * (0.35 * 0.65 / len(held)) ** 0.5:.0f} points.",
        "",
        *paper,
    ]
    stats = {"lr": acc_lr, "generative": acc_gen, "bow": acc_bow, "majority": majority}
    return lines, stats


def genre_kl(model: LBL, history: torch.Tensor) -> np.ndarray:
    """(pairs,) KL(P_g || P_h) of the next word given each history, between every ordered pair
    of genres g != h (document expected), averaged over the histories (nats)."""
    genres = model.config.attributes[model.config.attribute_index("genre")].values
    lps = []
    for g in genres:
        x = attribute_vector(model, {"genre": g})[None].expand(len(history), -1)
        lps.append(model.log_probs(history, x=x))
    kls = []
    for i, p in enumerate(lps):
        for j, q in enumerate(lps):
            if i != j:
                kls.append(float((p.exp() * (p - q)).nan_to_num().sum(1).mean()))
    return np.array(kls)


@torch.no_grad()
def attribute_effect(model: LBL, test_rows: EncodedRows) -> tuple[list[str], dict[str, float]]:
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
    first = genre_kl(model, torch.full((1, cfg.order - 1), BOS_ID))
    pick = np.random.default_rng(0).choice(len(test_rows.targets), KL_ROWS, replace=False)
    nxt = genre_kl(model, torch.from_numpy(test_rows.history[np.sort(pick)]))
    rest = " (document expected)" if len(cfg.attributes) > 1 else ""
    lines += [
        f"- KL divergence between the first-word distributions of two genres{rest}: mean "
        f"{first.mean():.4f} nats over the {len(first)} ordered pairs, largest "
        f"{first.max():.4f}.",
        f"- KL divergence between two genres' next-word distributions, averaged over "
        f"{KL_ROWS} random test histories: mean {nxt.mean():.4f} nats over the pairs, largest "
        f"{nxt.max():.4f}.",
    ]
    return lines, {"kl_first": float(first.mean()), "kl_next": float(nxt.mean())}


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


KINDS = {"lbl": "LBL", "atd": "ATD (genre)", "atd_doc": "ATD (genre + document)"}
# (kind, perplexity_rows key, label) of the tables: all test tokens, then second halves.
PPL_ROWS = [
    ("lbl", "all", "LBL (no attributes)"),
    ("atd", "all: genre", "ATD (genre), genre known"),
    ("atd", "all: none", "ATD (genre), genre expected (no attribute)"),
    ("atd_doc", "all: genre", "ATD (genre + document), genre known, document expected"),
    ("atd_doc", "all: none", "ATD (genre + document), both expected"),
]
HALF_ROWS = [
    ("lbl", "second", "LBL"),
    ("atd", "second: genre", "ATD (genre), genre known"),
    ("atd", "second: inferred genre", "ATD (genre), genre vector inferred from the first half"),
    ("atd_doc", "second: genre", "ATD (genre + document), genre known, document expected"),
    (
        "atd_doc",
        "second: genre + inferred doc",
        "ATD (genre + document), genre known, document vector inferred from the first half",
    ),
]


def plot_curves(curves: dict[str, list[float]], path: Path) -> None:
    """Dev perplexity per epoch of every training run (a PNG): a colour per model, a line style
    per seed, a star on the epoch kept."""
    colours = {"lbl": "tab:blue", "atd": "tab:red", "atd_doc": "tab:green"}
    seeds = sorted({name.split("_seed")[1] for name in curves})

    def style(name: str) -> dict[str, object]:
        kind, seed = name.split("_seed")
        return {
            "linestyle": LINE_STYLES[seeds.index(seed) % len(LINE_STYLES)],
            "color": colours.get(kind, "black"),
            "marker": "o",
            "ms": 3,
        }

    plot_dev_curves({"Brown, LBL and ATD: dev perplexity per epoch": curves}, path, style_of=style)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("recipe_dir", type=Path)
    ap.add_argument("exp_dir", type=Path)
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--seeds", nargs="+", default=["0", "1"])
    ap.add_argument("--out", type=Path, help="folder of RESULTS.md and its plot (default: EXP)")
    args = ap.parse_args()
    out: Path = args.out or args.exp_dir
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

    # 1. perplexity, per run; KL between genres per ATD run; the training curves
    values: dict[tuple[str, str], list[float]] = {}
    sizes: dict[str, int] = {}
    train_secs: dict[str, list[float]] = {}
    dev: dict[str, list[float]] = {}
    epochs: dict[str, list[str]] = {}
    curves: dict[str, list[float]] = {}
    kl: dict[str, list[float]] = {}
    runs: dict[str, list[str]] = {}
    test_rows = None
    for kind in KINDS:
        for seed in seeds:
            path = exp / f"{kind}_seed{seed}"
            if not (path / "model.safetensors").exists():
                continue
            runs.setdefault(kind, []).append(seed)
            model, vocab = load_lbl(path)
            m = json.loads((path / "training.json").read_text(encoding="utf-8"))
            sizes[kind] = model.num_parameters()
            train_secs.setdefault(kind, []).append(m["seconds"])
            dev.setdefault(kind, []).append(m["best_dev_ppl"])
            epochs.setdefault(kind, []).append(f"{m['best_epoch']}/{len(m['epochs'])}")
            curves[f"{kind}_seed{seed}"] = [e["dev_ppl"] for e in m["epochs"]]
            for setting, value in perplexity_rows(model, vocab, test).items():
                values.setdefault((kind, setting), []).append(value)
            if kind == "atd":
                test_rows = encode_documents(model.config, vocab, test)
                _, effect = attribute_effect(model, test_rows)
                for key, v in effect.items():
                    kl.setdefault(key, []).append(v)
    n_test_tokens = sum(len(s) + 1 for d in test for s in d.sentences)
    plot_curves(curves, out / "training_curves.png")

    model, vocab = load_lbl(first)
    assert test_rows is not None
    effect_lines, _ = attribute_effect(model, encode_documents(model.config, vocab, test))
    lbl = None
    if (exp / f"lbl_seed{seeds[0]}" / "model.safetensors").exists():
        lbl, lbl_vocab = load_lbl(exp / f"lbl_seed{seeds[0]}")
        if lbl_vocab != vocab:
            raise ValueError("the LBL and the ATD have different vocabularies")
    class_lines, _ = classification(model, vocab, split["train"], split["dev"] + split["test"], lbl)
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
    n_genres = len(model.config.attributes[model.config.attribute_index("genre")].values)

    def seeds_of(kind: str) -> str:
        return " ".join(runs.get(kind, []))

    out = [
        "# Multiplicative attribute LBL on the Brown corpus (Kiros et al. 2014): results",
        "",
        f"- Command: `bash recipes/brown_attributes/run.sh` (every step niced; seeds "
        f"{' '.join(seeds)}; the genre + document ATD: seeds {seeds_of('atd_doc') or 'none'})",
        f"- Date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- Device: {describe_machine()}; models trained on the CPU, one thread each, other "
        "jobs sharing it",
        f"- Wall time: {total / 60:.1f} min in all (training "
        f"{sum(sum(v) for v in train_secs.values()) / 60:.1f} min, tables "
        f"{results_secs / 60:.1f} min)",
        f"- Data: Brown, {len(docs)} documents split by document, stratified by genre: "
        f"{len(split['train'])} train, {len(split['dev'])} dev, {len(test)} test; lower-cased, "
        f"punctuation kept; vocabulary: the {cfg.data.max_vocab:,} most frequent units, the "
        f"rest <unk> (training <unk> rate {100 * meta['data']['train_unk_rate']:.1f} %).",
        f"- Models: order {c.order} (context of {c.order - 1} words, as the paper's), K = "
        f"{c.embed_dim}; ATD: F = {c.factors} factors, genre attribute ({n_genres} values, "
        f"{c.dim_of('genre')} dimensions, rectified lookups); the genre + document ATD adds a "
        "document attribute (one value per training document) of the same width. LBL: its own "
        "V x K word matrix. Parameters: "
        + ", ".join(f"{KINDS[k]} {n:,}" for k, n in sizes.items())
        + f". Training: {json.dumps(cfg.to_json()['train'])} (Adam; after an epoch without a "
        "better dev perplexity the learning rate is halved, after two in a row training "
        "stops and the best epoch is kept).",
        f"- Perplexity: natural logs, every token of the {len(test)} test documents "
        f"({n_test_tokens:,} tokens incl. one </s> per sentence), <unk> as a word; mean ± half "
        "the range over the seeds, each seed in brackets. Test documents are unseen values of "
        "the document attribute.",
        "",
        "## Perplexity",
        "",
        "| model | parameters | epochs (best/run) | dev ppl (training's pick) | test ppl |",
        "|---|---|---|---|---|",
    ]

    def cell(kind: str, key: str) -> str:
        v = values.get((kind, key))
        if not v:
            return "-"
        each = ", ".join(f"{x:.2f}" for x in v)
        return f"{summary(v, 2)} ({each})" if len(v) > 1 else f"{v[0]:.2f}"

    for kind, key, name in PPL_ROWS:
        if (kind, key) not in values:
            continue
        pick = key in ("all", "all: genre")
        out.append(
            f"| {name} | {sizes[kind]:,} | {', '.join(epochs[kind]) if pick else '-'} | "
            f"{summary(dev[kind], 2) if pick else '-'} | {cell(kind, key)} |"
        )
    if ("lbl", "all") in values and ("atd", "all: genre") in values:
        lbl_v, atd_v = values[("lbl", "all")], values[("atd", "all: genre")]
        gap = [100 * (a / b - 1) for a, b in zip(atd_v, lbl_v, strict=False)]
        out += [
            "",
            f"ATD (genre known) against the LBL, seed by seed: "
            f"{', '.join(f'{g:+.2f} %' for g in gap)} (mean {np.mean(gap):+.2f} %).",
        ]
    out += [
        "",
        f"Second halves of the test documents (each document's later sentences); inferred "
        f"vectors: section 2.5 on the first {ADAPT_TOKENS} tokens of the document's first "
        f"half, {ADAPT_STEPS.steps} Adam steps, learning rate {ADAPT_STEPS.lr}, every weight "
        "frozen:",
        "",
        "| model | test ppl, second halves |",
        "|---|---|",
    ]
    for kind, key, name in HALF_ROWS:
        if (kind, key) in values:
            out.append(f"| {name} | {cell(kind, key)} |")
    out += [
        "",
        "Training time per model (s): "
        + ", ".join(f"{KINDS[k]} {summary(v, 0)}" for k, v in train_secs.items())
        + ". Dev perplexity per epoch of every run:",
        "",
        "![dev perplexity per epoch](training_curves.png)",
        "",
        "How much the genre changes the ATD's distributions (document expected where the "
        "model has one): mean KL divergence between two genres, over the ordered pairs, "
        f"per seed: first word {', '.join(f'{v:.3f}' for v in kl.get('kl_first', []))} nats; "
        f"next word over {KL_ROWS} test histories "
        f"{', '.join(f'{v:.3f}' for v in kl.get('kl_next', []))} nats. Seed {seeds[0]}:",
        "",
        *effect_lines,
        "",
        f"## Genre classification of held-out documents (ATD seed {seeds[0]})",
        "",
        *class_lines,
        "",
        f"## Conditional word similarity (Table 5 layout; ATD seed {seeds[0]})",
        "",
        "Top 15 neighbours by cosine among the rows of T^x, x = the genre vector; up to 3 "
        "shown of the common ones and of those unique to each side.",
        "",
        *sim_lines,
        "",
        f"## Samples (Table 2 layout; ATD seed {seeds[0]})",
        "",
        "Ancestral sampling from <s> with the genre's vector, <unk> never drawn, cut at 30 "
        "words; the last rows condition on the average of two genre vectors. Every row uses "
        f"the same random numbers (seed {SAMPLE_SEED}), so where two rows differ, the "
        "attribute vector made the difference.",
        "",
        *sample_lines,
        "",
        *unshared_section(exp / "ud"),
        "",
        "## Through the CLI",
        "",
        f"`rescorer ppl --lm atd=lbl:exp/atd_seed{seeds[0]} --text-format kaldi --context "
        "test_context.jsonl` on the test sentences (the row 'ATD (genre), genre known' above):",
        "",
        "```",
        cli_ppl.strip(),
        "```",
        "",
        f"`rescorer lbl-export exp/atd_seed{seeds[0]} atd_news.onnx --context genre=news`:",
        "",
        "```",
        export.strip(),
        "```",
        "",
        "Stage wall times (s): " + ", ".join(f"{k} {v}" for k, v in times.items()),
    ]
    with atomic_write(out / "RESULTS.md") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
