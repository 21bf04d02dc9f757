// Type sentences into the keyboard page letter by letter in headless Chromium (playwright-core
// driving Debian's /usr/bin/chromium) and record the suggestion list drawn at every position.
//
//   node examples/keyboard_web/drive.mjs JOB.json
//
// JOB.json: {"url": page URL (with ?manifest=...&k=...), "out": JSONL to write,
//   "runs": [{"context": label, "sentences": ["text", ...]}, ...],
//   "screenshot": {"path": PNG, "context": label, "text": "text to type"} (optional),
//   "chromium": executable (default $CHROMIUM or /usr/bin/chromium), "timeout_ms": per list}
//
// For each sentence: "New sentence" (the empty box: the list at a sentence start), then one key
// press per character, each followed by the list drawn for it. A JSONL line per position:
// {"context", "sentence", "position", "text", "words", "logprobs", "ms"} (ms: the page's time
// from the input event to the list in the DOM; null for the sentence start, which is drawn
// after a click and no input event).
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";

const FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

const job = JSON.parse(await fs.readFile(process.argv[2], "utf8"));
const timeoutMs = job.timeout_ms ?? 30000;
const userDataDir = await fs.mkdtemp(path.join(os.tmpdir(), "keyboard-web-chromium-"));
const problems = [];
let context;
try {
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: job.chromium || process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: FLAGS,
    viewport: { width: 900, height: 500 },
  });
  const page = context.pages()[0] ?? (await context.newPage());
  page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
  page.on("console", (message) => {
    if (message.type() === "error") problems.push(`console error: ${message.text()}`);
  });
  await page.goto(job.url);
  await page.waitForFunction(() => window.keyboardDemo && window.keyboardDemo.ready, null, {
    timeout: timeoutMs,
  });
  await page.evaluate(() => window.keyboardDemo.ready.then(() => true));
  let renders = await page.evaluate(() => window.keyboardDemo.renders);

  // the list drawn after the next action (each action draws exactly one)
  const next = async (expectedText) => {
    renders += 1;
    const n = renders;
    let timer;
    const drawn = await Promise.race([
      page.evaluate((m) => window.keyboardDemo.waitForRender(m), n),
      new Promise((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`no suggestion list ${n} after ${timeoutMs} ms`)),
          timeoutMs,
        );
      }),
    ]).finally(() => clearTimeout(timer));
    if (drawn.text !== expectedText) {
      throw new Error(`the page drew the list of ${JSON.stringify(drawn.text)}, ` +
        `expected ${JSON.stringify(expectedText)}`);
    }
    return drawn;
  };
  const choose = async (label) => {
    if ((await page.$eval("#context", (s) => s.value)) !== label) {
      await page.selectOption("#context", label);
      await next(await page.$eval("#text", (t) => t.value));
    }
  };
  const type = async (text, onList) => {
    await page.click("#clear");
    if (onList) onList(await next(""), 0);
    else await next("");
    for (let i = 0; i < text.length; i++) {
      await page.keyboard.type(text[i]);
      const drawn = await next(text.slice(0, i + 1));
      if (onList) onList(drawn, i + 1);
    }
  };

  const lines = [];
  for (const run of job.runs ?? []) {
    await choose(run.context);
    for (const [s, sentence] of run.sentences.entries()) {
      await type(sentence, (drawn, position) => {
        if (drawn.context !== run.context) throw new Error(`drawn for ${drawn.context}`);
        lines.push(JSON.stringify({
          context: run.context,
          sentence: s,
          position,
          text: drawn.text,
          words: drawn.words,
          logprobs: drawn.logprobs,
          ms: position === 0 ? null : drawn.ms,
        }));
      });
    }
  }
  if (job.out) await fs.writeFile(job.out, lines.map((l) => `${l}\n`).join(""));
  if (job.screenshot) {
    await choose(job.screenshot.context);
    await type(job.screenshot.text);
    // the page's content, at most the 900 x 500 viewport
    const bottom = await page.evaluate(() => document.body.getBoundingClientRect().bottom);
    const height = Math.min(500, Math.ceil(bottom) + 24);
    await page.screenshot({ path: job.screenshot.path, clip: { x: 0, y: 0, width: 900, height } });
  }
  if (problems.length) throw new Error(problems.join("\n"));
  console.log(`typed ${lines.length} positions` +
    (job.screenshot ? `; screenshot ${job.screenshot.path}` : ""));
} catch (error) {
  console.error(`drive.mjs: ${error.stack || error}`);
  for (const p of problems) console.error(p);
  process.exitCode = 1;
} finally {
  if (context) await context.close();
  await fs.rm(userDataDir, { recursive: true, force: true });
}
