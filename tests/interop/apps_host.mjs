// A minimal MCP Apps host (the io.modelcontextprotocol/ui extension) in a real
// browser: headless Chromium (the Debian package) driven by playwright-core.
//
// From Node it connects to GATEWAY_MCP_URL (Streamable HTTP) with the
// TypeScript SDK client, declaring the ui extension in its capabilities
// (capabilities.extensions["io.modelcontextprotocol/ui"].mimeTypes), lists
// tools, takes TOOL_NAME's _meta.ui.resourceUri (or the flat
// _meta["ui/resourceUri"]) and reads exactly that URI with resources/read.
// A local HTTP server on 127.0.0.1 (port 0) serves the host page and the app's
// HTML (with the Content-Security-Policy that the resource's _meta.ui.csp
// gives, or the spec's restrictive default); the page shows the app in an
// <iframe sandbox="allow-scripts"> (an opaque origin). The ext-apps SDK's
// AppBridge runs in Node; the page only relays the JSON-RPC frames that the
// app posts with postMessage (from the iframe's window only) to Node and back.
// The bridge answers ui/initialize and proxies the app's tools/call to the
// gateway with the name the app used, unchanged. Then it clicks the app's own
// button (--click SELECTOR, default #get-time-btn: the get-time example's
// "Get Server Time"), waits until the call's result is back and shown in the
// app, and saves a screenshot. Requests to hosts other than loopback are
// blocked. Gives up after 60 s.
//
// Prints one JSON object: {tool, resourceUri, mime_type, csp, html_bytes,
// app_info, app_calls: [{name, arguments, result_text | error}],
// shown_text_before, shown_text, screenshot, console_errors (the page's and
// the app's console errors and uncaught exceptions)}; on failure
// {error, stage, ...} and exits 1.
//
// Usage: node apps_host.mjs GATEWAY_MCP_URL TOOL_NAME SCREENSHOT.png
//          [--bearer TOKEN] [--click SELECTOR]
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema, ReadResourceResultSchema } from "@modelcontextprotocol/sdk/types.js";
import { AppBridge, RESOURCE_MIME_TYPE, RESOURCE_URI_META_KEY, buildAllowAttribute } from "@modelcontextprotocol/ext-apps/app-bridge";

const UI_EXTENSION = "io.modelcontextprotocol/ui";
const TIMEOUT_MS = 60000;
const LOOPBACK = new Set(["127.0.0.1", "localhost", "[::1]"]);

const positional = [];
const options = { bearer: null, click: "#get-time-btn" };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i += 1) {
  if (argv[i] === "--bearer") options.bearer = argv[++i];
  else if (argv[i] === "--click") options.click = argv[++i];
  else positional.push(argv[i]);
}
const [gatewayUrl, toolName, screenshot] = positional;
if (!gatewayUrl || !toolName || !screenshot || options.bearer === undefined || options.click === undefined) {
  console.error("usage: node apps_host.mjs GATEWAY_MCP_URL TOOL_NAME SCREENSHOT.png [--bearer TOKEN] [--click SELECTOR]");
  process.exit(2);
}

const out = {
  tool: toolName,
  resourceUri: null,
  mime_type: null,
  csp: null,
  html_bytes: null,
  app_info: null,
  app_calls: [],
  shown_text_before: null,
  shown_text: null,
  screenshot: null,
};
const consoleErrors = [];
let stage = "connect";
let client;
let bridge;
let httpServer;
let context;
let page;
let appFrame;
const profile = mkdtempSync(join(tmpdir(), "mcpmux-apps-host-"));

