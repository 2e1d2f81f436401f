"""An agent loop: an OpenAI-compatible model decides, the tooldispatch daemon runs the tools.

Usage: python3 agent.py "your question"   (env: OPENAI_BASE_URL, OPENAI_API_KEY, MODEL, TOOLDISPATCH_URL)
"""
import getpass, json, os, sys, urllib.error, urllib.request
from openai import OpenAI

DAEMON = os.environ.get("TOOLDISPATCH_URL", "http://127.0.0.1:7878")


def daemon(method, path, body=None):
    """One request to the daemon: (parsed JSON, response headers)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(DAEMON + path, data, {"Content-Type": "application/json"}, method=method)
    try:
        with urllib.request.urlopen(request) as response:
            return json.load(response), response.headers
    except urllib.error.HTTPError as e:  # the daemon says what went wrong and what to do
        sys.exit(f"tooldispatch {method} {path}: {e.code} {e.read().decode()}")


def ask(question):
    """Put one question to the person at the terminal; a number picks an option."""
    print(question["question"])
    if question.get("detail"):
        print(question["detail"])
    for n, option in enumerate(question.get("options", []), 1):
        print(f"  {n}. {option}")
    return getpass.getpass("(hidden) > ") if question.get("secret") else input("> ")


model = OpenAI()  # reads OPENAI_BASE_URL and OPENAI_API_KEY
session = daemon("POST", "/v1/sessions", {})[0]["id"]
tools = daemon("GET", f"/v1/sessions/{session}/tools?provider=openai")[0]
messages = [
    {"role": "system", "content": "You are a helpful assistant.\n\n" + tools["turn_context"]},
    {"role": "user", "content": " ".join(sys.argv[1:]) or input("You: ")},
]
run = "turn-1"  # one run per user turn: dedupe and turn-wide approvals belong to it

while True:
    reply = model.chat.completions.create(model=os.environ["MODEL"], messages=messages, tools=tools["tools"])
    message = reply.choices[0].message.model_dump(exclude_none=True)
    messages.append(message)
    if not message.get("tool_calls"):
        print(message.get("content", ""))
        break
    # tooldispatch runs the calls and returns one tool message per call, in call order.
    results, headers = daemon("POST", f"/v1/sessions/{session}/rounds?provider=openai&run={run}", message)
    messages += results
    # ask_user parked the run: answer its questions, and the answers become that call's result.
    while task := headers.get("x-tooldispatch-pending"):
        pending = daemon("GET", f"/v1/sessions/{session}/pending")[0]["tasks"]
        questions = next(t["questions"] for t in pending if t["task"] == task)
        answers = {"task": task, "answers": [ask(q) for q in questions]}
        results, headers = daemon("POST", f"/v1/sessions/{session}/answers?provider=openai", answers)
        messages += results
