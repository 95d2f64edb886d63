"""The Python `mcp` client against the daemon's /mcp (Streamable HTTP).

Usage: bundle_client.py URL TOKEN. Lists the tools, calls `greeter` and
`broken`, prints `LISTED` and waits (up to 20 s) for
notifications/tools/list_changed, then lists again. Prints one JSON object
per line; the last one holds everything.

Runs with the pinned SDK (mcp 1.x, ci/requirements.txt) and the current major
(mcp 2.x, ci/requirements-current.txt): 2.x brings its own HTTP client
(httpx2), snake_case fields and unwrapped notifications."""
import asyncio
import json
import sys

import mcp.types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

try:
    import httpx2 as httpx  # mcp 2.x
except ImportError:
    import httpx  # mcp 1.x

url, token = sys.argv[1], sys.argv[2]
changed = asyncio.Event()


def field(obj, snake, camel):
    """A result field under its 2.x name, else its 1.x one."""
    return getattr(obj, snake) if hasattr(obj, snake) else getattr(obj, camel)


async def on_message(message):
    # 1.x wraps notifications in a ServerNotification root model.
    if isinstance(getattr(message, "root", message), types.ToolListChangedNotification):
        changed.set()


def texts(result):
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def main():
    out = {}
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30, read=60)) as http:
        # 1.x yields (read, write, get_session_id), 2.x (read, write).
        async with streamable_http_client(url, http_client=http) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write, message_handler=on_message) as session:
                await session.initialize()
                listed = await session.list_tools()
                out["tools"] = sorted(t.name for t in listed.tools)
                out["schema"] = next(
                    field(t, "input_schema", "inputSchema") for t in listed.tools if t.name == "greeter"
                )
                ok = await session.call_tool("greeter", {"input": "hello"})
                out["ok"] = {"error": field(ok, "is_error", "isError"), "text": texts(ok)}
                bad = await session.call_tool("broken", {"input": "hello"})
                out["bad"] = {"error": field(bad, "is_error", "isError"), "text": texts(bad)}
                missing = await session.call_tool("greeter", {})
                out["missing_input"] = {"error": field(missing, "is_error", "isError"), "text": texts(missing)}
                print("LISTED", flush=True)
                await asyncio.wait_for(changed.wait(), timeout=20)
                again = await session.list_tools()
                out["tools_after"] = sorted(t.name for t in again.tools)
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        out["without_token"] = response.status_code
    print(json.dumps(out), flush=True)


asyncio.run(main())