// Content-Security-Policy for the app document: the spec's restrictive
// default, widened only by the domains the resource declares in _meta.ui.csp.
function contentSecurityPolicy(csp) {
  const list = (values) => (Array.isArray(values) ? values.filter((v) => typeof v === "string" && !/[;,\s]/.test(v)) : []);
  const resources = list(csp?.resourceDomains).join(" ");
  const connect = list(csp?.connectDomains).join(" ");
  const frames = list(csp?.frameDomains).join(" ");
  const bases = list(csp?.baseUriDomains).join(" ");
  return [
    "default-src 'none'",
    `script-src 'self' 'unsafe-inline' ${resources}`,
    `style-src 'self' 'unsafe-inline' ${resources}`,
    `img-src 'self' data: ${resources}`,
    `font-src 'self' ${resources}`,
    `media-src 'self' data: ${resources}`,
    `connect-src ${connect || "'none'"}`,
    `frame-src ${frames || "'none'"}`,
    "object-src 'none'",
    `base-uri ${bases || "'self'"}`,
  ].map((d) => d.trim()).join("; ");
}

const escapeAttr = (s) => String(s).replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;");

// The host page: one sandboxed iframe, and a relay that passes the app's
// postMessage frames to Node (window.__fromApp, a Playwright binding) and
// Node's frames to the app (window.__toApp).
function hostPage(allow, prefersBorder) {
  return `<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>mcpmux apps host</title>
<style>
  body { font-family: sans-serif; margin: 16px; background: #f3f4f6; }
  h1 { font-size: 15px; margin: 0 0 8px; }
  iframe { display: block; width: 760px; height: 320px; background: #fff;
           border: ${prefersBorder === false ? "0" : "1px solid #9ca3af"}; border-radius: 6px; }
</style></head>
<body>
<h1>MCP App: ${escapeAttr(toolName)} &mdash; ${escapeAttr(out.resourceUri)}</h1>
<iframe id="app" title="MCP App" sandbox="allow-scripts" allow="${escapeAttr(allow)}" src="/app"></iframe>
<script>
  const frame = document.getElementById("app");
  window.addEventListener("message", (event) => {
    if (event.source === frame.contentWindow) window.__fromApp(event.data);
  });
  window.__toApp = (message) => frame.contentWindow.postMessage(message, "*");
</script>
</body>
</html>`;
}

// AppBridge transport whose other end is the app's PostMessageTransport,
// reached through the page's relay.
class PageRelayTransport {
  constructor() {
    this.page = null;
  }

  async start() {}

  async send(message) {
    if (!this.page) throw new Error("no page to send to");
    await this.page.evaluate((m) => window.__toApp(m), message);
  }

  async close() {
    this.onclose?.();
  }

  deliver(message) {
    if (message && typeof message === "object" && message.jsonrpc === "2.0") this.onmessage?.(message);
  }
}

function textOf(result) {
  const texts = (result?.content ?? []).filter((c) => c?.type === "text").map((c) => c.text);
  return texts.length ? texts.join("\n") : null;
}

function errorText(err) {
  return String(err?.message ?? err).split("\n")[0];
}

async function shownText() {
  if (!appFrame) return null;
  try {
    return await appFrame.evaluate(() => document.body?.innerText ?? "");
  } catch {
    return null;
  }
}

async function cleanup() {
  if (bridge) await bridge.close().catch(() => {});
  if (client) await client.close().catch(() => {});
  if (context) await context.close().catch(() => {});
  if (httpServer) {
    httpServer.closeAllConnections?.();
    await new Promise((resolve) => httpServer.close(() => resolve()));
  }
  rmSync(profile, { recursive: true, force: true });
}

let finished = false;
async function finish(code, extra = {}) {
  if (finished) return;
  finished = true;
  clearTimeout(deadline);
  const result = code === 0 ? { ...out, console_errors: consoleErrors } : { ...extra, stage, ...out, console_errors: consoleErrors };
  if (code !== 0 && page) {
    result.shown_text ??= await shownText();
    await page.screenshot({ path: screenshot, fullPage: true }).then(() => { result.screenshot = screenshot; }, () => {});
  }
  await cleanup().catch(() => {});
  process.stdout.write(`${JSON.stringify(result)}\n`);
  process.exit(code);
}

