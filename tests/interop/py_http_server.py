"""A remote (HTTP) MCP server built on the Python `mcp` SDK, used by the
integration tests as a real upstream peer of the gateway.

Usage: py_http_server.py [--port N] [--transport streamable-http|sse] [--name NAME]
                         [--private-read-ttl-ms MS]

Binds 127.0.0.1 only (port 0 = ephemeral). Once it accepts connections it
prints exactly one line, `LISTENING <port>`, to stdout; all logging goes to
stderr.

  streamable-http  POST/GET/DELETE /mcp, stateful sessions (Mcp-Session-Id is
                   issued at initialize; an unknown id answers HTTP 404, which
                   is what a restarted server looks like to the gateway).
  sse              legacy 2024-11-05 HTTP+SSE: GET /sse opens the stream and
                   announces `/messages/?session_id=...` in an `endpoint` event.

Capabilities: tools (listChanged), resources (subscribe), logging.
Tools: echo, slow (progress), whoami (Authorization header), add_tool
(registers a tool and notifies tools/list_changed), touch (notifies
resources/updated), touch_all (notifies resources/updated on every session
subscribed to the URI, e.g. the sessions of several gateway replicas).
Resource: py://status ("ok").

With --private-read-ttl-ms, every resources/read result carries
`ttlMs: MS, cacheScope: private` (2026-07-28 caching hints), and one more
resource, py://counted, reads as "read N", N counting the reads it served.

Notifications sent by add_tool and touch ride the response stream of the
tools/call that caused them (related to that request), so they reach the
client deterministically whether or not it has a GET stream open.
"""

import argparse
import asyncio
import logging
import socket
import sys

import mcp.types as types
import uvicorn
from mcp.server.caching import CacheHint
from mcp.server.lowlevel import NotificationOptions
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.sse import SseServerTransport
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.routing import Mount, Route

log = logging.getLogger("py_http_server")


def build_server(name: str, private_read_ttl_ms: int | None = None) -> MCPServer:
    hints = None
    if private_read_ttl_ms is not None:
        hints = {"resources/read": CacheHint(ttl_ms=private_read_ttl_ms, scope="private")}
    app = MCPServer(name, version="1.0.0", cache_hints=hints)
    subscribed: set[str] = set()  # URIs clients asked to be told about
    sessions: dict[str, dict] = {}  # URI -> {Mcp-Session-Id: a ServerSession of it}

    def session_key(ctx) -> str:
        request = getattr(ctx, "request", None)
        headers = getattr(request, "headers", None) or {}
        return headers.get("mcp-session-id") or str(id(ctx.session))

    @app.tool(structured_output=False)
    def echo(message: str) -> str:
        """Return the message unchanged."""
        return message

    @app.tool(structured_output=False)
    async def slow(ctx: Context, steps: int = 3, interval_ms: int = 100) -> str:
        """Sleep `steps` times, reporting progress after each step."""
        for i in range(1, steps + 1):
            await asyncio.sleep(interval_ms / 1000)
            # A no-op unless the caller sent a progressToken.
            await ctx.report_progress(i, steps)
        return f"done after {steps} steps"

    @app.tool(structured_output=False)
    def whoami(ctx: Context) -> str:
        """Return the Authorization header of the HTTP request carrying this call."""
        # The transports attach the Starlette Request to every message; for
        # sse that is the POST to /messages/, for streamable-http the POST to /mcp.
        headers = ctx.headers or {}
        return headers.get("authorization") or "none"

    @app.tool(structured_output=False)
    async def add_tool(ctx: Context, name: str) -> str:
        """Register a trivial tool called `name` and announce tools/list_changed."""

        def added() -> str:
            return f"{name} ok"

        app.add_tool(added, name=name, description=f"Added at run time: {name}", structured_output=False)
        await ctx.session.send_notification(
            types.ToolListChangedNotification(), related_request_id=ctx.request_context.request_id
        )
        return f"added {name}"

    @app.tool(structured_output=False)
    async def touch(ctx: Context, uri: str) -> str:
        """Send notifications/resources/updated for `uri` on this session."""
        await ctx.session.send_notification(
            types.ResourceUpdatedNotification(params=types.ResourceUpdatedNotificationParams(uri=uri)),
            related_request_id=ctx.request_context.request_id,
        )
        return f"touched {uri}"

    @app.tool(structured_output=False)
    async def touch_all(uri: str) -> str:
        """Send notifications/resources/updated for `uri` to every session subscribed to it."""
        told = 0
        for key, session in list(sessions.get(uri, {}).items()):
            try:
                await session.send_resource_updated(uri)
                told += 1
            except Exception:  # a session that ended
                sessions[uri].pop(key, None)
        return f"told {told}"

    @app.resource("py://status", name="status", mime_type="text/plain")
    def status() -> str:
        return "ok"

    if private_read_ttl_ms is not None:
        reads = [0]

        @app.resource("py://counted", name="counted", mime_type="text/plain")
        def counted() -> str:
            reads[0] += 1
            return f"read {reads[0]}"

    # MCPServer has no API for subscribe, unsubscribe or logging/setLevel;
    # register them on its low-level Server. Registering a handler is also
    # what makes the SDK advertise resources.subscribe and logging.
    low = app._lowlevel_server

    async def on_subscribe(ctx, params: types.SubscribeRequestParams) -> types.EmptyResult:
        subscribed.add(str(params.uri))
        sessions.setdefault(str(params.uri), {})[session_key(ctx)] = ctx.session
        log.info("subscribed %s (now %s)", params.uri, sorted(subscribed))
        return types.EmptyResult()

    async def on_unsubscribe(ctx, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        subscribed.discard(str(params.uri))
        sessions.get(str(params.uri), {}).pop(session_key(ctx), None)
        log.info("unsubscribed %s (now %s)", params.uri, sorted(subscribed))
        return types.EmptyResult()

    async def on_set_level(ctx, params: types.SetLevelRequestParams) -> types.EmptyResult:
        log.info("client set log level %s", params.level)
        return types.EmptyResult()

    low.add_request_handler("resources/subscribe", types.SubscribeRequestParams, on_subscribe)
    low.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, on_unsubscribe)
    low.add_request_handler("logging/setLevel", types.SetLevelRequestParams, on_set_level)

    # The transports build the initialize result from
    # create_initialization_options() with no arguments, which advertises
    # listChanged=false; pin tools.listChanged=true.
    base_options = low.create_initialization_options
    low.create_initialization_options = lambda *a, **kw: base_options(NotificationOptions(tools_changed=True))
    return app


