"""The same measurement as `tooldispatch bench agent`, for the OpenAI Agents SDK's Runner.

Both loops talk to one scripted OpenAI Chat Completions server on 127.0.0.1, the one
`tooldispatch bench agent --serve-model` runs in a process of its own: for --turns requests it
answers with --calls calculate calls (through run_tool for tooldispatch, directly for the SDK,
whose tools array has no run_tool), then with `answered R/E`, where R counts the tool results it
was sent that hold the right value. The SDK runs `Runner.run` (not streamed) with an
`OpenAIChatCompletionsModel` on an `AsyncOpenAI` client pointed at that server, tracing off, and
one function tool that adds the two numbers of "a+b"; tooldispatch runs its agent loop on a
`memory:` store with every call allowed (`tooldispatch bench agent --model-url`).

Measured per run of --turns + 1 model requests, --reps runs after max(1, reps/10) warm-up runs:
  turn_us_median       the run's wall time / its model requests (median over runs)
  model_rtt_us_median  the model's own time: a bare POST to the same server with the same HTTP
                       library (the openai package's own httpx client
                       here, reqwest there), answered with the same tool-call
                       reply, read to the end and not parsed; --turns + 1 of them before each run
  overhead_us_median   turn_us_median - model_rtt_us_median: the loop's own time per model turn
                       (building the request, reading the reply, running the tools, keeping the
                       history)
Then one line with ratio = SDK overhead / tooldispatch overhead (above 1: the SDK spends more).

    python3 -m venv /tmp/sdk && /tmp/sdk/bin/pip install openai-agents==0.24.0
    cargo build --release -p tooldispatch
    /tmp/sdk/bin/python bench/peers/agents_sdk.py --bin target/release/tooldispatch
"""

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time

from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from agents.items import ToolCallOutputItem
from openai import AsyncOpenAI, DefaultAsyncHttpxClient


@function_tool
def calculate(expressions: list[str]) -> str:
    """Add the two whole numbers of each expression "a+b"; a JSON object of expression to sum."""
    out = {}
    for expr in expressions:
        a, b = expr.split("+")
        out[expr] = str(int(a) + int(b))
    return json.dumps(out, separators=(",", ":"))


async def measure_sdk(url: str, turns: int, calls: int, reps: int) -> dict:
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=url, api_key="bench-no-key", max_retries=0)
    model = OpenAIChatCompletionsModel(model="bench-scripted", openai_client=client)
    agent = Agent(
        name="bench",
        instructions="You are an agent. Use the tools to do the task.",
        tools=[calculate],
        model=model,
    )
    # The HTTP client class AsyncOpenAI itself uses, with its defaults (keep-alive pool).
    http = DefaultAsyncHttpxClient()
    bare = json.dumps({
        "model": "bench-scripted",
        "stream": False,
        "messages": [{"role": "user", "content": "ping"}],
        "tools": [{"type": "function", "function": {"name": "calculate"}}],
    })
    requests = turns + 1
    expected = f"answered {turns * calls}/{turns * calls}"
    warmup = max(1, reps // 10)
    turn_us, rtt_us, problem = [], [], None
    for rep in range(warmup + reps):
        for _ in range(requests):
            started = time.perf_counter()
            response = await http.post(
                f"{url}/chat/completions", content=bare, headers={"content-type": "application/json"}
            )
            await response.aread()
            elapsed = time.perf_counter() - started
            response.raise_for_status()
            if rep >= warmup:
                rtt_us.append(elapsed * 1e6)
        started = time.perf_counter()
        result = await Runner.run(agent, "Add the numbers the tools are asked for.", max_turns=requests)
        elapsed = time.perf_counter() - started
        outputs = [item for item in result.new_items if isinstance(item, ToolCallOutputItem)]
        if (result.final_output != expected or len(outputs) != turns * calls) and problem is None:
            problem = f"run {rep} ended {result.final_output!r} with {len(outputs)} tool outputs; expected {expected!r}"
        if rep >= warmup:
            turn_us.append(elapsed * 1e6 / requests)
    await http.aclose()
    await client.close()
    turn = statistics.median(turn_us)
    rtt = statistics.median(rtt_us)
    return {
        "bench": "agent",
        "peer": "openai-agents",
        "turns": turns,
        "calls": calls,
        "reps": reps,
        "model_requests": requests,
        "turn_us_median": round(turn, 2),
        "model_rtt_us_median": round(rtt, 2),
        "overhead_us_median": round(turn - rtt, 2),
        "answered": problem is None,
        "problem": problem,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True, help="the tooldispatch binary (release build)")
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--calls", type=int, default=1)
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    size = ["--turns", str(args.turns), "--calls", str(args.calls)]
    server = subprocess.Popen(
        [args.bin, "bench", "agent", "--serve-model", *size],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = json.loads(server.stdout.readline())["model_url"]
        sdk = asyncio.run(measure_sdk(url, args.turns, args.calls, args.reps))
        print(json.dumps(sdk), flush=True)
        ours = subprocess.run(
            [args.bin, "bench", "agent", "--model-url", url, *size, "--reps", str(args.reps)],
            capture_output=True,
            text=True,
        )
        if ours.returncode != 0:
            sys.exit(f"tooldispatch bench agent failed ({ours.returncode}): {ours.stderr}{ours.stdout}")
        td = json.loads(ours.stdout.strip().splitlines()[-1])
        print(json.dumps(td), flush=True)
    finally:
        server.stdin.close()
        server.wait(timeout=10)
    print(json.dumps({
        "bench": "agent",
        "turns": args.turns,
        "calls": args.calls,
        # Above 1: the SDK's loop spends that many times tooldispatch's time per model turn.
        "ratio": round(sdk["overhead_us_median"] / td["overhead_us_median"], 2),
        "turn_ratio": round(sdk["turn_us_median"] / td["turn_us_median"], 2),
        "answered": sdk["answered"] and td["answered"],
    }))
    if not (sdk["answered"] and td["answered"]):
        sys.exit(1)


if __name__ == "__main__":
    main()
