"""An MCP server (Python SDK, stdio) that misbehaves on purpose, for dispatch-mcp's client tests.

Usage: misbehaving.py [normal|hang|garbage]
  normal   tools: slow (progress), crash (dies mid-call), ask_color (elicitation),
           add_tool (changes its tool list), starts (how often it was started)
  hang     reads stdin and never answers: the handshake never finishes
  garbage  prints lines that are not JSON-RPC on stdout, then serves like normal

STARTS_FILE (env): a file whose number is raised by one at every start.
SLOW_FIRST_START (env): see below.
"""

import asyncio
import os
import sys

from pydantic import BaseModel

mode = sys.argv[1] if len(sys.argv) > 1 else "normal"

starts_file = os.environ.get("STARTS_FILE")
if starts_file:
    try:
        with open(starts_file) as f:
            n = int(f.read().strip() or "0")
    except FileNotFoundError:
        n = 0
    with open(starts_file, "w") as f:
        f.write(str(n + 1))

# SLOW_FIRST_START (env): a marker file; the first start (no marker yet) creates it and waits
# 11 s before reading anything, like a server that is slow to import on a loaded machine.
_marker = os.environ.get("SLOW_FIRST_START")
if _marker and not os.path.exists(_marker):
    open(_marker, "w").close()
    import time
    time.sleep(11)

if mode == "hang":
    for _ in sys.stdin:
        pass
    sys.exit(0)

if mode == "garbage":
    print("this is not JSON-RPC", flush=True)
    print("{\"neither\": is this}", flush=True)

from typing import Annotated  # noqa: E402

from mcp.server import MCPServer  # noqa: E402
from mcp.server.mcpserver import Context, ElicitationResult  # noqa: E402
from mcp.server.mcpserver.resolve import Elicit, Resolve  # noqa: E402

server = MCPServer("misbehaving")


@server.tool()
async def slow(seconds: float, ctx: Context) -> str:
    """Sleep for `seconds`, reporting progress four times."""
    try:
        for i in range(4):
            await ctx.report_progress(i + 1, 4, f"step {i + 1}")
            await asyncio.sleep(seconds / 4)
    except BaseException:
        # notifications/cancelled arrived: say so where the test can see it (CANCELS_FILE).
        cancels = os.environ.get("CANCELS_FILE")
        if cancels:
            with open(cancels, "a") as f:
                f.write("slow cancelled\n")
        raise
    return f"slept {seconds} s"


@server.tool()
async def flood(count: int, ctx: Context) -> str:
    """Send `count` progress notifications as fast as possible."""
    for i in range(count):
        await ctx.report_progress(i + 1, count)
    return f"sent {count}"


@server.tool()
async def crash() -> str:
    """Die half-way through the call."""
    await asyncio.sleep(0.3)
    print("about to crash on purpose", file=sys.stderr, flush=True)
    os._exit(3)


class Color(BaseModel):
    color: str


def which_color() -> Elicit[Color]:
    # A resolver: the SDK asks the client the way the negotiated protocol wants it
    # (elicitation/create mid-call up to 2025-11-25, an input_required result after).
    return Elicit("Which colour do you like?", Color)


@server.tool()
async def ask_color(answer: Annotated[ElicitationResult[Color], Resolve(which_color)]) -> str:
    """Ask the user for a colour."""
    if answer.action == "accept" and answer.data is not None:
        return f"the user chose {answer.data.color}"
    return f"the user answered: {answer.action}"


@server.tool()
async def add_tool(ctx: Context) -> str:
    """Add a tool named late and tell the client."""

    def late() -> str:
        """A tool that exists only after add_tool ran."""
        return "late and present"

    server.add_tool(late)
    # 2026-07-28: to subscriptions/listen streams; older revisions: a notification on the session.
    await ctx.notify_tools_changed()
    try:
        await ctx.session.send_tool_list_changed()
    except Exception:  # no back-channel on 2026-07-28
        pass
    return "added late"


@server.tool()
def write(path: str, text: str) -> str:
    """Write `text` to `path`; say what happened."""
    try:
        with open(path, "w") as f:
            f.write(text)
        return "written"
    except OSError as e:
        return f"refused: {e.strerror}"


@server.tool()
def read(path: str) -> str:
    """Read `path`; say what happened."""
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        return f"refused: {e.strerror}"


@server.tool()
def cwd() -> str:
    """The directory the server runs in."""
    return os.getcwd()


@server.tool()
def starts() -> str:
    """How often this server was started."""
    if not starts_file:
        return "unknown"
    with open(starts_file) as f:
        return f.read().strip()


server.run()
