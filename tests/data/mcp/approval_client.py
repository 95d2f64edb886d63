"""The Python `mcp` client calling a bundle whose tool needs approval.

Usage: approval_client.py URL MODE. MODE `approve` or `deny` declares
elicitation and answers the daemon's question that way; `none` declares no
elicitation. Prints one JSON object: the call's result and the questions
asked."""
import asyncio
import json
import sys

import httpx
import mcp.types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

url, mode = sys.argv[1], sys.argv[2]
asked = []


async def on_elicit(context, params):
    asked.append(params.message)
    if mode == "approve":
        return types.ElicitResult(action="accept", content={"approve": True, "reason": ""})
    return types.ElicitResult(action="accept", content={"approve": False, "reason": "not today"})


def texts(result):
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def main():
    callback = None if mode == "none" else on_elicit
    async with httpx.AsyncClient(timeout=httpx.Timeout(30, read=60)) as http:
        async with streamable_http_client(url, http_client=http) as (read, write, _):
            async with ClientSession(read, write, elicitation_callback=callback) as session:
                await session.initialize()
                result = await session.call_tool("bank", {"input": "big transfer"})
    print(json.dumps({"error": result.isError, "text": texts(result), "asked": asked}), flush=True)


asyncio.run(main())
