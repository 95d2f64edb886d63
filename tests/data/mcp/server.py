"""A real MCP server (Python `mcp` package, stdio) for the integration tests."""
import os
import time

from mcp.server.fastmcp import Context, FastMCP

server = FastMCP("test-tools")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    return text


@server.tool()
def fail(reason: str) -> str:
    """Always fails with the given reason."""
    raise ValueError(reason)


@server.tool()
def slow(seconds: float, started: str = "") -> str:
    """Sleep, then answer. Creates the file `started` first (when given), so
    a test knows the call is running."""
    if started:
        open(started, "w").close()
    time.sleep(seconds)
    return "done"


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def environ(name: str) -> str:
    """A variable of the server's environment ("" when unset)."""
    return os.environ.get(name, "")


@server.tool()
def idempotency_key(ctx: Context) -> str:
    """The idempotency key the client sent in the request's _meta."""
    meta = ctx.request_context.meta
    extra = (getattr(meta, "model_extra", None) or {}) if meta is not None else {}
    return str(extra.get("structured-agents/idempotency-key", ""))


def late() -> str:
    """A tool that exists only after `grow` was called."""
    return "late"


# `--marker PATH`: `grow` creates PATH, and a server started while it exists
# offers `late` from the start (a tool set that follows outside state).
MARKER = None


@server.tool()
async def grow(ctx: Context) -> str:
    """Adds the tool `late` and tells the client that the tool list changed."""
    if MARKER:
        open(MARKER, "w").close()
    server.add_tool(late)
    await ctx.session.send_tool_list_changed()
    return "grown"


if __name__ == "__main__":
    import sys

    if len(sys.argv) == 3 and sys.argv[1] == "--marker":
        MARKER = sys.argv[2]
        if os.path.exists(MARKER):
            server.add_tool(late)

    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.settings.host = "127.0.0.1"
        server.settings.port = int(sys.argv[2])
        server.run(transport="streamable-http")
    else:
        server.run()
