// Next-word prediction and word completion in the browser with a `rescorer export --kind step`
// model (one context folded in), run by onnxruntime-web. No DOM here: app.mjs draws the page.
//
// The suggestions are EXACTLY those of `rescorer predict --lm onnx:MODEL.onnx -k K` in batch
// mode (no --vocab, --lm-case auto), for the line `HISTORY<TAB>PREFIX` that the text typed so far
// splits into. The Python code this mirrors, step by step (rescorer/predict.py unless named):
//
// 1. Vocabulary (shared_vocabulary, one model, no word list): the tokens of MODEL.vocab.txt in
//    id order (rescorer/core/io.py read_tokens: one token per line, line ends and a BOM dropped,
//    a repeated token refused), without "<s>", "</s>", "<unk>" (SPECIAL_WORDS) and empty tokens.
// 2. Case (Predictor, case "auto" -> vocabulary_case): "lower" when no vocabulary word has an
//    upper-case letter (w !== w.toUpperCase() somewhere, w !== w.toLowerCase() nowhere), "upper"
//    in the reverse situation, else "none". Typed words and the partial word are mapped with it
//    (Predictor.normalise). The model's own mapping (rescorer/lms/word_vocab.py WordVocab, auto)
//    is decided from the vocabulary words themselves, all known as they are: "none".
// 3. Text -> request (read_requests): the history is the words of the text split on whitespace
//    (str.split: Python's whitespace, PY_SPACE below), the last one excepted when the text does
//    not end in whitespace: that one is the partial word (else ""). An empty history is a
//    sentence start.
// 4. Model state (NativeNextWord over OnnxLM, rescorer/lms/onnx.py): start = zero h0/c0
//    (layers, 1, d) with the pending token <s> (sos_id). Committing word w (Session.commit ->
//    OnnxLM.advance) runs the graph on the pending token from (h, c) and gives the state
//    (next_h0, next_c0) with w's id pending (the vocabulary index of the case-mapped word; unknown
//    words: unk_id). The next-word distribution of a state (OnnxLM.next_logprobs) is the graph's
//    log_softmax for its pending token (float32; Python compares them as float64: the same
//    order). A history that extends the previous one reuses its states (predict_stream); any
//    other is recomputed from the sentence start, which gives the same numbers (here: the states
//    of the longest common word prefix are kept).
// 5. Candidates (PrefixIndex): the vocabulary sorted by code point (Python's str order; JS
//    compares UTF-16 units, hence compareCodePoints below); the words that start with the
//    case-mapped partial word are one contiguous range [lo, hi) of it (span: two bisections).
// 6. Ranking (Session._ranked): the k best of the range by log-probability, ties broken by the
//    lower sorted position (alphabetical), i.e. numpy's partition + lexsort((pos, -value))[:k].
//    Each word's log-probability is its model id's (NativeNextWord._gather; the unk share is 0
//    since every vocabulary word is a model token).
// 7. k: predict's -k (default 5). Fewer when the range is smaller; none when it is empty.

/** Tokens that are never suggested (rescorer.predict.SPECIAL_WORDS). */
export const SPECIAL_WORDS = new Set(["<s>", "</s>", "<unk>"]);

/** Python's str.split() whitespace (str.isspace: JS \s differs on \x1c-\x1f, \x85 and \ufeff). */
const PY_SPACE =
  "\\t\\n\\v\\f\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
const SPACE_RUN = new RegExp(`[${PY_SPACE}]+`, "u");
const ENDS_IN_SPACE = new RegExp(`[${PY_SPACE}]$`, "u");

/** A vocabulary file's tokens: one a line, each once (read_tokens). */
export function parseVocab(text) {
  if (text.startsWith("\ufeff")) text = text.slice(1);
  const lines = text.split(/\r\n|\n/);
  if (lines.length && lines[lines.length - 1] === "") lines.pop();
  const first = new Map();
  lines.forEach((token, i) => {
    if (first.has(token)) {
      throw new Error(`vocabulary line ${i + 1}: ${JSON.stringify(token)} again ` +
        `(first on line ${first.get(token) + 1})`);
    }
    first.set(token, i);
  });
  return lines;
}

