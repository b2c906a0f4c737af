// One browser login from the command line (browser_login.mjs in a fresh
// headless Chromium profile), for hosts that are not written in Node (e.g.
// oauth_host.py): opens AUTHORIZE_URL, logs in as LOGIN, consents (the
// gateway's consent page: Allow, or Deny with --consent deny) and stops as
// soon as the browser is sent to a URL that starts with CALLBACK_PREFIX
// (whether or not anything answers there).
//
// Prints one JSON line {url, status, pages} (url: the redirect URI with its
// query, e.g. code and state), or {error, url, status, pages, body_text} and
// exits 1. All logging goes to stderr.
//
// Usage: node browser_login_cli.mjs AUTHORIZE_URL LOGIN CALLBACK_PREFIX
//          [--consent allow|deny] [--timeout SECONDS]
import { parseArgs } from "node:util";
import { browserLogin, launchBrowser } from "./browser_login.mjs";

const { values: opts, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    consent: { type: "string", default: "allow" },
    timeout: { type: "string", default: "30" },
  },
});
const [authorizeUrl, login, callbackPrefix] = positionals;
if (!authorizeUrl || !login || !callbackPrefix || positionals.length !== 3) {
  console.error("usage: node browser_login_cli.mjs AUTHORIZE_URL LOGIN CALLBACK_PREFIX [--consent allow|deny] [--timeout SECONDS]");
  process.exit(2);
}
const timeoutMs = Number.parseFloat(opts.timeout) * 1000;

let browser;
let out;
let code = 0;
try {
  browser = await launchBrowser({ timeoutMs });
  out = await browserLogin(browser.context, authorizeUrl, login, (url) => url.startsWith(callbackPrefix), {
    timeoutMs,
    consent: opts.consent,
  });
} catch (err) {
  out = { error: String(err?.message ?? err).split("\n")[0], ...(err?.details ?? {}) };
  code = 1;
}
await browser?.close();
process.stdout.write(`${JSON.stringify(out)}\n`);
process.exit(code);
