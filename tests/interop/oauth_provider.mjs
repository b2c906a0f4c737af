// A real OpenID Provider (panva's oidc-provider) on loopback, the
// authorization server for the upstream-identity tests: dev login and
// consent pages (any login name is an account, any password), PKCE-only
// authorization code with refresh tokens (rotated), client_credentials,
// RFC 8693 token exchange (subject JWTs checked against --subject-jwks),
// RFC 7591 open dynamic registration, revocation, introspection, and
// resource indicators: any http://127.0.0.1:*/ or http://localhost:*/
// resource gets a JWT access token whose aud is that resource.
// Static clients: mcpmux-gateway / gateway-secret (client_secret_basic), the
// gateway as an OAuth client of its upstreams; and mcpmux-login / login-secret
// (client_secret_basic, authorization code + refresh token, native, redirect
// URI http://127.0.0.1/oauth/login/callback on any port), the gateway's own
// authorization server delegating user login here (OpenID Connect).
// Accounts: any login name is an account whose id (sub) is that name, with
// claims name and preferred_username (the login name), email
// (LOGIN@example.test) and groups (from --groups, [] when not listed). Scopes
// openid, offline_access, profile (name, preferred_username), email (email)
// and groups (groups); the ID token itself carries the claims of the granted
// scopes (conformIdTokenClaims off) and echoes nonce. PKCE S256 is required.
// The login page shows when the browser has no session here; the consent
// page shows on every authorization of a native client (oidc-provider's
// native_client_prompt check), so also on a second login of mcpmux-login.
// Metadata at /.well-known/openid-configuration and (same document)
// /.well-known/oauth-authorization-server.
// Test-only routes: POST /test/revoke?sub=LOGIN -> {"revoked": N} and
// GET /test/log -> [{grant_type, sub, aud, client_id, scope, refresh_token}].
//
// Prints exactly one line "ISSUER http://127.0.0.1:PORT" on stdout once
// listening (all logging goes to stderr); exits when stdin closes.
//
// Usage: node oauth_provider.mjs [--access-ttl SECONDS] [--subject-jwks FILE]
//          [--groups LOGIN=GROUP+GROUP,LOGIN=GROUP...]
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import { parseArgs } from "node:util";
import * as jose from "jose";
import Provider, { errors } from "oidc-provider";

// oidc-provider prints its notices with console.info; keep stdout for the ISSUER line.
console.log = console.info = (...args) => console.error(...args);
const log = (...args) => console.error("oauth_provider:", ...args);

const { values: opts } = parseArgs({
  options: {
    "access-ttl": { type: "string", default: "60" },
    "subject-jwks": { type: "string" },
    groups: { type: "string", default: "" },
  },
});
const accessTtl = Number.parseInt(opts["access-ttl"], 10);
if (!(accessTtl > 0)) throw new Error("--access-ttl must be a positive number of seconds");
// --groups alice=ops+dev,bob=readers: the groups claim of each login name.
const groupsOf = new Map();
for (const entry of opts.groups.split(",").map((e) => e.trim()).filter(Boolean)) {
  const at = entry.indexOf("=");
  if (at <= 0) throw new Error(`--groups: expected LOGIN=GROUP+GROUP, got ${entry}`);
  groupsOf.set(entry.slice(0, at), entry.slice(at + 1).split("+").filter(Boolean));
}
const subjectJwks = opts["subject-jwks"]
  ? jose.createLocalJWKSet(JSON.parse(readFileSync(opts["subject-jwks"], "utf8")))
  : null;

const TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange";
const TT_ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token";
const SUBJECT_TOKEN_TYPES = new Set([
  "urn:ietf:params:oauth:token-type:jwt",
  TT_ACCESS_TOKEN,
  "urn:ietf:params:oauth:token-type:id_token",
]);
const OIDC_SCOPES = new Set(["openid", "offline_access", "profile", "email", "groups"]);
const RESOURCE_SCOPES = ["mcp:tools", "mcp:read", "mcp:write"];
const DAY = 24 * 60 * 60;

