"""Calls per second through an MCP server over stdio: `tooldispatch mcp` against the Python
SDK's own server (`MCPServer` from PyPI `mcp` 2.x, formerly FastMCP), both driven by the same
Python SDK client, one call at a time, for a trivial tool.

The tool: tooldispatch's built-in `calculate` with one expression; the Python server gets a
`calculate` tool with the same arguments and answer shape (it returns the expression's value
without parsing it, so the Python side does strictly less work).

    python3 bench/peers/mcp_server.py [--bin target/release/tooldispatch] [--calls 2000] [--reps 3] [--mode auto|legacy]

`--mode auto` (the default) is what the client does on its own: the Python server speaks
2026-07-28 (no handshake, metadata on every request), tooldispatch 2025-11-25. `--mode legacy`
makes both use the initialize handshake and 2025-11-25, so only the servers differ.

Prints one JSON line per server and rep, then a summary line with the medians and the ratio.
Run `cargo build --release -p tooldispatch` first (the default --bin).
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import anyio
import mcp

# The Python server, started as `python3 THIS_FILE --python-server`.
if len(sys.argv) > 1 and sys.argv[1] == "--python-server":
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("python-baseline")

    @server.tool()
    def calculate(expressions: list[str]) -> dict[str, str]:
        """Evaluate arithmetic expressions (the benchmark's trivial tool)."""
        return {e: "2" for e in expressions}

    server.run("stdio")
    sys.exit(0)


async def measure(params, calls, mode):
    async with mcp.Client(params, mode=mode) as client:
        version = str(client.protocol_version)
        args = {"expressions": ["1+1"]}
        for _ in range(50):  # warm-up: the first calls of a session do one-time work
            await client.call_tool("calculate", args)
        start = time.perf_counter()
        for _ in range(calls):
            result = await client.call_tool("calculate", args)
        elapsed = time.perf_counter() - start
        assert not result.is_error, result
        return calls / elapsed, version


def main():
    # bench/ (this file is bench/peers/mcp_server.py); the build is in ../target.
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default=os.path.join(here, "..", "target", "release", "tooldispatch"))
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--mode", choices=["auto", "legacy"], default="auto")
    args = parser.parse_args()
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(dir=os.path.join(here, "..", "target")) as work:
        env["XDG_DATA_HOME"] = os.path.join(work, "data")
        env["XDG_CONFIG_HOME"] = os.path.join(work, "config")
        servers = {
            "tooldispatch": mcp.StdioServerParameters(
                command=args.bin, args=["mcp", "--workdir", work, "--store", "memory:"], env=env
            ),
            "python-mcpserver": mcp.StdioServerParameters(
                command=sys.executable, args=[os.path.abspath(__file__), "--python-server"], env=env
            ),
        }
        rates = {name: [] for name in servers}
        for rep in range(args.reps):
            for name, params in servers.items():
                rate, version = anyio.run(measure, params, args.calls, args.mode)
                rates[name].append(rate)
                print(json.dumps({"server": name, "rep": rep, "calls": args.calls,
                                  "calls_per_s": round(rate, 1), "protocol": version}), flush=True)
    medians = {name: statistics.median(r) for name, r in rates.items()}
    print(json.dumps({
        "mode": args.mode,
        "summary": {name: round(m, 1) for name, m in medians.items()},
        "ratio_tooldispatch_over_python": round(medians["tooldispatch"] / medians["python-mcpserver"], 2),
    }))


if __name__ == "__main__":
    main()
