"""Drive tooldispatch's MCP server with the official Python SDK client (PyPI `mcp`).

Usage: py_client.py WORKDIR (--url URL | -- SERVER_COMMAND...)

Runs one scenario and prints one JSON object for the Rust test to assert on: the tools and
their hints, calculate, read_files, a confirmation approved and one declined through
elicitation, progress notifications, and a cancelled long call. The connection uses the
SDK's default mode ("auto"): it probes server/discover first and falls back to initialize.
"""

import json
import os
import sys
import time

import anyio
import mcp
from mcp import types

# What the elicitation callback answers next ("accept" or "decline"), and what it was asked.
answer = {"next": "accept"}
asked = []


async def on_elicit(context, params):
    asked.append(params.message)
    fields = (getattr(params, "requested_schema", None) or {}).get("properties", {})
    if "answer_1" in fields:  # ask_user's question
        return types.ElicitResult(action="accept", content={"answer_1": "blue"})
    if answer["next"] == "accept":
        return types.ElicitResult(action="accept", content={})
    return types.ElicitResult(action="decline")


ASK_USER = {
    "questions": [{"question": "Which colour?", "options": ["red", "blue"]}],
    "state": {"objective": "pick a colour", "completed": [], "next_steps": ["paint"]},
}


def summary(result):
    texts = [c.text for c in result.content if getattr(c, "type", "") == "text"]
    meta = result.meta or {}
    return {
        "is_error": bool(result.is_error),
        "text": "\n".join(texts),
        "status": meta.get("tooldispatch/status"),
        "session": meta.get("tooldispatch/session"),
    }


async def main():
    workdir = sys.argv[1]
    if sys.argv[2] == "--url":
        server = sys.argv[3]
    else:
        command = sys.argv[3:]
        server = mcp.StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    out = {}
    async with mcp.Client(server, elicitation_callback=on_elicit) as client:
        out["protocol_version"] = str(client.protocol_version)
        listed = await client.list_tools()
        out["tools"] = {
            t.name: (t.annotations.model_dump(by_alias=True, exclude_none=True) if t.annotations else {})
            for t in listed.tools
        }
        out["calculate"] = summary(await client.call_tool("calculate", {"expressions": ["6*7"]}))
        out["read_files"] = summary(
            await client.call_tool("read_files", {"files": [{"path": "hello.txt"}]})
        )

        answer["next"] = "accept"
        out["write_approved"] = summary(
            await client.call_tool("edit_file", {"path": "approved.txt", "content": "written after approval\n"})
        )
        answer["next"] = "decline"
        out["write_declined"] = summary(
            await client.call_tool("edit_file", {"path": "declined.txt", "content": "must not exist\n"})
        )
        out["approved_exists"] = os.path.exists(os.path.join(workdir, "approved.txt"))
        out["declined_exists"] = os.path.exists(os.path.join(workdir, "declined.txt"))

        # Progress: a command that prints three lines, a moment apart.
        answer["next"] = "accept"
        progress = []

        async def on_progress(value, total, message):
            progress.append({"progress": value, "message": message})

        out["progress_call"] = summary(
            await client.call_tool(
                "run_command",
                {"argv": ["sh", "-c", "for i in 1 2 3; do echo line $i; sleep 0.3; done"]},
                progress_callback=on_progress,
            )
        )
        out["progress"] = progress

        # Cancellation: the client gives up after 1.5 s and sends notifications/cancelled; the
        # command would have written late.txt after 4 s.
        started = time.monotonic()
        try:
            await client.call_tool(
                "run_command",
                {"argv": ["sh", "-c", "sleep 4; echo late > late.txt"]},
                read_timeout_seconds=1.5,
            )
            out["cancel_raised"] = False
        except Exception as e:  # the SDK raises on its timeout
            out["cancel_raised"] = True
            out["cancel_error"] = type(e).__name__
        out["cancel_seconds"] = round(time.monotonic() - started, 2)
        await anyio.sleep(4.5)
        out["late_exists"] = os.path.exists(os.path.join(workdir, "late.txt"))
        # The session still works after a cancelled call.
        out["after_cancel"] = summary(await client.call_tool("calculate", {"expressions": ["1+1"]}))
        out["ask_user"] = summary(await client.call_tool("ask_user", ASK_USER))
    # A client without elicitation: nobody can approve, and ask_user cannot reach the user.
    async with mcp.Client(server) as plain:
        out["plain_write"] = summary(
            await plain.call_tool("edit_file", {"path": "plain.txt", "content": "must not exist\n"})
        )
        out["plain_exists"] = os.path.exists(os.path.join(workdir, "plain.txt"))
        out["plain_ask"] = summary(await plain.call_tool("ask_user", ASK_USER))
    out["asked"] = asked
    print(json.dumps(out))


anyio.run(main)
