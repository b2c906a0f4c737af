"""Session-based (2025-era) MCP clients on the Python `mcp` SDK behind a
load balancer, used by the integration tests of several gateway replicas.

Usage: sticky_client.py URL COUNT TOOL
Opens COUNT sessions through URL, each calling TOOL three times, and prints
one JSON line: the session ids the gateway issued. Then waits for a line on
stdin (the test kills a replica meanwhile) and calls TOOL once more on each
session; a session the gateway no longer knows (404, "initialize a new
one") is closed and a new one initialized, as the spec intends, and the
call repeated on it. Prints a second JSON line: per session, the call's
text, whether it had to initialize again, and its session id now.
"""

import asyncio
import contextlib
import json
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError


async def call(client: Client, tool: str, text: str) -> str:
    result = await client.call_tool(tool, {"message": text})
    return result.content[0].text


@contextlib.asynccontextmanager
async def session(url: str, ids: list[str]):
    """One SDK client whose session ids (one per initialize) go to `ids`."""

    async def remember(response: httpx2.Response) -> None:
        sid = response.headers.get("mcp-session-id")
        if sid and (not ids or ids[-1] != sid):
            ids.append(sid)

    async with httpx2.AsyncClient(event_hooks={"response": [remember]}) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
            yield client


async def run(i: int, url: str, tool: str, opened: asyncio.Queue, go: asyncio.Event) -> dict:
    """Session `i`, in a task of its own (an SDK client is closed by the task that opened it)."""
    ids: list[str] = []
    entry: dict = {"reinitialized": False}
    async with session(url, ids) as client:
        for n in range(3):
            assert await call(client, tool, f"{i}.{n}") == f"{i}.{n}"
        await opened.put((i, ids[-1]))
        await go.wait()
        try:
            entry["text"] = await call(client, tool, f"{i}.after")
        except MCPError as e:
            entry["error"] = str(e)
    if "error" in entry:
        entry["reinitialized"] = True
        async with session(url, ids) as client:
            entry["text"] = await call(client, tool, f"{i}.after")
    entry["session"] = ids[-1]
    return entry


async def main() -> None:
    url, count, tool = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    opened: asyncio.Queue = asyncio.Queue()
    go = asyncio.Event()
    tasks = []
    sessions: list = [None] * count
    # One at a time, so a round-robin balancer spreads them evenly.
    for i in range(count):
        tasks.append(asyncio.create_task(run(i, url, tool, opened, go)))
        _, sessions[i] = await opened.get()
    print(json.dumps({"sessions": sessions}), flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    go.set()
    after = [await t for t in tasks]
    print(json.dumps({"after": after}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
