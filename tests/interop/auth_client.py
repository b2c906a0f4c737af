"""An MCP client on the Python `mcp` SDK against a gateway that requires
authentication, used by the integration tests.

Usage: auth_client.py URL TOKEN MODE     (MODE: legacy or 2026-07-28)
First, with no credential, it does what the SDK's OAuth client does on a
401: takes resource_metadata from WWW-Authenticate, walks the SDK's list of
discovery URLs and validates the RFC 9728 document with the SDK's model.
Then it connects with `Authorization: Bearer TOKEN`, lists tools and calls
alpha__echo. Prints one JSON object with what it saw.
"""

import asyncio
import json
import sys

import httpx2
from mcp import Client
from mcp.client.auth.utils import (
    build_protected_resource_metadata_discovery_urls,
    extract_resource_metadata_from_www_auth,
    handle_protected_resource_response,
)
from mcp.client.streamable_http import streamable_http_client


async def discover(url: str) -> dict:
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "auth-probe", "version": "0"}}}
    async with httpx2.AsyncClient() as http:
        refused = await http.post(url, json=init, headers={"Accept": "application/json, text/event-stream"})
        found = extract_resource_metadata_from_www_auth(refused)
        for candidate in build_protected_resource_metadata_discovery_urls(found, url):
            metadata = await handle_protected_resource_response(await http.get(candidate))
            if metadata is not None:
                return {"status": refused.status_code, "resource_metadata": found, "from": candidate,
                        "metadata": metadata.model_dump(mode="json", exclude_none=True)}
    return {"status": refused.status_code, "resource_metadata": found, "metadata": None}


async def main() -> None:
    url, token, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    out = {"discovery": await discover(url)}
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
    async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        out["protocol_version"] = client.protocol_version
        out["tools"] = [t.name for t in (await client.list_tools()).tools]
        echo = await client.call_tool("alpha__echo", {"message": "with a token"})
        out["echo"] = echo.content[0].text
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
