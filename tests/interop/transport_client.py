"""A legacy-era MCP client on the Python `mcp` SDK that reaches the gateway
over the 2024-11-05 HTTP+SSE transport or over stdio, for the integration
tests of those downstream transports.

Usage: transport_client.py sse URL
       transport_client.py stdio MCPMUX_EXE CONFIG
Lists tools, calls alpha__echo, asks the example upstream to add a tool,
waits for the tools/list_changed notification, lists tools again, and
prints one JSON object with what it saw.
"""

import asyncio
import json
import sys

from mcp import Client, StdioServerParameters
from mcp.client.sse import sse_client


async def main() -> None:
    mode = sys.argv[1]
    if mode == "sse":
        server = sse_client(sys.argv[2])
    else:
        server = StdioServerParameters(command=sys.argv[2], args=["stdio", "--config", sys.argv[3]])

    changed = asyncio.Event()
    seen: list[str] = []

    async def on_message(message) -> None:
        if isinstance(message, Exception):
            return
        method = getattr(message, "method", None)
        if method:
            seen.append(method)
        if method == "notifications/tools/list_changed":
            changed.set()

    out: dict = {}
    async with Client(server, mode="legacy", message_handler=on_message) as client:
        out["tools_before"] = [t.name for t in (await client.list_tools()).tools]
        echo = await client.call_tool("alpha__echo", {"message": "hello"})
        out["echo"] = echo.content[0].text
        await client.call_tool("alpha__add_tools", {"count": 1, "prefix": "late_"})
        await asyncio.wait_for(changed.wait(), timeout=20)
        out["notification"] = "notifications/tools/list_changed"
        out["tools_after"] = [t.name for t in (await client.list_tools(cache_mode="refresh")).tools]
    out["seen"] = seen
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
