// Drives a user's login in a real browser (headless Chromium, the Debian
// package, via playwright-core) for the OAuth tests: from an authorization
// URL through oauth_provider.mjs's login and consent pages and the gateway's
// own consent page until the browser is sent to the client's redirect URI.
//
//   launchBrowser() -> {context, close()}: a persistent Chromium context on
//     a fresh temporary profile (removed by close()), the same flags as
//     oauth_login.mjs; requests to any host other than 127.0.0.1, localhost
//     or [::1] are blocked. Keep one context for a whole process so the
//     provider's session cookie is reused by a later login.
//   browserLogin(context, authorizeUrl, login, reached, options) ->
//     {url, status, pages}: opens authorizeUrl in a new page and, page by
//     page, signs in as `login` on the provider's login page (any password),
//     presses Continue on the provider's consent page and presses Allow (or
//     Deny, options.consent = "deny") on the gateway's consent page, until the
//     main frame navigates to a URL for which reached(url) is true (also when
//     it gets there through redirects, and whether or not anything answers
//     there). url is that URL (code, state or error in its query); status
//     the HTTP status of the last main-frame response; pages the pages seen
//     in order: "login", "consent" (the provider's), "gateway-consent". A
//     page that is none of these, or a timeout (options.timeoutMs, default
//     30 s), throws an Error whose `details` is {url, status, pages,
//     body_text}.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

export const LOOPBACK = new Set(["127.0.0.1", "localhost", "[::1]"]);
const CHROMIUM_ARGS = [
  "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
];

export async function launchBrowser({ timeoutMs = 30000 } = {}) {
  const profile = mkdtempSync(join(tmpdir(), "mcpmux-browser-login-"));
  let context;
  try {
    context = await chromium.launchPersistentContext(profile, {
      executablePath: "/usr/bin/chromium",
      headless: true,
      args: CHROMIUM_ARGS,
      timeout: timeoutMs,
      // The tests' HTTPS servers (client ID metadata documents) use self-signed certificates.
      ignoreHTTPSErrors: true,
    });
    // Only loopback traffic (the provider's pages @import a web font).
    await context.route("**/*", (route) => {
      const url = URL.parse(route.request().url());
      return url && LOOPBACK.has(url.hostname) ? route.continue() : route.abort("blockedbyclient");
    });
  } catch (err) {
    await context?.close().catch(() => {});
    rmSync(profile, { recursive: true, force: true });
    throw err;
  }
  return {
    context,
    async close() {
      await context.close().catch(() => {});
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

const PROVIDER_LOGIN = 'form:has(input[name="prompt"][value="login"])';
const PROVIDER_CONSENT = 'form:has(input[name="prompt"][value="consent"])';
const GATEWAY_DECISION = (value) => `form button[type="submit"][name="decision"][value="${value}"]`;

export async function browserLogin(context, authorizeUrl, login, reached, options = {}) {
  const { timeoutMs = 30000, consent = "allow", password = "any-password" } = options;
  if (!["allow", "deny"].includes(consent)) throw new Error(`consent must be allow or deny, not ${consent}`);
  const page = await context.newPage();
  page.setDefaultTimeout(timeoutMs);
  const pages = [];
  let status = null; // of the last main-frame document response
  let arrived = null; // the first main-frame navigation that reached the redirect URI
  let onArrival;
  const arrival = new Promise((resolve) => { onArrival = resolve; });
  page.on("request", (request) => {
    // Every hop of a redirect chain is a request of its own.
    if (!arrived && request.isNavigationRequest() && request.frame() === page.mainFrame() && reached(request.url())) {
      arrived = request.url();
      onArrival();
    }
  });
  page.on("response", (response) => {
    if (response.request().isNavigationRequest() && response.frame() === page.mainFrame()) status = response.status();
  });

  const bodyText = async () => {
    try {
      return (await page.evaluate(() => document.body?.innerText ?? "")).slice(0, 2000);
    } catch {
      return "";
    }
  };
  const failure = async (message) => {
    const err = new Error(message);
    err.details = { url: page.url(), status, pages, body_text: await bodyText() };
    return err;
  };
  // Resolves once the navigation has settled, or once it has reached the
  // redirect URI (which may not load: nothing need listen there). The last
  // navigation is kept: the page is closed only once it has settled too,
  // since closing a page under a click that still waits for its
  // navigation can leave page.close() waiting forever.
  let lastNavigation = Promise.resolve();
  const settle = async (navigation) => {
    lastNavigation = navigation.catch(() => {});
    await Promise.race([
      navigation.catch((err) => {
        if (!arrived) throw err;
      }),
      arrival,
    ]);
  };
  const bounded = (promise, ms) => Promise.race([
    promise,
    new Promise((resolve) => { setTimeout(resolve, ms).unref(); }),
  ]);

  const deadline = Date.now() + timeoutMs;
  try {
    await settle(page.goto(authorizeUrl, { waitUntil: "load" }));
    for (let step = 0; !arrived; step += 1) {
      if (step >= 10 || Date.now() > deadline) throw await failure(`did not reach the redirect URI, stuck at ${page.url()}`);
      let submit;
      if (await page.$(PROVIDER_LOGIN)) {
        pages.push("login");
        await page.fill(`${PROVIDER_LOGIN} input[name="login"]`, login);
        await page.fill(`${PROVIDER_LOGIN} input[name="password"]`, password);
        submit = `${PROVIDER_LOGIN} button[type="submit"]`;
      } else if (await page.$(PROVIDER_CONSENT)) {
        pages.push("consent");
        submit = `${PROVIDER_CONSENT} button[type="submit"]`;
      } else if (await page.$(GATEWAY_DECISION("allow"))) {
        pages.push("gateway-consent");
        submit = GATEWAY_DECISION(consent);
      } else {
        throw await failure(`unexpected page ${page.url()} (status ${status}): neither a login nor a consent form`);
      }
      // The navigation that follows a submit includes all its redirects.
      await settle(Promise.all([page.waitForNavigation({ waitUntil: "load" }), page.click(submit)]));
    }
    return { url: arrived, status, pages };
  } catch (err) {
    if (err.details) throw err;
    const wrapped = await failure(String(err?.message ?? err).split("\n")[0]);
    throw wrapped;
  } finally {
    await bounded(lastNavigation, 5000);
    await bounded(page.close().catch(() => {}), 5000);
  }
}