const deadline = setTimeout(() => {
  finish(1, { error: `timed out after ${TIMEOUT_MS / 1000} s (stage: ${stage})` });
}, TIMEOUT_MS);

try {
  // 1. The gateway, as an MCP client that supports MCP Apps.
  client = new Client(
    { name: "mcpmux-apps-host", version: "1.0.0" },
    { capabilities: { extensions: { [UI_EXTENSION]: { mimeTypes: [RESOURCE_MIME_TYPE] } } } },
  );
  const headers = options.bearer ? { Authorization: `Bearer ${options.bearer}` } : undefined;
  await client.connect(new StreamableHTTPClientTransport(new URL(gatewayUrl), { requestInit: { headers } }));

  stage = "tools/list";
  let tool;
  let cursor;
  do {
    const page_ = await client.listTools(cursor ? { cursor } : {});
    tool = page_.tools.find((t) => t.name === toolName);
    cursor = page_.nextCursor;
  } while (!tool && cursor);
  if (!tool) throw new Error(`tool ${toolName} is not in tools/list`);
  const meta = tool._meta ?? {};
  out.resourceUri = meta.ui?.resourceUri ?? meta[RESOURCE_URI_META_KEY] ?? null;
  if (typeof out.resourceUri !== "string" || !out.resourceUri.startsWith("ui://")) {
    throw new Error(`tool ${toolName} has no ui:// resource in _meta.ui.resourceUri or _meta["${RESOURCE_URI_META_KEY}"]: ${JSON.stringify(meta)}`);
  }

  stage = "resources/read";
  const read = await client.request({ method: "resources/read", params: { uri: out.resourceUri } }, ReadResourceResultSchema);
  const content = read.contents.find((c) => c.uri === out.resourceUri) ?? read.contents[0];
  if (!content) throw new Error(`resources/read ${out.resourceUri} returned no contents`);
  out.mime_type = content.mimeType ?? null;
  if (out.mime_type !== RESOURCE_MIME_TYPE) throw new Error(`resource ${out.resourceUri} has MIME type ${out.mime_type}, not ${RESOURCE_MIME_TYPE}`);
  const html = typeof content.text === "string" ? content.text
    : typeof content.blob === "string" ? Buffer.from(content.blob, "base64").toString("utf8") : null;
  if (!html) throw new Error(`resource ${out.resourceUri} has neither text nor blob`);
  out.html_bytes = Buffer.byteLength(html, "utf8");
  const uiMeta = content._meta?.ui ?? {};
  out.csp = contentSecurityPolicy(uiMeta.csp);

  // 2. The page and the app document, from 127.0.0.1 on a free port.
  stage = "serve";
  const page_html = hostPage(buildAllowAttribute(uiMeta.permissions), uiMeta.prefersBorder);
  httpServer = createServer((req, res) => {
    if (req.url === "/") {
      res.writeHead(200, { "content-type": "text/html; charset=utf-8", "cache-control": "no-store" });
      res.end(page_html);
    } else if (req.url === "/app") {
      res.writeHead(200, {
        "content-type": "text/html; charset=utf-8",
        "cache-control": "no-store",
        "content-security-policy": out.csp,
      });
      res.end(html);
    } else {
      res.writeHead(404).end();
    }
  });
  await new Promise((resolve, reject) => {
    httpServer.once("error", reject);
    httpServer.listen(0, "127.0.0.1", resolve);
  });
  const base = `http://127.0.0.1:${httpServer.address().port}`;

  // 3. The bridge: ui/initialize, and the app's tools/call to the gateway.
  stage = "bridge";
  const transport = new PageRelayTransport();
  bridge = new AppBridge(
    null,
    { name: "mcpmux-apps-host", version: "1.0.0" },
    { serverTools: {}, logging: {}, openLinks: {} },
    {
      hostContext: {
        theme: "light",
        displayMode: "inline",
        availableDisplayModes: ["inline"],
        platform: "web",
        locale: "en-US",
        containerDimensions: { width: 760, maxHeight: 1000 },
      },
    },
  );
  bridge.oncalltool = async (params, extra) => {
    const call = { name: params.name, arguments: params.arguments ?? {} };
    out.app_calls.push(call);
    try {
      const result = await client.request(
        { method: "tools/call", params },
        CallToolResultSchema,
        { signal: extra?.mcpReq?.signal, timeout: 30000 },
      );
      call.result_text = textOf(result);
      if (result.isError) call.is_error = true;
      return result;
    } catch (err) {
      call.error = errorText(err);
      throw err;
    } finally {
      call.done = true;
    }
  };
  bridge.onmessage = async () => ({ isError: true });
  bridge.onopenlink = async () => ({ isError: true });
  bridge.onloggingmessage = () => {};
  bridge.onsizechange = ({ height }) => {
    if (page && typeof height === "number" && height > 0) {
      page.evaluate((h) => { document.getElementById("app").style.height = `${Math.min(h, 1000)}px`; }, height).catch(() => {});
    }
  };
  const initialized = new Promise((resolve) => { bridge.oninitialized = () => resolve(); });
  await bridge.connect(transport);

  // 4. The browser.
  stage = "browser";
  context = await chromium.launchPersistentContext(profile, {
    executablePath: "/usr/bin/chromium",
    headless: true,
    viewport: { width: 820, height: 480 },
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
    timeout: TIMEOUT_MS,
  });
  await context.route("**/*", (route) => {
    const url = URL.parse(route.request().url());
    return url && LOOPBACK.has(url.hostname) ? route.continue() : route.abort("blockedbyclient");
  });
  page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(TIMEOUT_MS);
  page.on("pageerror", (e) => consoleErrors.push(errorText(e)));
  page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text().slice(0, 300)); });
  transport.page = page;
  await page.exposeFunction("__fromApp", (message) => transport.deliver(message));
  await page.goto(`${base}/`, { waitUntil: "load" });
  appFrame = await (await page.$("#app")).contentFrame();

  stage = "ui/initialize";
  await initialized;
  out.app_info = bridge.getAppVersion() ?? null;
  await appFrame.waitForSelector(options.click, { state: "visible" });
  out.shown_text_before = await shownText();

  // 5. The app's own tool call, and its result shown in the app.
  stage = "app tools/call";
  await appFrame.click(options.click);
  const start = Date.now();
  while (!out.app_calls.some((c) => c.done)) {
    if (Date.now() - start > 30000) throw new Error(`the app made no tools/call within 30 s of clicking ${options.click}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const call = out.app_calls.find((c) => c.done);
  if (call.error) throw new Error(`the app's tools/call ${call.name} failed: ${call.error}`);
  if (call.is_error) throw new Error(`the app's tools/call ${call.name} returned isError: ${call.result_text}`);
  stage = "shown";
  if (call.result_text) {
    await appFrame.waitForFunction((text) => (document.body?.innerText ?? "").includes(text), call.result_text, { timeout: 15000 });
  }
  out.shown_text = await shownText();
  for (const c of out.app_calls) delete c.done;

  stage = "screenshot";
  // The answer is in the app's DOM; the screenshot waits until it has also
  // been painted: two animation frames in the app's frame (the second
  // starts after the first was drawn), then two in the page around it.
  const painted = () => new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve)));
  await appFrame.evaluate(painted);
  await page.evaluate(painted);
  await page.screenshot({ path: screenshot, fullPage: true });
  out.screenshot = screenshot;
  await bridge.teardownResource({}, { timeout: 3000 }).catch(() => {});
  await finish(0);
} catch (err) {
  for (const c of out.app_calls) delete c.done;
  await finish(1, { error: errorText(err) });
}
