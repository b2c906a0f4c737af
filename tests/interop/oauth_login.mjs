// Logs a user in on oauth_provider.mjs's own login and consent pages in a
// real browser (headless Chromium, fresh profile, driven by playwright-core):
// opens AUTHORIZE_URL, signs in as LOGIN (any password), presses Continue on
// the consent page, and waits until the browser has loaded the redirect URI
// (path /oauth/callback on a loopback host). Requests to any host other than
// 127.0.0.1/localhost/[::1] are blocked. Gives up after 30 s.
// Prints one JSON object: {final_url, status, body_text, steps} (steps: the
// pages it went through, e.g. ["login", "consent"]), or on failure
// {error, final_url, status, body_text, steps} and exits 1.
//
// Usage: node oauth_login.mjs AUTHORIZE_URL LOGIN [SCREENSHOT.png]
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const [authorizeUrl, login, screenshot] = process.argv.slice(2);
if (!authorizeUrl || !login) {
  console.error("usage: node oauth_login.mjs AUTHORIZE_URL LOGIN [SCREENSHOT.png]");
  process.exit(2);
}
const TIMEOUT_MS = 30000;
const LOOPBACK = new Set(["127.0.0.1", "localhost", "[::1]"]);
const isCallback = (href) => {
  const url = URL.parse(href);
  return Boolean(url && url.protocol === "http:" && LOOPBACK.has(url.hostname) && url.pathname === "/oauth/callback");
};

const profile = mkdtempSync(join(tmpdir(), "mcpmux-oauth-login-"));
let context;
let page;
let status = null; // status of the last main-frame document response
let lastNavigation = null; // URL of the last main-frame document request
const steps = [];

async function bodyText() {
  try {
    return (await page.evaluate(() => document.body?.innerText ?? "")).slice(0, 2000);
  } catch {
    return "";
  }
}

async function finish(out, code) {
  if (screenshot && page) await page.screenshot({ path: screenshot, fullPage: true }).catch(() => {});
  await context?.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
  process.stdout.write(`${JSON.stringify(out)}\n`);
  process.exit(code);
}

async function fail(message) {
  // A redirect to the callback that did not load (nothing listening) still tells where it went.
  const url = lastNavigation && isCallback(lastNavigation) ? lastNavigation : (page?.url() ?? null);
  await finish({
    error: message,
    final_url: url,
    status,
    body_text: page ? await bodyText() : "",
    steps,
  }, 1);
}

const deadline = setTimeout(() => {
  fail(`timed out after ${TIMEOUT_MS / 1000} s without reaching /oauth/callback (last navigation: ${lastNavigation})`);
}, TIMEOUT_MS);

try {
  context = await chromium.launchPersistentContext(profile, {
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
    timeout: TIMEOUT_MS,
  });
  // Only loopback traffic (the provider's pages @import a web font).
  await context.route("**/*", (route) => {
    const url = URL.parse(route.request().url());
    return url && LOOPBACK.has(url.hostname) ? route.continue() : route.abort("blockedbyclient");
  });
  page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(TIMEOUT_MS);
  page.on("request", (request) => {
    if (request.isNavigationRequest() && request.frame() === page.mainFrame()) lastNavigation = request.url();
  });
  page.on("response", (response) => {
    if (response.request().isNavigationRequest() && response.frame() === page.mainFrame()) status = response.status();
  });

  // Each step submits one form; the navigation that follows includes all redirects.
  const submit = async (selector) => {
    await Promise.all([page.waitForNavigation({ waitUntil: "load" }), page.click(selector)]);
  };
  await page.goto(authorizeUrl, { waitUntil: "load" });
  for (let step = 0; step < 10 && !isCallback(page.url()); step += 1) {
    if (await page.$('form input[name="prompt"][value="login"]')) {
      steps.push("login");
      await page.fill('input[name="login"]', login);
      await page.fill('input[name="password"]', "any-password");
      await submit('form:has(input[name="prompt"][value="login"]) button[type="submit"]');
    } else if (await page.$('form input[name="prompt"][value="consent"]')) {
      steps.push("consent");
      await submit('form:has(input[name="prompt"][value="consent"]) button[type="submit"]');
    } else {
      throw new Error(`unexpected page ${page.url()} (neither login nor consent form)`);
    }
  }
  if (!isCallback(page.url())) throw new Error(`did not reach /oauth/callback, stuck at ${page.url()}`);
  clearTimeout(deadline);
  await finish({ final_url: page.url(), status, body_text: await bodyText(), steps }, 0);
} catch (err) {
  clearTimeout(deadline);
  await fail(String(err?.message ?? err).split("\n")[0]);
}
