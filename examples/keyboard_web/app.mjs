// The page: a context selector, a text box and the suggestion list (keyboard.mjs computes them).
//
// URL parameters: manifest (default models/models.json: see manifest.py), k (suggestions shown,
// default the manifest's k or 5, as rescorer predict's -k), context (the label selected first).
// For tests and measurements the page exposes window.keyboardDemo: `ready` (a promise),
// `renders` (suggestion lists drawn so far), `waitForRender(n)` (a promise of the list drawn n-th
// or later, read back from the page) and `latencies` ({ms, text, prefix} for every list drawn
// after an input event: ms from the start of the input event's handler to the list in the DOM,
// performance.now()).
import * as ort from "./node_modules/onnxruntime-web/dist/ort.wasm.min.mjs";
import { Keyboard, StepModel } from "./keyboard.mjs";

// One wasm thread: no cross-origin isolation needed, and the same numbers on every run.
ort.env.wasm.numThreads = 1;

const params = new URLSearchParams(location.search);
const manifestUrl = new URL(params.get("manifest") || "models/models.json", location.href);
const $ = (id) => document.getElementById(id);
const textBox = $("text");
const list = $("suggestions");
const select = $("context");
const status = $("status");

const demo = {
  renders: 0,
  latencies: [],
  waiters: [],
  waitForRender(n) {
    return new Promise((resolve) => {
      if (this.renders >= n) resolve(readList());
      else this.waiters.push([n, resolve]);
    });
  },
};
window.keyboardDemo = demo;

/** The suggestion list as drawn: what a test compares. */
function readList() {
  return {
    renders: demo.renders,
    text: list.dataset.text,
    context: list.dataset.context,
    ms: list.dataset.ms === undefined ? null : Number(list.dataset.ms),
    words: [...list.querySelectorAll("button.word")].map((b) => b.dataset.word),
    logprobs: [...list.querySelectorAll("button.word")].map((b) => Number(b.dataset.logprob)),
  };
}

let keyboards = new Map();  // context label -> Keyboard
let k = 5;
let sequence = 0;  // input events seen; a list is drawn only for the latest one

function draw(result, label, text, ms) {
  const items = result.suggestions.map(({ word, logprob }) => {
    const li = document.createElement("li");
    const b = document.createElement("button");
    b.type = "button";
    b.className = "word";
    b.dataset.word = word;
    b.dataset.logprob = String(logprob);
    b.textContent = word;
    const p = document.createElement("span");
    p.className = "p";
    p.textContent = `p=${Math.exp(logprob).toFixed(4)}`;
    b.append(p);
    li.append(b);
    return li;
  });
  list.replaceChildren(...items);
  list.dataset.text = text;
  list.dataset.context = label;
  if (ms === null) delete list.dataset.ms;
  else list.dataset.ms = String(ms);
  demo.renders += 1;
  list.dataset.renders = String(demo.renders);
  const still = [];
  for (const [n, resolve] of demo.waiters) {
    if (demo.renders >= n) resolve(readList());
    else still.push([n, resolve]);
  }
  demo.waiters = still;
}

async function update(t0) {
  const mine = ++sequence;
  const label = select.value;
  const text = textBox.value;
  const result = await keyboards.get(label).suggest(text, k);
  if (mine !== sequence) return;  // a newer input is on its way
  const ms = t0 === null ? null : performance.now() - t0;
  draw(result, label, text, ms);
  if (ms !== null) {
    demo.latencies.push({ ms, text, prefix: result.prefix });
    status.textContent = `${label}: ${keyboards.get(label).words.length} words; ` +
      `${result.prefix ? "completing" : "next word"}: ${ms.toFixed(2)} ms`;
  }
}

function accept(word) {
  // the suggestion replaces the partial word, followed by a space
  const text = textBox.value;
  const partial = /\S*$/u.exec(text)[0];
  textBox.value = `${text.slice(0, text.length - partial.length)}${word} `;
  textBox.focus();
  update(performance.now());
}

async function main() {
  const response = await fetch(manifestUrl);
  if (!response.ok) throw new Error(`${manifestUrl}: HTTP ${response.status}`);
  const manifest = await response.json();
  k = Number(params.get("k") || manifest.k || 5);
  if (!Number.isInteger(k) || k < 1) throw new Error(`k must be a whole number >= 1, got ${k}`);
  const models = await Promise.all(
    manifest.contexts.map((entry) => StepModel.load(ort, entry, manifestUrl)),
  );
  keyboards = new Map(manifest.contexts.map((entry, i) => [entry.label, new Keyboard(models[i])]));
  for (const entry of manifest.contexts) {
    const option = document.createElement("option");
    option.value = entry.label;
    option.textContent = entry.label;
    select.append(option);
  }
  if (params.get("context")) select.value = params.get("context");
  textBox.addEventListener("input", () => update(performance.now()));
  select.addEventListener("change", () => update(null));
  $("clear").addEventListener("click", () => {
    textBox.value = "";
    textBox.focus();
    update(null);
  });
  list.addEventListener("click", (event) => {
    const b = event.target.closest("button.word");
    if (b) accept(b.dataset.word);
  });
  select.disabled = false;
  textBox.disabled = false;
  textBox.placeholder = "type here";
  status.textContent = `${manifest.contexts.length} context(s), k=${k}`;
  await update(null);
  textBox.focus();
}

demo.ready = main().catch((error) => {
  $("error").textContent = `error: ${error.message || error}`;
  throw error;
});
