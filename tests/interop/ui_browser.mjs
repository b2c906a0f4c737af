// The operator's page in a real browser: headless Chromium (the Debian
// package) driven by playwright-core loads /ui, reads what the DOM shows
// (upstream states and reasons, clients, subscriptions), saves a
// screenshot, then makes one tools/call with the TypeScript MCP SDK and
// waits for the live figures (server-sent events) to show it. Prints one
// JSON object.
//
// Usage: node ui_browser.mjs BASE_URL SCREENSHOT_PATH TOOL
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [base, screenshot, tool] = process.argv.slice(2);
const profile = mkdtempSync(join(tmpdir(), "mcpmux-ui-"));
const out = {};
const context = await chromium.launchPersistentContext(profile, {
  executablePath: "/usr/bin/chromium",
  headless: true,
  viewport: { width: 1100, height: 1400 },
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
  timeout: 60000,
});
try {
  const page = context.pages()[0] ?? (await context.newPage());
  const problems = [];
  page.on("pageerror", (e) => problems.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") problems.push(m.text()); });
  const response = await page.goto(`${base}/ui`, { waitUntil: "load", timeout: 30000 });
  out.status = response.status();
  // The first figures event has arrived once the status line says so.
  await page.waitForFunction(() => document.querySelector("#live-status").textContent.includes("updated"), null, { timeout: 30000 });
  out.upstreams = await page.$$eval("article.upstream", (cards) => cards.map((c) => ({
    name: c.dataset.upstream,
    state: c.querySelector("[data-field=state]").textContent,
    reason: c.querySelector("[data-field=reason]").hidden ? null : c.querySelector("[data-field=reason]").textContent,
    tools: Array.from(c.querySelectorAll("details.items li")).map((li) => li.textContent),
    errors: Array.from(c.querySelectorAll("details.errors li")).map((li) => li.textContent),
  })));
  out.clients = await page.$$eval("tr.client", (rows) => rows.map((r) => Array.from(r.cells).map((c) => c.textContent)));
  out.subscriptions = await page.$$eval("tr.subscription", (rows) => rows.map((r) => Array.from(r.cells).map((c) => c.textContent)));
  out.callsBefore = await page.textContent("#total-calls");
  // Keyboard: the filter is reachable and narrows the lists.
  await page.focus("#item-filter");
  await page.keyboard.type(tool);
  out.filtered = await page.$$eval("details.items li:not([hidden])", (lis) => lis.map((li) => li.textContent));
  await page.fill("#item-filter", "");

  const client = new Client({ name: "ui-browser-test", version: "1.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
  const result = await client.callTool({ name: tool, arguments: { message: "seen live" } });
  out.callResult = result.content?.[0]?.text ?? null;
  await page.waitForFunction(
    (tool) => {
      const row = Array.from(document.querySelectorAll("#item-rows tr")).find((tr) => tr.dataset.item === tool);
      return row && Number(row.querySelector("[data-field=calls]").textContent) >= 1
        && Number(document.querySelector("#total-calls").textContent) >= 1;
    },
    tool,
    { timeout: 30000 },
  );
  out.callsAfter = await page.textContent("#total-calls");
  out.chartPoints = await page.$eval("svg.spark.wide polyline", (p) => p.getAttribute("points"));
  await page.screenshot({ path: screenshot, fullPage: true });
  await client.close();
  out.problems = problems;
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
console.log(JSON.stringify(out));
