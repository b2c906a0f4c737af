"""A 2025-era MCP client on the Python `mcp` SDK with sampling and
elicitation callbacks, for the tests of requests an upstream asks of the
client whose call caused them (relayed by the gateway).

Usage: ask_client.py one SERVER PREFIX
         SERVER is a Streamable HTTP URL, `sse:URL` for the legacy HTTP+SSE
         transport, `mcpmux:EXE:CONFIG` for `mcpmux stdio`, or
         `stdio:NODE:SCRIPT` for server-everything run directly. Calls PREFIX + the sampling and the
         elicitation tools and prints what the callbacks saw and the results.
       ask_client.py two URL PREFIX
         Two sessions; A's elicitation is held open while B calls the same
         tool of the same (shared) upstream. Prints what each saw.
       ask_client.py rounds URL PREFIX
         Calls the conformance fixture's two-round elicitation tool (a
         2026-07-28 upstream asking with input_required results), answering
         each step by its message.
       ask_client.py modern-one URL PREFIX
         As `one`, as a 2026-07-28 (stateless) client: the gateway turns the
         2025-era upstream's requests into input_required rounds.
       ask_client.py modern-rounds URL PREFIX
         A 2026-07-28 client calls the 2025-era conformance fixture's
         multi-round and multiple-input tools, answering elicitation,
         sampling and roots; prints every request it saw, in order.
       ask_client.py leave URL PREFIX
         Calls the elicitation tool and leaves (closing its session) while
         the elicitation is still unanswered.
"""

import asyncio
import json
import sys

from mcp import Client, StdioServerParameters, types
from mcp.client.sse import sse_client


def server_of(spec: str):
    if spec.startswith("stdio:"):
        _, node, script = spec.split(":", 2)
        return StdioServerParameters(command=node, args=[script, "stdio"])
    if spec.startswith("mcpmux:"):
        _, exe, config = spec.split(":", 2)
        return StdioServerParameters(command=exe, args=["stdio", "--config", config])
    if spec.startswith("sse:"):
        return sse_client(spec[len("sse:"):])
    return spec


def text_of(result) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "text", None))


class Asked:
    """Callbacks that answer like a host would, and record what they saw."""

    def __init__(self, hold: asyncio.Event | None = None) -> None:
        self.sampling: list[str] = []
        self.elicitation: list[str] = []
        self.hold = hold
        self.asked = asyncio.Event()

    async def sample(self, context, params: types.CreateMessageRequestParams):
        self.sampling.append(params.messages[0].content.text)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="sampled by the test client"),
            model="test-model",
            stop_reason="endTurn",
        )

    async def elicit(self, context, params: types.ElicitRequestParams):
        self.elicitation.append(params.message)
        self.asked.set()
        if self.hold is not None:
            await self.hold.wait()
        return types.ElicitResult(action="accept", content={"name": "Ada Lovelace", "check": True})


def client(server, asked: Asked, mode: str = "legacy") -> Client:
    return Client(
        server,
        mode=mode,
        sampling_callback=asked.sample,
        elicitation_callback=asked.elicit,
    )


async def call_text(c: Client, tool: str, arguments: dict) -> dict:
    try:
        result = await c.call_tool(tool, arguments)
        return {"error": bool(result.is_error), "text": text_of(result)}
    except Exception as e:  # an error answer, as the SDK raises it
        return {"error": True, "text": str(e)}


async def one(server: str, prefix: str, mode: str = "legacy") -> dict:
    asked = Asked()
    async with client(server_of(server), asked, mode) as c:
        out_version = c.protocol_version
        tools = [t.name for t in (await c.list_tools()).tools]
        sampled = await call_text(c, prefix + "trigger-sampling-request", {"prompt": "hello there"})
        elicited = await call_text(c, prefix + "trigger-elicitation-request", {})
    return {
        "protocol_version": out_version,
        "tools": tools,
        "sampled": sampled,
        "elicited": elicited,
        "sampling_seen": asked.sampling,
        "elicitation_seen": asked.elicitation,
    }


async def two(url: str, prefix: str) -> dict:
    hold = asyncio.Event()
    a_asked, b_asked = Asked(hold), Asked()
    tool = prefix + "trigger-elicitation-request"
    async with client(url, a_asked) as a, client(url, b_asked) as b:
        a_call = asyncio.create_task(call_text(a, tool, {}))
        await asyncio.wait_for(a_asked.asked.wait(), timeout=30)
        # A's call is in flight and its elicitation unanswered: B's request
        # of the same shared upstream cannot be told apart from A's.
        b_result = await call_text(b, tool, {})
        hold.set()
        a_result = await asyncio.wait_for(a_call, timeout=30)
    return {
        "a": a_result,
        "b": b_result,
        "a_seen": a_asked.elicitation,
        "b_seen": b_asked.elicitation,
    }


async def rounds(url: str, prefix: str) -> dict:
    seen: list[str] = []

    async def elicit(context, params: types.ElicitRequestParams):
        seen.append(params.message)
        if "name" in params.message:
            return types.ElicitResult(action="accept", content={"name": "Ada"})
        return types.ElicitResult(action="accept", content={"color": "green"})

    async with Client(url, mode="legacy", elicitation_callback=elicit) as c:
        result = await call_text(c, prefix + "test_input_required_result_multi_round", {})
    return {"result": result, "elicitation_seen": seen}


async def modern_rounds(url: str, prefix: str) -> dict:
    seen: list[str] = []

    async def elicit(context, params: types.ElicitRequestParams):
        seen.append("elicitation: " + params.message)
        if "color" in params.message:
            return types.ElicitResult(action="accept", content={"color": "green"})
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async def sample(context, params: types.CreateMessageRequestParams):
        seen.append("sampling: " + params.messages[0].content.text)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="hello from the model"),
            model="test-model",
            stop_reason="endTurn",
        )

    async def roots(context):
        seen.append("roots")
        return types.ListRootsResult(roots=[types.Root(uri="file:///work", name="work")])

    async with Client(
        url,
        elicitation_callback=elicit,
        sampling_callback=sample,
        list_roots_callback=roots,
    ) as c:
        version = c.protocol_version
        multi_round = await call_text(c, prefix + "test_input_required_result_multi_round", {})
        multiple = await call_text(c, prefix + "test_input_required_result_multiple_inputs", {})
    return {
        "protocol_version": version,
        "multi_round": multi_round,
        "multiple_inputs": multiple,
        "seen": seen,
    }


async def leave(url: str, prefix: str) -> dict:
    asked = Asked(asyncio.Event())  # never answers
    async with client(url, asked) as c:
        call = asyncio.create_task(call_text(c, prefix + "trigger-elicitation-request", {}))
        await asyncio.wait_for(asked.asked.wait(), timeout=30)
        call.cancel()
    return {"elicitation_seen": asked.elicitation}


async def main() -> None:
    mode, server, prefix = sys.argv[1], sys.argv[2], sys.argv[3]
    run = {
        "one": one,
        "modern-one": lambda server, prefix: one(server, prefix, "auto"),
        "two": two,
        "rounds": rounds,
        "modern-rounds": modern_rounds,
        "leave": leave,
    }[mode]
    print(json.dumps(await run(server, prefix)))


if __name__ == "__main__":
    asyncio.run(main())