/** The prediction vocabulary from the model's tokens (shared_vocabulary without a word list). */
export function predictionVocabulary(tokens) {
  const seen = new Set();
  const words = [];
  for (const w of tokens) {
    if (w && !SPECIAL_WORDS.has(w) && !seen.has(w)) {
      seen.add(w);
      words.push(w);
    }
  }
  if (!words.length) throw new Error("no words in the vocabulary besides <s>, </s>, <unk>");
  return words;
}

/** vocabulary_case: "lower", "upper" or "none". */
export function vocabularyCase(words) {
  let hasLower = false;
  let hasUpper = false;
  for (const w of words) {
    hasLower = hasLower || w !== w.toUpperCase();
    hasUpper = hasUpper || w !== w.toLowerCase();
    if (hasLower && hasUpper) return "none";
  }
  if (hasLower) return "lower";
  if (hasUpper) return "upper";
  return "none";
}

/** rescorer.text.case_function. */
export function caseFunction(mode) {
  if (mode === "lower") return (w) => w.toLowerCase();
  if (mode === "upper") return (w) => w.toUpperCase();
  return (w) => w;
}

/** Compare two strings by code points, as Python's < on str does. */
export function compareCodePoints(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) {
      // UTF-16 unit order is code point order except that a surrogate (part of a code point above
      // U+FFFF) sorts below U+E000..U+FFFF; two surrogates compare in code point order.
      const sx = x >= 0xd800 && x <= 0xdfff;
      const sy = y >= 0xd800 && y <= 0xdfff;
      if (sx !== sy) return sx ? 1 : -1;
      return x - y;
    }
  }
  return a.length - b.length;
}

/** PrefixIndex: the vocabulary sorted once; a prefix's words are one range of it. */
export class PrefixIndex {
  constructor(words) {
    this.sortedWords = [...words].sort(compareCodePoints);
  }

  /** [lo, hi): the sorted positions of exactly the words that start with `prefix`. */
  span(prefix) {
    const words = this.sortedWords;
    if (!prefix) return [0, words.length];
    let lo = 0;
    let hi = words.length;
    while (lo < hi) {  // bisect_left(words, prefix)
      const mid = (lo + hi) >> 1;
      if (compareCodePoints(words[mid], prefix) < 0) lo = mid + 1;
      else hi = mid;
    }
    // The words with the prefix follow each other from lo on: the end is where they stop (the
    // same bound as Python's bisect_left of _prefix_end(prefix)).
    let a = lo;
    let b = words.length;
    while (a < b) {
      const mid = (a + b) >> 1;
      if (words[mid].startsWith(prefix)) a = mid + 1;
      else b = mid;
    }
    return [lo, a];
  }
}

/** The text typed so far as predict's request: {history, prefix} (read_requests). */
export function splitTyped(text) {
  const words = text.split(SPACE_RUN).filter((w) => w !== "");
  if (!words.length || ENDS_IN_SPACE.test(text)) return { history: words, prefix: "" };
  return { history: words.slice(0, -1), prefix: words[words.length - 1] };
}

/** The k best of the sorted positions [lo, hi): value = logprobs[ids[pos]], best first, ties by
 * lower position (Session._ranked). Returns [[position, value], ...]. */
export function topK(logprobs, ids, lo, hi, k) {
  if (k < 1) throw new Error(`k must be >= 1, got ${k}`);
  const best = [];  // [position, value], best first
  for (let pos = lo; pos < hi; pos++) {
    const v = logprobs[ids[pos]];
    // positions come in increasing order: an equal value never displaces an earlier one
    if (best.length === k && !(v > best[k - 1][1])) continue;
    let i = best.length;
    while (i > 0 && v > best[i - 1][1]) i--;
    best.splice(i, 0, [pos, v]);
    if (best.length > k) best.pop();
  }
  return best;
}

/** A step export run by onnxruntime-web: start() and step() states, logprobs() of a state. */
export class StepModel {
  /** `ort`: the onnxruntime-web module; `entry`: a manifest entry; `base`: the manifest's URL. */
  static async load(ort, entry, base) {
    const modelUrl = new URL(entry.model, base);
    const vocabUrl = new URL(entry.vocab, base);
    const [session, vocabText] = await Promise.all([
      ort.InferenceSession.create(modelUrl.href, { executionProviders: ["wasm"] }),
      fetch(vocabUrl).then((r) => {
        if (!r.ok) throw new Error(`${vocabUrl}: HTTP ${r.status}`);
        return r.text();
      }),
    ]);
    return new StepModel(ort, session, parseVocab(vocabText), entry);
  }

