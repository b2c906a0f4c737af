// A protected MCP server on the TypeScript SDK (McpServer + Streamable
// HTTP): every request to /mcp needs `Authorization: Bearer <JWT>` issued by
// --issuer (checked with jose against the issuer's JWKS) whose aud includes
// this server's resource URL http://127.0.0.1:PORT/mcp; otherwise 401 with
// `WWW-Authenticate: Bearer resource_metadata="…/.well-known/oauth-protected-resource/mcp"`.
// Serves RFC 9728 metadata at /.well-known/oauth-protected-resource[/mcp].
// Sessions (stateful unless --stateless) are bound to the sub that created
// them (another sub gets 403). Tools: whoami (the claims of the token that
// authorized this very request), echo and touch (below). Every /mcp request
// is logged as one JSON line on stderr and listed at GET /test/seen (no
// auth), rejected ones included: [{verified, status, sub, aud, method,
// authorization_prefix, token_sha256, jti, session}] (every JWT starts
// "eyJhbGciOiJS", so compare token_sha256 = hex SHA-256 of the raw bearer
// token to tell tokens apart).
//
// Per-user resource subscriptions (capability resources {subscribe: true,
// listChanged: false}): one resource mine://notes (text/plain) whose read
// answers "notes of <sub> v<N>" for the sub of the token of that very request
// and that user's version N (starts at 1). resources/subscribe and
// resources/unsubscribe of mine://notes mark the session (un)subscribed (any
// other URI: -32602); each one is listed at GET /test/subscriptions (no auth):
// [{sub, session, uri, action: "subscribe"|"unsubscribe"}] in order. Tool
// touch bumps the caller's version, sends notifications/resources/updated
// {uri: mine://notes} to every subscribed session of that same sub (outside
// any request, so on the session's standalone GET SSE stream) and answers
// "touched <sub> v<N>".
//
// Prints "LISTENING <port>" on stdout once listening.
//
// Usage: node protected_server.mjs --issuer URL [--stateless]
import { createHash, randomUUID } from "node:crypto";
import { createServer } from "node:http";
import { parseArgs } from "node:util";
import * as jose from "jose";
import { z } from "zod";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import {
  ErrorCode,
  McpError,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";

const { values: opts } = parseArgs({
  options: { issuer: { type: "string" }, stateless: { type: "boolean", default: false } },
});
if (!opts.issuer) throw new Error("usage: node protected_server.mjs --issuer URL [--stateless]");
const issuer = opts.issuer.replace(/\/$/, "");

const server = createServer((req, res) => {
  handle(req, res).catch((err) => {
    console.error("protected_server: error", err?.stack ?? err);
    if (!res.headersSent) sendJson(res, 500, { error: "server_error", error_description: String(err?.message ?? err) });
    else res.end();
  });
});
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const port = server.address().port;
const base = `http://127.0.0.1:${port}`;
const resource = `${base}/mcp`;
const metadataUrl = `${base}/.well-known/oauth-protected-resource/mcp`;
const metadata = {
  resource,
  authorization_servers: [issuer],
  scopes_supported: ["mcp:tools"],
  bearer_methods_supported: ["header"],
};

let jwks; // discovered on first use from <issuer>/.well-known/openid-configuration
async function keySet() {
  if (!jwks) {
    const response = await fetch(`${issuer}/.well-known/openid-configuration`);
    if (!response.ok) throw new Error(`discovery at ${issuer} answered ${response.status}`);
    const { jwks_uri: jwksUri } = await response.json();
    jwks = jose.createRemoteJWKSet(new URL(jwksUri));
  }
  return jwks;
}

const seen = []; // every /mcp request, rejected ones included
const sessions = new Map(); // session id -> {transport, sub, mcp, subscribed}
const NOTES_URI = "mine://notes";
const versions = new Map(); // sub -> version of that user's notes (absent = 1)
const subscriptionLog = []; // [{sub, session, uri, action}] in order
const versionOf = (sub) => versions.get(sub) ?? 1;
const requestSub = (extra) => extra.authInfo?.extra?.claims?.sub ?? null;

function sendJson(res, status, body, headers = {}) {
  res.writeHead(status, { "content-type": "application/json", ...headers });
  res.end(JSON.stringify(body));
}

async function readBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const text = Buffer.concat(chunks).toString("utf8");
  return text ? JSON.parse(text) : undefined;
}

