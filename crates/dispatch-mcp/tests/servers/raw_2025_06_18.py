"""A minimal MCP server written against the 2025-06-18 revision by hand (no SDK), on stdio.

It knows `initialize`, `ping`, `tools/list` and `tools/call` (`add`; `cwd`, where it runs; and
`env`, the value of one environment variable), answers every
other request with "method not found" (so a client's newer discovery handshake falls back to
`initialize`), and ignores notifications.
"""

import json
import sys

import os

# SLOW_FIRST_START (env): a marker file; the first start (no marker yet) creates it and waits
# 11 s before reading anything, like a server that is slow to import on a loaded machine.
_marker = os.environ.get("SLOW_FIRST_START")
if _marker and not os.path.exists(_marker):
    open(_marker, "w").close()
    import time
    time.sleep(11)

TOOLS = [{
    "name": "add",
    "description": "Add two integers.",
    "inputSchema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    "required": ["a", "b"]},
}, {
    "name": "cwd",
    "description": "The directory the server runs in.",
    "inputSchema": {"type": "object", "properties": {}},
}, {
    "name": "env",
    "description": "The value of one environment variable.",
    "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
}]


def answer(id, result=None, error=None):
    message = {"jsonrpc": "2.0", "id": id}
    if error is not None:
        message["error"] = error
    else:
        message["result"] = result
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    line = line.strip()
    if not line:
        continue
    message = json.loads(line)
    if "id" not in message or "method" not in message:
        continue  # a notification, or a response to us
    method, id = message["method"], message["id"]
    params = message.get("params") or {}
    if method == "initialize":
        answer(id, {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                    "serverInfo": {"name": "raw-2025-06-18", "version": "1"}})
    elif method == "ping":
        answer(id, {})
    elif method == "tools/list":
        answer(id, {"tools": TOOLS})
    elif method == "tools/call" and params.get("name") == "add":
        args = params.get("arguments") or {}
        answer(id, {"content": [{"type": "text", "text": str(args["a"] + args["b"])}]})
    elif method == "tools/call" and params.get("name") == "cwd":
        answer(id, {"content": [{"type": "text", "text": os.getcwd()}]})
    elif method == "tools/call" and params.get("name") == "env":
        value = os.environ.get((params.get("arguments") or {}).get("name", ""), "(not set)")
        answer(id, {"content": [{"type": "text", "text": value}]})
    else:
        answer(id, error={"code": -32601, "message": f"method not found: {method}"})
