"""The same measurement as `tooldispatch bench overhead`, for LangGraph's ToolNode.

One round = one AIMessage with n calls of a no-op tool, run by a graph whose only node is the
ToolNode (how ToolNode runs in an agent; current LangGraph will not invoke it outside a graph).
LangGraph validates arguments with the tool's pydantic schema and runs the calls, nothing more:
no dedupe, no confirm gate, no store. Prints one JSON line per n, with the same field names.

    python3 -m venv /tmp/lg && /tmp/lg/bin/pip install langgraph
    /tmp/lg/bin/python bench/peers/langgraph_toolnode.py --n 1,4,16,64
"""

import argparse
import json
import statistics
import time

from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode


@tool
def bench_noop(i: int, note: str = "") -> str:
    """A tool that returns at once."""
    return f"ok {i}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", default="1,4,16,64")
    parser.add_argument("--reps", type=int, default=300)
    args = parser.parse_args()
    graph = StateGraph(MessagesState)
    graph.add_node("tools", ToolNode([bench_noop]))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    node = graph.compile()
    for n in [int(x) for x in args.n.split(",")]:
        times = []
        for rep in range(args.reps + args.reps // 10):
            calls = [
                {"name": "bench_noop", "args": {"i": i, "note": "bench"}, "id": f"call_{i}", "type": "tool_call"}
                for i in range(n)
            ]
            message = AIMessage(content="", tool_calls=calls)
            started = time.perf_counter()
            out = node.invoke({"messages": [message]})
            elapsed = time.perf_counter() - started
            assert [m.tool_call_id for m in out["messages"][1:]] == [f"call_{i}" for i in range(n)]
            if rep >= args.reps // 10:
                times.append(elapsed * 1e6)
        median = statistics.median(times)
        print(json.dumps({
            "bench": "overhead",
            "peer": "langgraph-toolnode",
            "n": n,
            "reps": args.reps,
            "round_us_median": round(median, 2),
            "per_call_us_median": round(median / n, 2),
        }))


if __name__ == "__main__":
    main()