  constructor(ort, session, tokens, meta) {
    for (const key of ["sos_id", "unk_id", "num_layers", "hidden_size"]) {
      if (!Number.isInteger(meta[key])) throw new Error(`manifest entry without ${key}`);
    }
    if (meta.vocab_size !== undefined && meta.vocab_size !== tokens.length) {
      throw new Error(`the vocabulary has ${tokens.length} tokens, the model ${meta.vocab_size}`);
    }
    this.ort = ort;
    this.session = session;
    this.tokens = tokens;
    this.meta = meta;
    this.index = new Map(tokens.map((t, i) => [t, i]));  // token -> id
    this.stateSize = meta.num_layers * meta.hidden_size;
    this.queue = Promise.resolve();  // one run of the session at a time
  }

  /** Id of a (case-mapped) word: unknown words get unk_id. */
  tokenId(word) {
    const id = this.index.get(word);
    return id === undefined ? this.meta.unk_id : id;
  }

  start() {
    const zeros = new Float32Array(this.stateSize);
    return { h: zeros, c: zeros, token: this.meta.sos_id, out: null };
  }

  /** The state after the pending token and `word` pending (the run is done by logprobs()). */
  async step(state, word) {
    const out = await this.run(state);
    return { h: out.h, c: out.c, token: this.tokenId(word), out: null };
  }

  /** ln p of every model token after the state's words (Float32Array over the model's ids). */
  async logprobs(state) {
    return (await this.run(state)).logprobs;
  }

  async run(state) {
    if (!state.out) {
      const { num_layers: layers, hidden_size: d } = this.meta;
      const ort = this.ort;
      const feeds = {
        x: new ort.Tensor("int64", BigInt64Array.of(BigInt(state.token)), [1, 1]),
        h0: new ort.Tensor("float32", state.h, [layers, 1, d]),
        c0: new ort.Tensor("float32", state.c, [layers, 1, d]),
      };
      const run = this.queue.then(() => this.session.run(feeds));
      this.queue = run.catch(() => {});
      const result = await run;
      state.out = {
        logprobs: result.log_softmax.data,
        h: result.next_h0.data,
        c: result.next_c0.data,
      };
    }
    return state.out;
  }
}

/** Predictor + Session + predict_stream for one model: suggest(text, k). */
export class Keyboard {
  constructor(model) {
    this.model = model;
    this.words = predictionVocabulary(model.tokens);
    this.case = vocabularyCase(this.words);
    this.normalise = caseFunction(this.case);
    this.prefixIndex = new PrefixIndex(this.words);
    // sorted position -> model id of the word
    this.sortedIds = Int32Array.from(this.prefixIndex.sortedWords, (w) => model.tokenId(w));
    this.history = [];  // committed words (case-mapped)
    this.states = [model.start()];  // states[i]: after history[0..i)
    this.queue = Promise.resolve();
  }

  /** The k best next words / completions for the text typed so far: [{word, logprob}]. */
  suggest(text, k = 5) {
    const job = this.queue.then(() => this.suggestNow(text, k));
    this.queue = job.catch(() => {});
    return job;
  }

  async suggestNow(text, k) {
    const { history, prefix } = splitTyped(text);
    const words = history.map(this.normalise);
    let same = 0;
    const kept = Math.min(words.length, this.history.length);
    while (same < kept && words[same] === this.history[same]) same++;
    this.history.length = same;
    this.states.length = same + 1;
    for (let i = same; i < words.length; i++) {
      this.states.push(await this.model.step(this.states[i], words[i]));
      this.history.push(words[i]);
    }
    const [lo, hi] = this.prefixIndex.span(this.normalise(prefix));
    if (hi <= lo) return { history: words, prefix, suggestions: [] };
    const logprobs = await this.model.logprobs(this.states[words.length]);
    const best = topK(logprobs, this.sortedIds, lo, hi, k);
    return {
      history: words,
      prefix,
      suggestions: best.map(([pos, v]) => ({
        word: this.prefixIndex.sortedWords[pos],
        logprob: v,
      })),
    };
  }
}
