"""A real MCP host on the Python `mcp` SDK that logs its user in through the
gateway's OAuth authorization server, used by the integration tests.

Usage: oauth_host.py --url GATEWAY_MCP_URL --login LOGIN --node NODE_EXE
           [--call NAME [--arguments JSON]] [--mode legacy|auto|VERSION]
           [--consent allow|deny] [--timeout SECONDS]

The SDK's OAuthClientProvider (in-memory token storage) discovers the
authorization server from the 401, registers the host by RFC 7591 dynamic
registration (client_name "mcpmux test host", token_endpoint_auth_method
"none", grant_types authorization_code and refresh_token, redirect URI
http://127.0.0.1:PORT/callback: a small server this script runs on port 0)
and sends the user to the authorization URL: the redirect handler runs
`NODE_EXE browser_login_cli.mjs AUTHORIZE_URL LOGIN CALLBACK_URL` (a headless
Chromium that logs in on the OpenID provider's pages and consents on the
gateway's page), and the callback handler hands the SDK the code, state and
iss of the redirect the browser reached. Then it connects over Streamable
HTTP (mode: legacy by default), lists tools and calls --call with
--arguments (a JSON object).

Prints one JSON line {"ok": true, "tools": [names], "result": CallToolResult
or null, "client_id": ..., "login_pages": [pages seen by the logins, in order,
e.g. "login", "consent", "gateway-consent"], "authorizations": N (browser
logins)} and exits 0; on failure {"ok": false, "error": message,
"login_pages": [...], "authorizations": N} and exits 1. Logging goes to stderr.
"""

import argparse
import asyncio
import json
import logging
import os
import sys
from urllib.parse import parse_qs, urlparse

from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider, OAuthFlowError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

HERE = os.path.dirname(os.path.abspath(__file__))
log = logging.getLogger("oauth_host")


class MemoryStorage:
    """TokenStorage kept in memory for the life of the process."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


async def start_callback_server() -> tuple[asyncio.AbstractServer, str]:
    """The redirect URI: answers a small HTML page to the browser."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await reader.readline()
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass
            path = request_line.split(b" ")[1].decode() if request_line.count(b" ") >= 2 else "/"
            found = urlparse(path).path == "/callback"
            body = (b"<!doctype html><html><head><title>mcpmux test host</title></head><body>"
                    + (b"You can close this window." if found else b"not found") + b"</body></html>")
            status = b"200 OK" if found else b"404 Not Found"
            writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: text/html; charset=utf-8\r\n"
                         + b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
            await writer.drain()
        except Exception:  # a browser that went away: nothing to answer
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/callback"


class BrowserLogin:
    """The SDK's redirect and callback handlers, backed by browser_login_cli.mjs."""

    def __init__(self, node: str, login: str, callback_url: str, consent: str, timeout: float) -> None:
        self.node = node
        self.login = login
        self.callback_url = callback_url
        self.consent = consent
        self.timeout = timeout
        self.reached: str | None = None
        self.pages: list[list[str]] = []

    async def redirect_handler(self, authorization_url: str) -> None:
        log.info("login at %s", authorization_url)
        self.reached = None
        process = await asyncio.create_subprocess_exec(
            self.node, os.path.join(HERE, "browser_login_cli.mjs"), authorization_url, self.login,
            self.callback_url, "--consent", self.consent, "--timeout", str(self.timeout),
            stdout=asyncio.subprocess.PIPE,
        )
        stdout, _ = await process.communicate()
        lines = stdout.decode().strip().splitlines()
        if not lines:
            raise OAuthFlowError(f"browser_login_cli.mjs printed nothing (exit {process.returncode})")
        out = json.loads(lines[-1])
        self.pages.append(out.get("pages") or [])
        if "error" in out:
            raise OAuthFlowError(
                f"browser login failed: {out['error']} (at {out.get('url')}, status {out.get('status')}: "
                f"{str(out.get('body_text', ''))[:300]})"
            )
        self.reached = out["url"]

    async def callback_handler(self) -> AuthorizationCodeResult:
        if not self.reached:
            raise OAuthFlowError("the browser did not reach the redirect URI")
        query = {k: v[0] for k, v in parse_qs(urlparse(self.reached).query).items()}
        if "error" in query:
            description = f": {query['error_description']}" if "error_description" in query else ""
            raise OAuthFlowError(f"authorization refused: {query['error']}{description}")
        if "code" not in query:
            raise OAuthFlowError(f"no code in the redirect {self.reached}")
        return AuthorizationCodeResult(code=query["code"], state=query.get("state"), iss=query.get("iss"))


def innermost(error: BaseException) -> BaseException:
    """The first leaf of an exception group (task groups wrap what failed)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--login", required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--call")
    parser.add_argument("--arguments", default="{}")
    parser.add_argument("--mode", default="legacy")
    parser.add_argument("--consent", default="allow", choices=["allow", "deny"])
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args()
    arguments = json.loads(args.arguments)

    callback_server, callback_url = await start_callback_server()
    browser = BrowserLogin(args.node, args.login, callback_url, args.consent, args.timeout)
    storage = MemoryStorage()
    provider = OAuthClientProvider(
        server_url=args.url,
        client_metadata=OAuthClientMetadata(
            client_name="mcpmux test host",
            redirect_uris=[callback_url],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=browser.redirect_handler,
        callback_handler=browser.callback_handler,
    )
    out: dict = {}
    try:
        async with create_mcp_http_client(auth=provider) as http:
            async with Client(streamable_http_client(args.url, http_client=http), mode=args.mode) as client:
                tools = [tool.name for tool in (await client.list_tools()).tools]
                result = None
                if args.call:
                    called = await client.call_tool(args.call, arguments)
                    result = called.model_dump(mode="json", by_alias=True, exclude_none=True)
        out = {"ok": True, "tools": tools, "result": result}
    except BaseException as error:  # noqa: BLE001 - reported, not raised
        if isinstance(error, (KeyboardInterrupt, SystemExit)):
            raise
        leaf = innermost(error)
        log.exception("failed")
        out = {"ok": False, "error": f"{type(leaf).__name__}: {leaf}"}
    finally:
        callback_server.close()
    out["client_id"] = storage.client_info.client_id if storage.client_info else None
    out["login_pages"] = [page for pages in browser.pages for page in pages]
    out["authorizations"] = len(browser.pages)
    print(json.dumps(out), flush=True)
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="oauth_host.py: %(name)s: %(message)s")
    sys.exit(asyncio.run(main()))