// In-memory storage that can be listed (for /test/revoke); no size limit.
const store = new Map(); // "Model:id" -> { payload, expiresAt }
const GRANTABLE = new Set(["AccessToken", "AuthorizationCode", "RefreshToken", "DeviceCode", "BackchannelAuthenticationRequest"]);
function live(key) {
  const entry = store.get(key);
  if (!entry) return undefined;
  if (entry.expiresAt && entry.expiresAt <= Date.now()) {
    store.delete(key);
    return undefined;
  }
  return entry.payload;
}
class TestAdapter {
  constructor(model) { this.model = model; }
  key(id) { return `${this.model}:${id}`; }
  async upsert(id, payload, expiresIn) {
    store.set(this.key(id), { payload, expiresAt: expiresIn ? Date.now() + expiresIn * 1000 : 0 });
  }
  async find(id) { return live(this.key(id)); }
  async findByUid(uid) { return this.#findBy((p) => p.uid === uid); }
  async findByUserCode(userCode) { return this.#findBy((p) => p.userCode === userCode); }
  async consume(id) {
    const payload = live(this.key(id));
    if (payload) payload.consumed = Math.floor(Date.now() / 1000);
  }
  async destroy(id) { store.delete(this.key(id)); }
  async revokeByGrantId(grantId) {
    for (const [key, { payload }] of store) {
      if (GRANTABLE.has(key.slice(0, key.indexOf(":"))) && payload.grantId === grantId) store.delete(key);
    }
  }
  #findBy(predicate) {
    const prefix = `${this.model}:`;
    for (const key of store.keys()) {
      if (key.startsWith(prefix)) {
        const payload = live(key);
        if (payload && predicate(payload)) return payload;
      }
    }
    return undefined;
  }
}

// Resource indicators: any loopback http(s) URL is a resource server.
function resourceServerInfo(resource, ctx) {
  const url = URL.parse(resource);
  if (!url || !["http:", "https:"].includes(url.protocol) || !["127.0.0.1", "localhost", "[::1]"].includes(url.hostname)) {
    throw new errors.InvalidTarget(`resource ${resource} is not a loopback URL`);
  }
  const requested = String(ctx?.oidc?.params?.scope ?? "").split(" ").filter((s) => s && !OIDC_SCOPES.has(s));
  return {
    scope: [...new Set([...RESOURCE_SCOPES, ...requested])].join(" "),
    audience: resource,
    accessTokenFormat: "jwt",
    accessTokenTTL: accessTtl,
    jwt: { sign: { alg: "RS256" } },
  };
}

// The issuer has to be known before the Provider is built: listen first.
let handler = (_req, res) => { res.statusCode = 503; res.end(); };
const server = createServer((req, res) => handler(req, res));
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const { privateKey } = await jose.generateKeyPair("RS256", { extractable: true });
const signingKey = { ...(await jose.exportJWK(privateKey)), kid: "test-rs256", alg: "RS256", use: "sig" };

const provider = new Provider(issuer, {
  adapter: TestAdapter,
  jwks: { keys: [signingKey] },
  cookies: { keys: [randomBytes(32).toString("base64url")] },
  clients: [{
    client_id: "mcpmux-gateway",
    client_secret: "gateway-secret",
    token_endpoint_auth_method: "client_secret_basic",
    grant_types: ["authorization_code", "refresh_token", "client_credentials", TOKEN_EXCHANGE],
    response_types: ["code"],
    application_type: "native",
    redirect_uris: ["http://127.0.0.1/oauth/callback"],
  }, {
    // A native client's loopback redirect URI matches on any port (RFC 8252 7.3).
    client_id: "mcpmux-login",
    client_secret: "login-secret",
    token_endpoint_auth_method: "client_secret_basic",
    grant_types: ["authorization_code", "refresh_token"],
    response_types: ["code"],
    application_type: "native",
    redirect_uris: ["http://127.0.0.1/oauth/login/callback"],
  }],
  async findAccount(_ctx, sub) {
    return {
      accountId: sub,
      async claims() {
        return {
          sub,
          name: sub,
          preferred_username: sub,
          email: `${sub}@example.test`,
          groups: [...(groupsOf.get(sub) ?? [])],
        };
      },
    };
  },
  claims: { openid: ["sub"], profile: ["name", "preferred_username"], email: ["email"], groups: ["groups"] },
  scopes: ["openid", "offline_access", "profile", "email", "groups"],
  // The ID token carries the claims of the granted scopes, not only sub.
  conformIdTokenClaims: false,
  responseTypes: ["code"],
  pkce: { required: () => true },
  features: {
    devInteractions: { enabled: true },
    clientCredentials: { enabled: true },
    revocation: { enabled: true },
    introspection: { enabled: true },
    registration: { enabled: true, initialAccessToken: false },
    resourceIndicators: {
      enabled: true,
      defaultResource: async (_ctx, _client, oneOf) => oneOf,
      useGrantedResource: async () => true,
      getResourceServerInfo: async (ctx, resource) => resourceServerInfo(resource, ctx),
    },
  },
  issueRefreshToken: async (ctx, client, source) => client.grantTypeAllowed("refresh_token")
    && (source.scopes.has("offline_access") || ctx.oidc.params.grant_type === "authorization_code"),
  rotateRefreshToken: true,
  ttl: {
    AccessToken: accessTtl,
    ClientCredentials: accessTtl,
    RefreshToken: DAY,
    Grant: DAY,
    Session: DAY,
    Interaction: 60 * 60,
    IdToken: 60 * 60,
    AuthorizationCode: 60,
  },
});
provider.proxy = false;

// RFC 8693 token exchange: a verified subject JWT becomes a provider access token.
provider.registerGrantType(TOKEN_EXCHANGE, async (ctx) => {
  const { client, params } = ctx.oidc;
  const fail = (description) => new errors.CustomOIDCProviderError("invalid_grant", description);
  if (client.clientAuthMethod === "none") throw new errors.InvalidClient("token exchange needs an authenticated client");
  if (!params.subject_token) throw new errors.InvalidRequest("missing required parameter 'subject_token'");
  if (!SUBJECT_TOKEN_TYPES.has(params.subject_token_type)) {
    throw new errors.InvalidRequest("unsupported or missing subject_token_type");
  }
  if (params.requested_token_type && params.requested_token_type !== TT_ACCESS_TOKEN) {
    throw new errors.InvalidRequest("only access tokens can be requested");
  }
  if (!subjectJwks) throw fail("token exchange is not configured (no --subject-jwks)");
  let subject;
  try {
    ({ payload: subject } = await jose.jwtVerify(params.subject_token, subjectJwks));
  } catch (err) {
    throw fail(`subject_token rejected: ${err.code ?? err.message}`);
  }
  if (!subject.sub) throw fail("subject_token has no sub");
  const resource = params.resource ?? params.audience;
  if (!resource) throw new errors.InvalidTarget("resource or audience is required");
  const resourceServer = new provider.ResourceServer(resource, resourceServerInfo(resource, ctx));
  const allowed = resourceServer.scopes;
  const requested = String(params.scope ?? "").split(" ").filter(Boolean);
  const scope = (requested.length ? requested.filter((s) => allowed.has(s)) : ["mcp:tools"]).join(" ");

  const grant = new provider.Grant({ accountId: subject.sub, clientId: client.clientId });
  if (scope) grant.addResourceScope(resource, scope);
  const grantId = await grant.save();
  const token = new provider.AccessToken({
    accountId: subject.sub,
    client,
    grantId,
    gty: TOKEN_EXCHANGE,
    scope: scope || undefined,
    resourceServer,
  });
  ctx.oidc.entity("AccessToken", token);
  const accessToken = await token.save();
  ctx.body = {
    access_token: accessToken,
    issued_token_type: TT_ACCESS_TOKEN,
    token_type: "Bearer",
    expires_in: token.expiration,
    scope: token.scope,
  };
}, ["subject_token", "subject_token_type", "resource", "audience", "scope", "requested_token_type", "actor_token", "actor_token_type"]);

// What the token endpoint issued, for the tests.
const issued = [];
provider.on("grant.success", (ctx) => {
  const body = ctx.body ?? {};
  let claims = {};
  try { claims = jose.decodeJwt(body.access_token); } catch {
    const at = ctx.oidc.entities.AccessToken ?? ctx.oidc.entities.ClientCredentials ?? {};
    claims = { sub: at.accountId ?? at.clientId, aud: at.aud, client_id: at.clientId };
  }
  const entry = {
    grant_type: ctx.oidc.params.grant_type,
    sub: claims.sub ?? null,
    aud: claims.aud ?? null,
    client_id: claims.client_id ?? ctx.oidc.client?.clientId ?? null,
    scope: body.scope ?? null,
    refresh_token: Boolean(body.refresh_token),
  };
  issued.push(entry);
  log("issued", JSON.stringify(entry));
});
for (const event of ["grant.error", "server_error", "authorization.error", "registration_create.error", "introspection.error", "revocation.error"]) {
  provider.on(event, (_ctx, err) => log(event, err?.error ?? err?.message, err?.error_detail ?? err?.error_description ?? "", event === "server_error" ? err?.stack : ""));
}

function revokeAccount(sub) {
  let revoked = 0;
  for (const [key, { payload }] of store) {
    const model = key.slice(0, key.indexOf(":"));
    if (["Grant", "AccessToken", "RefreshToken", "AuthorizationCode"].includes(model) && payload.accountId === sub) {
      store.delete(key);
      revoked += 1;
    }
  }
  return revoked;
}

const callback = provider.callback();
handler = (req, res) => {
  const url = new URL(req.url, issuer);
  if (url.pathname.startsWith("/test/")) {
    const send = (status, body) => {
      res.writeHead(status, { "content-type": "application/json", "cache-control": "no-store" });
      res.end(JSON.stringify(body));
    };
    if (url.pathname === "/test/revoke" && req.method === "POST" && url.searchParams.get("sub")) {
      const sub = url.searchParams.get("sub");
      const revoked = revokeAccount(sub);
      log("revoked", sub, revoked);
      req.resume();
      return send(200, { revoked });
    }
    if (url.pathname === "/test/log" && req.method === "GET") return send(200, issued);
    return send(404, { error: "not_found" });
  }
  // RFC 8414 metadata is the same document as OpenID discovery.
  if (url.pathname === "/.well-known/oauth-authorization-server") req.url = "/.well-known/openid-configuration";
  return callback(req, res);
};

process.stdin.on("end", () => process.exit(0));
process.stdin.on("close", () => process.exit(0));
process.stdin.resume();
process.stdout.write(`ISSUER ${issuer}\n`);
log("ready", issuer, `access-ttl=${accessTtl}s`, `groups=${JSON.stringify(Object.fromEntries(groupsOf))}`, subjectJwks ? "token exchange on" : "token exchange off (no --subject-jwks)");
