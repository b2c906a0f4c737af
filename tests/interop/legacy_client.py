"""A legacy-era (2025) MCP client built on the Python `mcp` SDK, used by the
integration tests as a real downstream peer of the gateway.

Usage: legacy_client.py URL TOOL ARGUMENTS_JSON
Connects with the initialize handshake, walks every page of tools/list,
calls TOOL with ARGUMENTS_JSON (collecting progress), reads the first
resource, and prints one JSON object describing what it saw.
"""

import asyncio
import json
import sys

from mcp import Client


async def main() -> None:
    url, tool, arguments = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    out: dict = {}
    async with Client(url, mode="legacy") as client:
        out["protocol_version"] = client.protocol_version
        names, cursor, pages = [], None, 0
        while True:
            page = await client.list_tools(cursor=cursor)
            names += [t.name for t in page.tools]
            pages += 1
            cursor = page.next_cursor
            if not cursor:
                break
        out["tools"], out["pages"] = names, pages

        progress: list[float] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append(value)

        result = await client.call_tool(tool, arguments, progress_callback=on_progress)
        out["call"] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        out["progress"] = progress

        resources = await client.list_resources()
        out["resources"] = [r.uri for r in resources.resources]
        if resources.resources:
            read = await client.read_resource(resources.resources[0].uri)
            out["read"] = read.model_dump(mode="json", by_alias=True, exclude_none=True)
        prompts = await client.list_prompts()
        out["prompts"] = [p.name for p in prompts.prompts]
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