function rpcMethod(req, body) {
  if (req.method !== "POST") return req.method;
  const messages = Array.isArray(body) ? body : [body];
  return messages.map((m) => m?.method ?? (m && "result" in m ? "(response)" : "(invalid)")).join(",");
}

// `state` is this connection's {sub, subscribed}; in the sessions map once the
// session is initialized (stateful mode).
function newMcpServer(state) {
  const mcp = new McpServer({ name: "protected-server", version: "1.0.0" });
  mcp.registerTool("whoami", {
    description: "The identity in the access token that authorized this request",
    annotations: { readOnlyHint: true, idempotentHint: true },
  }, async (extra) => {
    const claims = extra.authInfo?.extra?.claims ?? {};
    const who = {
      sub: claims.sub ?? null,
      aud: claims.aud ?? null,
      client_id: claims.client_id ?? null,
      scope: claims.scope ?? null,
      session: extra.sessionId ?? null,
    };
    return { content: [{ type: "text", text: JSON.stringify(who) }] };
  });
  mcp.registerTool("echo", {
    description: "Echoes the message back",
    inputSchema: { message: z.string() },
  }, async ({ message }) => ({ content: [{ type: "text", text: message }] }));

  mcp.registerResource("notes", NOTES_URI, {
    description: "The calling user's notes",
    mimeType: "text/plain",
  }, async (uri, extra) => {
    const sub = requestSub(extra);
    return { contents: [{ uri: uri.href, mimeType: "text/plain", text: `notes of ${sub} v${versionOf(sub)}` }] };
  });
  mcp.registerTool("touch", {
    description: "Bumps the version of the caller's notes and notifies the caller's subscribed sessions",
  }, async (extra) => {
    const sub = requestSub(extra);
    const version = versionOf(sub) + 1;
    versions.set(sub, version);
    const notified = [];
    for (const [id, session] of sessions) {
      if (session.sub !== sub || !session.subscribed) continue;
      try {
        // No relatedRequestId: the transport writes it to the standalone GET SSE stream.
        await session.mcp.server.sendResourceUpdated({ uri: NOTES_URI });
        notified.push(id);
      } catch (err) {
        console.error(`protected_server: resources/updated to session ${id} failed: ${err?.message ?? err}`);
      }
    }
    console.error(JSON.stringify({ touched: sub, version, notified }));
    return { content: [{ type: "text", text: `touched ${sub} v${version}` }] };
  });
  // registerResource declared resources {listChanged: true}; this list never changes.
  mcp.server.registerCapabilities({ resources: { subscribe: true, listChanged: false } });
  const subscription = (action) => async (request, extra) => {
    const { uri } = request.params;
    if (uri !== NOTES_URI) throw new McpError(ErrorCode.InvalidParams, `Resource ${uri} not found`);
    state.subscribed = action === "subscribe";
    subscriptionLog.push({ sub: state.sub, session: extra.sessionId ?? null, uri, action });
    return {};
  };
  mcp.server.setRequestHandler(SubscribeRequestSchema, subscription("subscribe"));
  mcp.server.setRequestHandler(UnsubscribeRequestSchema, subscription("unsubscribe"));
  return mcp;
}

async function authenticate(req) {
  const header = req.headers.authorization ?? "";
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  if (!match) return { error: "missing bearer token", token: null };
  const token = match[1];
  try {
    const { payload } = await jose.jwtVerify(token, await keySet(), { issuer, audience: resource, clockTolerance: 5 });
    return { token, claims: payload };
  } catch (err) {
    return { error: `${err.code ?? "ERR"}: ${err.message}`, token };
  }
}

