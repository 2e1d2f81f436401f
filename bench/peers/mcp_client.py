"""An MCP tool called through tooldispatch vs the same server called directly.

Both sides call `echo` of @modelcontextprotocol/server-everything (stdio) one call at a time:

  direct       the Python MCP SDK client (PyPI `mcp`) calls the server itself;
  tooldispatch `tooldispatch serve` (its release build, `--store memory:`, `--approve all`)
               has the same server configured as [mcp.servers.everything], and each call is
               one HTTP round of run_tool(name=mcp__everything__echo) — checked, gated,
               deduped (each round is a new run, so nothing is), run and committed.

A third line runs the same HTTP rounds with the built-in `calculate`, so the cost of the HTTP
client, the daemon and the engine can be told apart from the MCP call itself.

Prints one JSON line per side (calls per second, median µs per call) and their ratio.

    cargo build --release
    (cd e2e && npm ci)
    python3 bench/peers/mcp_client.py --calls 300
"""

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVER = os.path.join(ROOT, "e2e/node_modules/.bin/mcp-server-everything")
TOOLDISPATCH = os.path.join(ROOT, "target/release/tooldispatch")


async def direct(calls: int) -> list[float]:
    params = StdioServerParameters(command=SERVER, args=[])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for i in range(10):
                await session.call_tool("echo", {"message": f"warm {i}"})
            times = []
            for i in range(calls):
                start = time.perf_counter()
                result = await session.call_tool("echo", {"message": f"m{i}"})
                times.append(time.perf_counter() - start)
                assert f"m{i}" in result.content[0].text
            return times


def post(url: str, body: dict) -> list:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read())


def call(name: str, args: dict, n: int) -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"c{n}", "type": "function",
             "function": {"name": "run_tool", "arguments": json.dumps({"name": name, "args": args})}}
        ],
    }


def through_tooldispatch(calls: int, tool: str = "mcp__everything__echo") -> list[float]:
    with tempfile.TemporaryDirectory(dir=os.path.join(ROOT, "target")) as dir:
        config = os.path.join(dir, "config.toml")
        with open(config, "w") as f:
            f.write(f'[mcp.servers.everything]\ncommand = "{SERVER}"\n')
        daemon = subprocess.Popen(
            [TOOLDISPATCH, "serve", "--addr", "127.0.0.1:0", "--store", "memory:",
             "--approve", "all", "--config", config, "--workdir", dir],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        try:
            base = daemon.stdout.readline().strip().removeprefix("listening on ")
            rounds = f"{base}/v1/sessions/bench/rounds?provider=openai"
            schema = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "s", "type": "function", "function": {
                    "name": "find_tools", "arguments": json.dumps({"query": f"select:{tool}"})}}]}
            post(rounds, schema)
            def args(i):
                if tool == "calculate":
                    return {"expressions": [f"{i}+1"]}
                return {"message": f"m{i}"}

            for i in range(10):
                post(f"{rounds}&run=warm{i}", call(tool, args(i), i))
            times = []
            for i in range(calls):
                start = time.perf_counter()
                out = post(f"{rounds}&run=r{i}", call(tool, args(i), i))
                times.append(time.perf_counter() - start)
                expected = str(i + 1) if tool == "calculate" else f"m{i}"
                assert expected in out[0]["content"], out
            return times
        finally:
            daemon.terminate()
            daemon.wait()


def summary(name: str, times: list[float]) -> dict:
    line = {
        "side": name,
        "calls": len(times),
        "calls_per_s": round(len(times) / sum(times), 1),
        "median_us": round(statistics.median(times) * 1e6, 1),
    }
    print(json.dumps(line))
    return line


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    for path in (SERVER, TOOLDISPATCH):
        if not os.path.exists(path):
            sys.exit(f"{path} is missing: run `cargo build --release` and `(cd e2e && npm ci)` first")
    a = summary("direct (Python SDK client)", asyncio.run(direct(args.calls)))
    b = summary("through tooldispatch serve", through_tooldispatch(args.calls))
    # The same HTTP round with a built-in tool: what the HTTP client, the daemon and the
    # engine cost without MCP.
    c = summary("tooldispatch serve, calculate (no MCP)", through_tooldispatch(args.calls, "calculate"))
    print(json.dumps({
        "ratio_calls_per_s": round(b["calls_per_s"] / a["calls_per_s"], 3),
        "mcp_us_in_tooldispatch": round(b["median_us"] - c["median_us"], 1),
    }))


if __name__ == "__main__":
    main()
