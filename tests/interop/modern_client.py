"""A 2026-07-28 (stateless) MCP client on the Python `mcp` SDK, used by the
integration tests as a real modern downstream peer of the gateway.

Usage: modern_client.py URL RESOURCE_URI
Negotiates the era itself (server/discover), lists every tool page, calls
everything__echo, reads RESOURCE_URI, gets local__greeting, then opens a
subscriptions/listen stream for tool-list changes and RESOURCE_URI, makes
server-everything send a resource update and the example upstream add a
tool, and prints one JSON object with what it saw.
"""

import asyncio
import json
import sys

from mcp import Client
from mcp.shared.subscriptions import ResourceUpdated, ToolsListChanged


async def next_event(sub, kind):
    async for event in sub:
        if isinstance(event, kind):
            return event


async def main() -> None:
    url, uri = sys.argv[1], sys.argv[2]
    out: dict = {}
    async with Client(url) as client:
        out["protocol_version"] = client.protocol_version
        names, cursor = [], None
        while True:
            page = await client.list_tools(cursor=cursor)
            names += [t.name for t in page.tools]
            cursor = page.next_cursor
            if not cursor:
                break
        out["tools"] = names
        echo = await client.call_tool("everything__echo", {"message": "modern"})
        out["echo"] = echo.content[0].text
        read = await client.read_resource(uri)
        out["read_uri"] = str(read.contents[0].uri)
        prompt = await client.get_prompt("local__greeting", {"name": "Ada"})
        out["prompt"] = prompt.messages[0].content.text

        async with client.listen(tools_list_changed=True, resource_subscriptions=[uri]) as sub:
            out["honored_resources"] = list(sub.honored.resource_subscriptions or [])
            out["honored_tools"] = bool(sub.honored.tools_list_changed)
            await client.call_tool("everything__toggle-subscriber-updates", {})
            updated = await asyncio.wait_for(next_event(sub, ResourceUpdated), timeout=20)
            out["updated"] = updated.uri
            await client.call_tool("local__add_tools", {"count": 1, "prefix": "modern_"})
            await asyncio.wait_for(next_event(sub, ToolsListChanged), timeout=20)
            out["tools_changed"] = True
        tools = await client.list_tools(cache_mode="refresh")
        out["tools_after"] = [t.name for t in tools.tools]
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