async function handle(req, res) {
  const url = new URL(req.url, base);
  if (req.method === "GET" && (url.pathname === "/.well-known/oauth-protected-resource/mcp"
    || url.pathname === "/.well-known/oauth-protected-resource")) {
    return sendJson(res, 200, metadata);
  }
  if (req.method === "GET" && url.pathname === "/test/seen") return sendJson(res, 200, seen);
  if (req.method === "GET" && url.pathname === "/test/subscriptions") return sendJson(res, 200, subscriptionLog);
  if (url.pathname !== "/mcp") return sendJson(res, 404, { error: "not_found" });

  const body = req.method === "POST" ? await readBody(req).catch(() => null) : undefined;
  const method = rpcMethod(req, body);
  const sessionId = req.headers["mcp-session-id"] ?? null;
  const auth = await authenticate(req);
  const record = {
    verified: !auth.error,
    status: 0,
    sub: auth.claims?.sub ?? null,
    aud: auth.claims?.aud ?? null,
    method,
    authorization_prefix: auth.token ? auth.token.slice(0, 12) : null,
    token_sha256: auth.token ? createHash("sha256").update(auth.token).digest("hex") : null,
    jti: auth.claims?.jti ?? null,
    session: sessionId,
  };
  seen.push(record);
  const done = (status) => {
    record.status = status;
    console.error(JSON.stringify({ sub: record.sub, aud: record.aud, method, status, ...(auth.error ? { error: auth.error } : {}) }));
  };

  if (auth.error) {
    done(401);
    const challenge = auth.token
      ? `Bearer resource_metadata="${metadataUrl}", error="invalid_token"`
      : `Bearer resource_metadata="${metadataUrl}"`;
    return sendJson(res, 401, { error: auth.token ? "invalid_token" : "unauthorized", error_description: auth.error },
      { "www-authenticate": challenge });
  }
  if (body === null) {
    done(400);
    return sendJson(res, 400, { jsonrpc: "2.0", error: { code: -32700, message: "Parse error" }, id: null });
  }

  const { claims, token } = auth;
  req.auth = {
    token,
    clientId: claims.client_id ?? "",
    scopes: typeof claims.scope === "string" ? claims.scope.split(" ").filter(Boolean) : [],
    expiresAt: claims.exp,
    resource: new URL(resource),
    extra: { claims },
  };

  if (opts.stateless) {
    const mcp = newMcpServer({ sub: claims.sub, subscribed: false });
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on("close", () => { transport.close(); mcp.close(); });
    await mcp.connect(transport);
    await transport.handleRequest(req, res, body);
    return done(res.statusCode);
  }

  if (sessionId) {
    const session = sessions.get(sessionId);
    if (!session) {
      done(404);
      return sendJson(res, 404, { jsonrpc: "2.0", error: { code: -32001, message: "Session not found" }, id: null });
    }
    if (session.sub !== claims.sub) {
      done(403);
      return sendJson(res, 403, {
        jsonrpc: "2.0",
        error: { code: -32003, message: `session belongs to another subject (${session.sub}), not ${claims.sub}` },
        id: null,
      });
    }
    await session.transport.handleRequest(req, res, body);
    return done(res.statusCode);
  }

  // No session yet: only an initialize request may create one, bound to this sub.
  const state = { sub: claims.sub, subscribed: false };
  const mcp = newMcpServer(state);
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    onsessioninitialized: (id) => { sessions.set(id, Object.assign(state, { transport, mcp })); },
  });
  transport.onclose = () => {
    if (transport.sessionId) sessions.delete(transport.sessionId);
  };
  await mcp.connect(transport);
  await transport.handleRequest(req, res, body);
  if (!transport.sessionId) { transport.close(); mcp.close(); }
  return done(res.statusCode);
}

process.stdout.write(`LISTENING ${port}\n`);
console.error(`protected_server: resource ${resource} issuer ${issuer}${opts.stateless ? " (stateless)" : ""}`);
