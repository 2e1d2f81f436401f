#!/usr/bin/env python3
"""Per-round cost of client tools in `tooldispatch replay`: a large client-tools file
(~760 KB, 200 declarations) against a small one (1 declaration).

Each replay line is one reply calling a client tool with valid arguments (so every round
finds, checks and hands back a client call). The per-round cost is the difference between a
replay of N lines and a replay of 1 line, divided by N - 1, so process start-up, store set-up
and reading the file once cancel out. Prints one JSON line per file size.

    cargo build --release -p tooldispatch
    python3 bench/client_tools.py [--bin target/release/tooldispatch] [--lines 400] [--reps 5]
"""

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time


def declaration(i: int) -> dict:
    """One client tool of about 3.8 KB: a described object with a dozen typed fields."""
    props = {
        f"field_{j}": {
            "type": "string",
            "description": f"Field {j} of tool {i}: " + "words to describe it " * 9,
            "maxLength": 200,
        }
        for j in range(12)
    }
    props["path"] = {"type": "string", "pattern": "^[^\\u0000]+$"}
    return {
        "name": f"tool_{i}",
        "description": f"Client tool number {i}. " + "It does something the caller runs. " * 8,
        "parameters": {"type": "object", "properties": props, "required": ["path"]},
    }


def replay_lines(n: int) -> str:
    lines = []
    for k in range(n):
        call = {"id": f"c{k}", "type": "function",
                "function": {"name": "tool_0", "arguments": json.dumps({"path": f"f{k}.txt"})}}
        lines.append(json.dumps({"role": "assistant", "content": None, "tool_calls": [call]}))
    return "\n".join(lines) + "\n"


def timed(cmd: list) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default="target/release/tooldispatch")
    parser.add_argument("--lines", type=int, default=400)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for label, count in (("small", 1), ("large", 200)):
            path = os.path.join(tmp, f"{label}.json")
            with open(path, "w") as f:
                json.dump([declaration(i) for i in range(count)], f)
            files[label] = path
        one = os.path.join(tmp, "one.jsonl")
        many = os.path.join(tmp, "many.jsonl")
        with open(one, "w") as f:
            f.write(replay_lines(1))
        with open(many, "w") as f:
            f.write(replay_lines(args.lines))
        work = os.path.join(tmp, "work")
        os.mkdir(work)
        env_home = os.path.join(tmp, "home")
        os.mkdir(env_home)
        os.environ["XDG_DATA_HOME"] = env_home
        os.environ["XDG_CONFIG_HOME"] = env_home
        for label, path in files.items():
            base = [args.bin, "replay", "--workdir", work, "--store", "memory:",
                    "--client-tools", path]
            per_round = []
            for _ in range(args.reps):
                t_one = timed(base[:2] + [one] + base[2:])
                t_many = timed(base[:2] + [many] + base[2:])
                per_round.append((t_many - t_one) / (args.lines - 1) * 1000)
            print(json.dumps({
                "bench": "client_tools_replay",
                "client_tools": label,
                "file_bytes": os.path.getsize(path),
                "lines": args.lines,
                "reps": args.reps,
                "per_round_ms_median": round(statistics.median(per_round), 3),
                "per_round_ms_min": round(min(per_round), 3),
            }))


if __name__ == "__main__":
    main()
