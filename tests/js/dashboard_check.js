// Drives GET /dashboard in headless Chromium (Debian's, through puppeteer-core) against a
// running gateway and prints what it saw as JSON; tests/py/test_dashboard.py asserts on it.
// Usage: node dashboard_check.js <gateway url> <workers expected> [screenshot.png] [--load]
//   --load: send requests, then check the decisions list and hit rate, and that an
//   explanation names the worker the next identical request goes to.
"use strict";
const path = require("path");
const puppeteer = require(path.join(__dirname, "../fixtures/node_modules/puppeteer-core"));

const [url, expected, screenshot] = process.argv.slice(2).filter((a) => !a.startsWith("--"));
const load = process.argv.includes("--load");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function post(pathname, body) {
  const r = await fetch(url + pathname, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  });
  return { status: r.status, body: await r.json() };
}

async function waitFor(page, what, fn, arg, timeoutMs = 15000) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await page.evaluate(fn, arg);
    if (v) return v;
    if (Date.now() > end) throw new Error("timed out waiting for " + what);
    await sleep(100);
  }
}

(async () => {
  const out = { console_errors: [], page_errors: [] };
  const browser = await puppeteer.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  try {
    const page = await browser.newPage();
    await page.setViewport({ width: 1400, height: 1000 });
    page.on("console", (m) => { if (m.type() === "error") out.console_errors.push(m.text()); });
    page.on("pageerror", (e) => out.page_errors.push(String(e)));
    // No request may leave the gateway's origin (the page is self-contained).
    out.foreign_requests = [];
    await page.setRequestInterception(true);
    page.on("request", (r) => {
      if (!r.url().startsWith(url)) { out.foreign_requests.push(r.url()); r.abort(); } else r.continue();
    });
    const began = Date.now();
    await page.goto(url + "/dashboard", { waitUntil: "load" });
    await waitFor(page, "worker rows", (n) =>
        document.querySelectorAll("#workers tbody tr[data-worker-id]").length === n, Number(expected));
    out.rows_ms = Date.now() - began;
    out.worker_ids = await page.$$eval("#workers tbody tr", (rows) => rows.map((r) => r.dataset.workerId));
    // The filter narrows the table.
    const first = out.worker_ids[0];
    await page.type("#worker-filter", first);
    out.filtered_rows = await page.$$eval("#workers tbody tr", (rows) => rows.length);
    await page.$eval("#worker-filter", (e) => { e.value = ""; e.dispatchEvent(new Event("input")); });

    if (load) {
      // Long prompts of shared prefixes, so that the later ones hit the cache.
      const text = (i) => "The dashboard test sends the same long prefix each time so that the " +
          "cache is hit; ".repeat(8) + " request " + i;
      for (let i = 0; i < 6; ++i) {
        const r = await post("/v1/completions", { prompt: text(i % 2), max_tokens: 2 });
        if (r.status !== 200) throw new Error("completion: HTTP " + r.status);
        await sleep(300);
      }
      out.decision_ids = await waitFor(page, "6 decisions", () => {
        const ids = [...document.querySelectorAll("#decisions tbody tr")].map((r) => r.dataset.requestId);
        return ids.length >= 6 ? ids : null;
      });
      out.hit_rate_text = await waitFor(page, "a hit rate", () => {
        const t = document.getElementById("hit-value").textContent;
        return t !== "-" && parseFloat(t) > 0 ? t : null;
      });
      out.worker_hit_rates = await page.$$eval("#workers tbody tr", (rows) =>
          rows.map((r) => r.children[9].textContent));
      // Explain through the page's form, then send the same body for real.
      const body = { prompt: text(1) + " and one more", max_tokens: 2 };
      await page.$eval("#explain-body", (e, b) => { e.value = b; }, JSON.stringify(body));
      await page.click("#explain-button");
      out.explained = await waitFor(page, "an explanation", () => {
        const t = document.getElementById("explain-choice").textContent;
        const m = /goes to (\S+)/.exec(t);
        return m ? m[1] : null;
      });
      out.explain_rows = await page.$$eval("#explain tbody tr", (rows) => rows.length);
      const sent = await post("/v1/completions",
                              { ...body, nvext: { extra_fields: ["worker_id"] } });
      out.sent_to = sent.body.nvext && sent.body.nvext.worker_id;
    }
    if (screenshot) await page.screenshot({ path: screenshot, fullPage: true });
    await sleep(2500);  // one more poll: errors after the first render show too
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(out));
})().catch((e) => {
  console.error(e.stack || String(e));
  process.exit(1);
});