def sse_app(app: MCPServer) -> Starlette:
    """GET /sse + POST /messages/, like MCPServer.sse_app() but with /sse as a
    raw ASGI endpoint: the SDK's version sends a second, empty response after
    the event stream ends, which logs a RuntimeError when we shut down with a
    stream open."""
    low = app._lowlevel_server
    sse = SseServerTransport(
        "/messages/",
        security_settings=TransportSecuritySettings(  # the SDK's defaults for a 127.0.0.1 bind
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*"],
        ),
    )

    class SseStream:  # a class instance, so Starlette routes it as ASGI, not as a request handler
        async def __call__(self, scope, receive, send) -> None:
            async with sse.connect_sse(scope, receive, send) as (read_stream, write_stream):
                await low.run(read_stream, write_stream, low.create_initialization_options())

    return Starlette(
        routes=[Route("/sse", endpoint=SseStream(), methods=["GET"]), Mount("/messages/", app=sse.handle_post_message)]
    )


async def serve(app: MCPServer, transport: str, port: int) -> None:
    if transport == "sse":
        asgi = sse_app(app)
    else:
        asgi = app.streamable_http_app(streamable_http_path="/mcp", stateless_http=False)

    # Bind ourselves so port 0 works and we know the real port; SO_REUSEADDR
    # lets a restarted server take the same port while old sockets linger.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    bound = sock.getsockname()[1]

    # log_config=None keeps uvicorn off stdout (its default access log
    # handler writes there); our stderr handler catches its records.
    config = uvicorn.Config(asgi, log_config=None, access_log=False, lifespan="on", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)

    async def announce() -> None:
        while not server.started:
            if server.should_exit:
                return
            await asyncio.sleep(0.01)
        log.info("%s server %r listening on 127.0.0.1:%d", transport, app.name, bound)
        print(f"LISTENING {bound}", flush=True)

    announcer = asyncio.create_task(announce())
    try:
        await server.serve(sockets=[sock])
    finally:
        announcer.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description="MCP test server (Python mcp SDK) over HTTP.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--transport", choices=["streamable-http", "sse"], default="streamable-http")
    parser.add_argument("--name", default="py")
    parser.add_argument("--private-read-ttl-ms", type=int, default=None)
    args = parser.parse_args()
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    asyncio.run(serve(build_server(args.name, args.private_read_ttl_ms), args.transport, args.port))


if __name__ == "__main__":
    main()
