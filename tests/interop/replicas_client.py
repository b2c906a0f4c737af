"""A 2026-07-28 (stateless) MCP client on the Python `mcp` SDK that sends
each request to another gateway replica, used by the integration tests of
several replicas with one config.

Usage: replicas_client.py URL_A URL_B
Holds one SDK client per replica and alternates between them on every
request: a `tools/list` cursor walk (page n+1 asked of the replica that did
not issue page n's cursor), calls, a resource read, and a
`subscriptions/listen` stream on B for the py upstream's status resource
while the update is caused through A (py's `touch_all` tells every upstream
session subscribed to it, one per replica). Prints one JSON object.
"""

import asyncio
import json
import sys

from mcp import Client
from mcp.shared.subscriptions import ResourceUpdated


async def next_event(sub, kind):
    async for event in sub:
        if isinstance(event, kind):
            return event


async def main() -> None:
    a_url, b_url = sys.argv[1], sys.argv[2]
    out: dict = {}
    async with Client(a_url) as a, Client(b_url) as b:
        replicas = [a, b]
        out["protocol_versions"] = [a.protocol_version, b.protocol_version]
        names, cursor, pages = [], None, 0
        while True:
            page = await replicas[pages % 2].list_tools(cursor=cursor, cache_mode="refresh")
            pages += 1
            names += [t.name for t in page.tools]
            cursor = page.next_cursor
            if not cursor or pages > 100:
                break
        out["tools"], out["pages"] = names, pages
        echoes = []
        for i in range(4):
            result = await replicas[i % 2].call_tool("py__echo", {"message": f"hop {i}"})
            echoes.append(result.content[0].text)
        out["echoes"] = echoes
        resources = await a.list_resources()
        uri = next(str(r.uri) for r in resources.resources if str(r.uri).endswith("py://status"))
        out["uri"] = uri
        read = await b.read_resource(uri)
        out["read"] = read.contents[0].text

        async with b.listen(resource_subscriptions=[uri]) as sub:
            out["honored_resources"] = list(sub.honored.resource_subscriptions or [])
            told = await a.call_tool("py__touch_all", {"uri": "py://status"})
            out["told"] = told.content[0].text
            try:
                updated = await asyncio.wait_for(next_event(sub, ResourceUpdated), timeout=20)
                out["updated"] = updated.uri
            except TimeoutError:
                out["updated"] = None
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
