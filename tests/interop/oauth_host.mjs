// A real MCP host on the TypeScript SDK (Client + StreamableHTTPClientTransport
// with an OAuthClientProvider) that logs its user in through the gateway's
// OAuth authorization server in a real browser (browser_login.mjs: one
// persistent headless Chromium context for the whole process, so a later
// login reuses the OpenID provider's session cookie).
//
// Its redirect URI is http://127.0.0.1:PORT/callback (a server it starts on
// port 0; it answers a small HTML page). Without --cimd the SDK registers the
// host by RFC 7591 dynamic registration (client_name "mcpmux test host",
// token_endpoint_auth_method "none", grant_types authorization_code and
// refresh_token). With --cimd the host also serves its Client ID Metadata
// Document over HTTPS (--tls-cert/--tls-key) at
// https://127.0.0.1:PORT2/host/client.json (port 0) and offers that URL as
// its client_id; the SDK uses it when the authorization server's metadata
// says client_id_metadata_document_supported: true, and registers by RFC 7591
// otherwise.
//
// Driven by JSON commands, one a line on stdin; answers each with exactly one
// JSON line on stdout (all logging goes to stderr):
//   {"op":"info"} -> {ok, callback_url, client_metadata_url (null without --cimd)}
//   {"op":"connect"[, "consent":"allow"|"deny"]} -> connects (again); when the
//     SDK sends the browser to the authorization server, logs in as LOGIN,
//     consents (the gateway's consent page, if shown: Allow by default), takes
//     the code from the redirect, transport.finishAuth(code) and connects
//     again -> {ok, client_id, registered: "dcr"|"cimd", login_pages: [pages
//     seen by the logins of this command, e.g. "login", "consent",
//     "gateway-consent"], authorizations: N (browser logins so far)}
//   {"op":"tools"} -> {ok, tools: [names]}
//   {"op":"call", "name":..., "arguments":{...}} -> {ok: true, result:
//     CallToolResult} or, for an MCP error, {ok: false, error: {code, message,
//     data?}}
//   {"op":"expire_access"} -> replaces the stored access token with garbage
//     (the refresh token stays), so the next request gets 401 and the SDK
//     refreshes -> {ok}
//   {"op":"state"} -> {ok, refreshes: R (tokens saved other than by finishing
//     a login), authorizations: N, has_refresh_token, access_token_prefix
//     (first 8 characters), client_id, registered, last_login_pages,
//     cimd_fetches (GETs of the metadata document)}
//   anything that fails -> {ok: false, error: {message}}; the host keeps running.
// tools and call recover like a real host: when a 401 makes the SDK start a
// new login (e.g. its refresh token was refused), the browser login runs,
// finishAuth, and the request is retried once; a 404 (session gone) makes it
// connect again and retry. Exits when stdin closes.
//
// Usage: node oauth_host.mjs --url GATEWAY_MCP_URL --login LOGIN
//          [--cimd --tls-cert CERT.pem --tls-key KEY.pem] [--timeout SECONDS]
import { createHash, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";
import { StreamableHTTPClientTransport, StreamableHTTPError } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { McpError } from "@modelcontextprotocol/sdk/types.js";
import { browserLogin, launchBrowser } from "./browser_login.mjs";

const log = (...args) => console.error("oauth_host:", ...args);
const USAGE = "usage: node oauth_host.mjs --url GATEWAY_MCP_URL --login LOGIN [--cimd --tls-cert CERT.pem --tls-key KEY.pem] [--timeout SECONDS]";

const { values: opts } = parseArgs({
  options: {
    url: { type: "string" },
    login: { type: "string" },
    cimd: { type: "boolean", default: false },
    "tls-cert": { type: "string" },
    "tls-key": { type: "string" },
    timeout: { type: "string", default: "30" },
  },
});
if (!opts.url || !opts.login || (opts.cimd && (!opts["tls-cert"] || !opts["tls-key"]))) {
  console.error(USAGE);
  process.exit(2);
}
const serverUrl = new URL(opts.url);
const timeoutMs = Number.parseFloat(opts.timeout) * 1000;

// The redirect URI: the browser lands here at the end of a login.
const callbackServer = createServer((req, res) => {
  const url = new URL(req.url, "http://127.0.0.1");
  res.writeHead(url.pathname === "/callback" ? 200 : 404, { "content-type": "text/html; charset=utf-8" });
  res.end(`<!doctype html><html><head><title>mcpmux test host</title></head><body>${url.pathname === "/callback" ? "You can close this window." : "not found"}</body></html>`);
});
await new Promise((resolve) => callbackServer.listen(0, "127.0.0.1", resolve));
const callbackUrl = `http://127.0.0.1:${callbackServer.address().port}/callback`;

const CLIENT_NAME = "mcpmux test host";
const clientMetadata = {
  client_name: CLIENT_NAME,
  redirect_uris: [callbackUrl],
  grant_types: ["authorization_code", "refresh_token"],
  response_types: ["code"],
  token_endpoint_auth_method: "none",
};

// The Client ID Metadata Document, over HTTPS, at a URL that is its own client_id.
let metadataServer = null;
let clientMetadataUrl;
let cimdFetches = 0;
if (opts.cimd) {
  metadataServer = createHttpsServer({
    cert: readFileSync(opts["tls-cert"]),
    key: readFileSync(opts["tls-key"]),
  }, (req, res) => {
    const { pathname } = new URL(req.url, "https://127.0.0.1");
    if (req.method === "GET" && pathname === "/host/client.json") {
      cimdFetches += 1;
      log("client metadata document fetched", req.headers["user-agent"] ?? "");
      res.writeHead(200, { "content-type": "application/json", "cache-control": "no-store" });
      res.end(JSON.stringify({ client_id: clientMetadataUrl, ...clientMetadata }));
      return;
    }
    res.writeHead(404, { "content-type": "application/json" });
    res.end(JSON.stringify({ error: "not_found" }));
  });
  await new Promise((resolve) => metadataServer.listen(0, "127.0.0.1", resolve));
  clientMetadataUrl = `https://127.0.0.1:${metadataServer.address().port}/host/client.json`;
}

let browser = null; // launched on the first login, kept for the process
const counters = { authorizations: 0, refreshes: 0 };
let lastLoginPages = [];
let transport = null;
let client = null;

const s256 = (verifier) => createHash("sha256").update(verifier).digest("base64url");

// Everything the SDK asks a host to keep, in memory.
class HostProvider {
  #clientInformation;
  #tokens;
  #verifiers = []; // recent PKCE verifiers; the one a login used is found by its challenge
  #exchangeVerifier; // the verifier of the login being finished
  #finishing = false;
  loginRequests = 0; // calls of redirectToAuthorization, including those that joined a running login
  lastLogin = null; // Promise of the last login (browser, then finishAuth)
  #running = false;
  loginPages = []; // pages of every login, in order (one array each)

  get redirectUrl() { return callbackUrl; }
  get clientMetadata() { return clientMetadata; }
  get clientMetadataUrl() { return clientMetadataUrl; }
  state() { return randomBytes(16).toString("base64url"); }

  clientInformation() { return this.#clientInformation; }
  saveClientInformation(info) {
    log("client information", JSON.stringify({ client_id: info.client_id, issuer: info.issuer }));
    this.#clientInformation = info;
  }
  get registered() {
    if (!this.#clientInformation) return null;
    return clientMetadataUrl && this.#clientInformation.client_id === clientMetadataUrl ? "cimd" : "dcr";
  }

  tokens() { return this.#tokens; }
  saveTokens(tokens) {
    if (!this.#finishing) counters.refreshes += 1;
    log(this.#finishing ? "tokens from a login" : "tokens refreshed", `scope=${tokens.scope ?? ""}`, `refresh_token=${Boolean(tokens.refresh_token)}`);
    this.#tokens = tokens;
  }
  expireAccess() {
    if (!this.#tokens) throw new Error("no tokens yet");
    this.#tokens = { ...this.#tokens, access_token: `garbage-${randomBytes(12).toString("hex")}` };
  }

  saveCodeVerifier(verifier) {
    this.#verifiers.push(verifier);
    if (this.#verifiers.length > 16) this.#verifiers.shift();
  }
  codeVerifier() {
    if (!this.#exchangeVerifier) throw new Error("no login is being finished");
    return this.#exchangeVerifier;
  }

  invalidateCredentials(scope) {
    log("invalidate credentials", scope);
    if (scope === "all" || scope === "client") this.#clientInformation = undefined;
    if (scope === "all" || scope === "tokens") this.#tokens = undefined;
    if (scope === "all" || scope === "verifier") this.#verifiers = [];
  }

  // The SDK hands over the authorization URL and, right after, fails the
  // request that needed it with UnauthorizedError: the login runs on its own
  // and ends by finishing the authorization, so it also completes when no
  // request is waiting for it (e.g. the SSE GET stream needed it).
  redirectToAuthorization(authorizationUrl) {
    this.loginRequests += 1;
    if (this.#running) {
      // Whoever asked for this one waits for the running login instead.
      log("a login is already running; not starting another for", authorizationUrl.href);
      return;
    }
    this.#running = true;
    const login = this.#login(new URL(authorizationUrl.href)).finally(() => { this.#running = false; });
    login.catch((err) => log("login failed:", err?.message ?? err));
    this.lastLogin = login;
  }

  async #login(authorizationUrl) {
    const challenge = authorizationUrl.searchParams.get("code_challenge");
    const verifier = this.#verifiers.find((v) => s256(v) === challenge);
    if (!verifier) throw new Error("no saved PKCE verifier matches the authorization URL");
    const state = authorizationUrl.searchParams.get("state");
    log("login at", authorizationUrl.href);
    browser ??= await launchBrowser({ timeoutMs });
    counters.authorizations += 1;
    const pages = [];
    this.loginPages.push(pages);
    let result;
    try {
      result = await browserLogin(browser.context, authorizationUrl.href, opts.login,
        (url) => url === callbackUrl || url.startsWith(`${callbackUrl}?`), { timeoutMs, consent: this.consent ?? "allow" });
    } catch (err) {
      pages.push(...(err.details?.pages ?? []));
      lastLoginPages = pages;
      const where = err.details ? ` (at ${err.details.url}, status ${err.details.status}: ${String(err.details.body_text).slice(0, 300)})` : "";
      throw new Error(`browser login failed: ${err.message}${where}`);
    }
    pages.push(...result.pages);
    lastLoginPages = pages;
    const redirect = new URL(result.url);
    const error = redirect.searchParams.get("error");
    if (error) {
      throw new Error(`authorization refused: ${error}${redirect.searchParams.has("error_description") ? `: ${redirect.searchParams.get("error_description")}` : ""}`);
    }
    if (state && redirect.searchParams.get("state") !== state) {
      throw new Error(`state mismatch: sent ${state}, got ${redirect.searchParams.get("state")}`);
    }
    const code = redirect.searchParams.get("code");
    if (!code) throw new Error(`no code in the redirect ${result.url}`);
    this.#exchangeVerifier = verifier;
    this.#finishing = true;
    try {
      await (transport ?? newTransport()).finishAuth(code);
    } finally {
      this.#finishing = false;
      this.#exchangeVerifier = undefined;
    }
    this.#verifiers = this.#verifiers.filter((v) => v !== verifier);
    log("login finished");
  }
}
const provider = new HostProvider();

function newTransport() {
  return new StreamableHTTPClientTransport(serverUrl, { authProvider: provider });
}

async function closeClient() {
  const old = client;
  client = null;
  await old?.close().catch(() => {});
}

// How long one connection attempt may take once logged in.
const CONNECT_MS = 20000;

class ConnectDeadline extends Error {}

function withDeadline(promise, ms, what) {
  let timer;
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new ConnectDeadline(`${what} took longer than ${ms / 1000} s`)), ms);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

// Connects a new Client; a connection refused for want of a login is tried
// again once the login has finished.
async function connect() {
  await closeClient();
  for (let attempt = 0; ; attempt += 1) {
    const before = provider.loginRequests;
    transport = newTransport();
    const candidate = new Client({ name: "mcpmux-oauth-host", version: "1.0.0" }, { capabilities: {} });
    candidate.onerror = (err) => log("client error:", err?.message ?? err);
    try {
      await withDeadline(candidate.connect(transport), CONNECT_MS, "the connection");
      client = candidate;
      return;
    } catch (err) {
      if (attempt < 2 && err instanceof UnauthorizedError && provider.loginRequests > before) {
        await provider.lastLogin;
        continue;
      }
      // The SDK can lose the answer to a request raced by its own login
      // (the GET stream and the POST both asking for one): a host would
      // try again, with the tokens it now has.
      if (attempt < 2 && err instanceof ConnectDeadline) {
        log("connection attempt timed out; connecting again");
        await candidate.close().catch(() => {});
        continue;
      }
      throw err;
    }
  }
}

const sessionGone = (err) => err instanceof StreamableHTTPError && err.code === 404;

// Runs a request like a host would: after a login the SDK asked for, or a
// lost session, once more.
async function request(fn) {
  if (!client) throw new Error("not connected (send connect first)");
  for (let attempt = 0; ; attempt += 1) {
    const before = provider.loginRequests;
    try {
      return await fn(client);
    } catch (err) {
      if (attempt < 2 && err instanceof UnauthorizedError && provider.loginRequests > before) {
        log("request needs a new login:", err.message);
        await provider.lastLogin;
        continue;
      }
      if (attempt < 2 && sessionGone(err)) {
        log("session gone, connecting again:", err.message);
        await connect();
        continue;
      }
      throw err;
    }
  }
}

// Runs op while counting the pages of the logins it caused.
async function withLogins(op, consent) {
  const from = provider.loginPages.length;
  provider.consent = consent;
  try {
    await op();
  } finally {
    provider.consent = undefined;
  }
  return provider.loginPages.slice(from).flat();
}

function errorOf(err) {
  if (err instanceof McpError) {
    const message = err.message.replace(/^MCP error -?\d+: /, "");
    return { code: err.code, message, ...(err.data !== undefined ? { data: err.data } : {}) };
  }
  const out = { message: String(err?.message ?? err) };
  if (err instanceof StreamableHTTPError) out.http_status = err.code;
  if (err instanceof UnauthorizedError) out.unauthorized = true;
  return out;
}

async function handle(command) {
  switch (command.op) {
    case "info":
      return { ok: true, callback_url: callbackUrl, client_metadata_url: clientMetadataUrl ?? null };
    case "connect": {
      const consent = command.consent ?? "allow";
      const loginPages = await withLogins(connect, consent);
      return {
        ok: true,
        client_id: provider.clientInformation()?.client_id ?? null,
        registered: provider.registered,
        login_pages: loginPages,
        authorizations: counters.authorizations,
      };
    }
    case "tools": {
      const { tools } = await request((c) => c.listTools());
      return { ok: true, tools: tools.map((t) => t.name) };
    }
    case "call": {
      if (typeof command.name !== "string") throw new Error("call needs a name");
      try {
        const result = await request((c) => c.callTool({ name: command.name, arguments: command.arguments ?? {} }));
        return { ok: true, result };
      } catch (err) {
        if (err instanceof McpError) return { ok: false, error: errorOf(err) };
        throw err;
      }
    }
    case "expire_access":
      provider.expireAccess();
      return { ok: true };
    case "state": {
      const tokens = provider.tokens();
      return {
        ok: true,
        refreshes: counters.refreshes,
        authorizations: counters.authorizations,
        has_refresh_token: Boolean(tokens?.refresh_token),
        access_token_prefix: tokens?.access_token ? tokens.access_token.slice(0, 8) : null,
        client_id: provider.clientInformation()?.client_id ?? null,
        registered: provider.registered,
        last_login_pages: lastLoginPages,
        cimd_fetches: cimdFetches,
      };
    }
    default:
      throw new Error(`unknown op ${JSON.stringify(command.op)}`);
  }
}

async function shutdown() {
  await closeClient();
  await browser?.close();
  callbackServer.close();
  metadataServer?.close();
  process.exit(0);
}

log("ready", JSON.stringify({ url: serverUrl.href, callback_url: callbackUrl, client_metadata_url: clientMetadataUrl ?? null }));
const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (!line.trim()) continue;
  let answer;
  try {
    answer = await handle(JSON.parse(line));
  } catch (err) {
    log("command failed:", err?.stack ?? err);
    answer = { ok: false, error: errorOf(err) };
  }
  process.stdout.write(`${JSON.stringify(answer)}\n`);
}
await shutdown();
