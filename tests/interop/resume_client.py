"""A legacy-era MCP client on the Python `mcp` SDK that calls one tool with a
progress callback, for the test of resumable POST streams: the test puts a
proxy between this client and the gateway that cuts the connection carrying
the answer, and the SDK has to resume the stream with GET + Last-Event-ID
by itself.

Usage: resume_client.py URL TOOL ARGUMENTS_JSON
Prints one JSON object: the call's result and every progress value seen.
"""

import asyncio
import json
import sys

from mcp import Client


async def main() -> None:
    url, tool, arguments = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async with Client(url, mode="legacy") as client:
        result = await client.call_tool(tool, arguments, progress_callback=on_progress)
    out = {
        "call": result.model_dump(mode="json", by_alias=True, exclude_none=True),
        "progress": progress,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
