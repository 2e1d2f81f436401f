"""An agent loop: an OpenAI-compatible model decides, the tooldispatch daemon runs the tools.

Usage: python3 agent.py "your question"   (env: OPENAI_BASE_URL, OPENAI_API_KEY, MODEL, TOOLDISPATCH_URL)
"""
import getpass, json, os, re, sys, urllib.error, urllib.request
import openai

DAEMON = os.environ.get("TOOLDISPATCH_URL", "http://127.0.0.1:7878")
MODEL_URL = os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1")


def daemon(method, path, body=None):
    """One request to the daemon: (parsed JSON, response headers)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(DAEMON + path, data, {"Content-Type": "application/json"}, method=method)
    with urllib.request.urlopen(request) as response:
        return json.load(response), response.headers


def ask(question):
    """Put one question to the person at the terminal; a number picks an option."""
    print(question["question"])
    if question.get("detail"):
        print(question["detail"])
    for n, option in enumerate(question.get("options", []), 1):
        print(f"  {n}. {option}")
    return getpass.getpass("(hidden) > ") if question.get("secret") else input("> ")


def main():
    model = openai.OpenAI(base_url=MODEL_URL)  # reads OPENAI_API_KEY
    session = daemon("POST", "/v1/sessions", {})[0]["id"]
    tools = daemon("GET", f"/v1/sessions/{session}/tools?provider=openai")[0]
    messages = [
        {"role": "system", "content": "You are a helpful assistant.\n\n" + tools["turn_context"]},
        {"role": "user", "content": " ".join(sys.argv[1:]) or input("You: ")},
    ]
    run = "turn-1"  # one run per user turn: dedupe and turn-wide approvals belong to it

    while True:
        reply = model.chat.completions.create(model=os.environ.get("MODEL"), messages=messages, tools=tools["tools"])
        message = reply.choices[0].message.model_dump(exclude_none=True)
        messages.append(message)
        if not message.get("tool_calls"):
            print(message.get("content", ""))
            return
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


def why(error):
    """Why a connection failed, in a few words ("Connection refused")."""
    return re.sub(r"\[Errno -?\d+\] ", "", str(error)) or type(error).__name__


def server_message(body):
    """The message of an error body `{"error": {"message": ...}}` (else the body), on one line."""
    try:
        body = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        pass
    return " ".join(str(body).split())


# A failure ends the run with one line: what failed, and what to do (the servers' errors say it).
try:
    main()
except urllib.error.HTTPError as e:
    sys.exit(f"the tooldispatch daemon answered {e.code} to {e.url}: {server_message(e.read().decode(errors='replace'))}")
except urllib.error.URLError as e:
    sys.exit(f"cannot reach the tooldispatch daemon at {DAEMON} ({why(e.reason)}): "
             "start it with `cargo run --release -- serve`, or set TOOLDISPATCH_URL to where it listens")
except openai.APIStatusError as e:
    sys.exit(f"the model answered {e.status_code} to {e.request.url}: {server_message(e.response.text)}")
except openai.APIConnectionError as e:
    sys.exit(f"cannot reach the model at {MODEL_URL} ({why(e.__cause__ or e)}): "
             "check OPENAI_BASE_URL and that the model server is running")
except openai.OpenAIError as e:  # e.g. no OPENAI_API_KEY
    sys.exit(str(e))
