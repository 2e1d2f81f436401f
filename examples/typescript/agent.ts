// An agent loop: an OpenAI-compatible model decides, the tooldispatch daemon runs the tools.
// Node 20, fetch only. Usage: node agent.js "your question"
// (env: OPENAI_BASE_URL, OPENAI_API_KEY, MODEL, TOOLDISPATCH_URL)
import * as readline from "node:readline";

/** The two servers, and what to do when one cannot be reached. */
type Server = { name: string; url: string; fix: string; headers?: Record<string, string> };
const DAEMON: Server = {
  name: "the tooldispatch daemon",
  url: process.env.TOOLDISPATCH_URL ?? "http://127.0.0.1:7878",
  fix: "start it with `cargo run --release -- serve`, or set TOOLDISPATCH_URL to where it listens",
};
const MODEL_SERVER: Server = {
  name: "the model",
  url: process.env.OPENAI_BASE_URL ?? "https://api.openai.com/v1",
  fix: "check OPENAI_BASE_URL and that the model server is running",
  headers: { Authorization: `Bearer ${process.env.OPENAI_API_KEY ?? ""}` },
};

type Message = { role: string; content?: string | null; tool_calls?: unknown[]; [key: string]: unknown };
type Question = { question: string; detail?: string; options?: string[]; secret?: boolean };
type Pending = { tasks: { task: string; questions: Question[] }[] };

/** A JSON request (POST when there is a body): the parsed answer and its headers. A failure
 * throws one line saying what failed and what to do (the servers' errors say it). */
async function request<T>(server: Server, path: string, body?: unknown): Promise<[T, Headers]> {
  const response = await fetch(server.url + path, {
    method: body === undefined ? "GET" : "POST",
    headers: { "Content-Type": "application/json", ...server.headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  }).catch((error) => {
    const why = error.cause?.code ?? error.cause?.message ?? error.message; // ECONNREFUSED
    throw new Error(`cannot reach ${server.name} at ${server.url} (${why}): ${server.fix}`);
  });
  if (!response.ok) {
    const text = await response.text();
    let message = text;
    try {
      message = JSON.parse(text).error.message ?? text; // {"error": {"message": ...}}
    } catch {}
    throw new Error(`${server.name} answered ${response.status} to ${server.url + path}: ${message}`);
  }
  return [(await response.json()) as T, response.headers];
}
const daemon = <T>(path: string, body?: unknown) => request<T>(DAEMON, path, body);

let terminal: readline.Interface | undefined;
let lines: AsyncIterator<string> | undefined;
/** One line from the terminal (piped lines wait in the iterator until asked for). */
async function line(prompt: string): Promise<string> {
  terminal ??= readline.createInterface({ input: process.stdin });
  lines ??= terminal[Symbol.asyncIterator]();
  process.stdout.write(prompt);
  return (await lines.next()).value ?? "";
}

/** Put one question to the person at the terminal; a number picks an option. */
async function ask(q: Question): Promise<string> {
  console.log([q.question, q.detail, ...(q.options ?? []).map((o, n) => `  ${n + 1}. ${o}`)].filter(Boolean).join("\n"));
  return line(q.secret ? "(shown as you type) > " : "> ");
}

async function main(): Promise<void> {
  const [{ id: session }] = await daemon<{ id: string }>("/v1/sessions", {});
  const [{ tools, turn_context }] = await daemon<{ tools: unknown[]; turn_context: string }>(
    `/v1/sessions/${session}/tools?provider=openai`,
  );
  const messages: Message[] = [
    { role: "system", content: `You are a helpful assistant.\n\n${turn_context}` },
    { role: "user", content: process.argv.slice(2).join(" ") || (await line("You: ")) },
  ];
  const run = "turn-1"; // one run per user turn: dedupe and turn-wide approvals belong to it

  for (;;) {
    const [completion] = await request<{ choices: { message: Message }[] }>(MODEL_SERVER, "/chat/completions", {
      model: process.env.MODEL,
      messages,
      tools,
    });
    const message = completion.choices[0].message;
    messages.push(message);
    if (!message.tool_calls?.length) {
      console.log(message.content ?? "");
      return;
    }
    // tooldispatch runs the calls and returns one tool message per call, in call order.
    let [results, headers] = await daemon<Message[]>(`/v1/sessions/${session}/rounds?provider=openai&run=${run}`, message);
    messages.push(...results);
    // ask_user parked the run: answer its questions, and the answers become that call's result.
    let task: string | null;
    while ((task = headers.get("x-tooldispatch-pending"))) {
      const [pending] = await daemon<Pending>(`/v1/sessions/${session}/pending`);
      const answers: string[] = [];
      for (const q of pending.tasks.find((t) => t.task === task)?.questions ?? []) answers.push(await ask(q));
      [results, headers] = await daemon<Message[]>(`/v1/sessions/${session}/answers?provider=openai`, { task, answers });
      messages.push(...results);
    }
  }
}

main()
  .catch((error: unknown) => {
    // One line, no stack trace: the message says what failed and what to do.
    console.error(String(error instanceof Error ? error.message : error).replace(/\s+/g, " "));
    process.exitCode = 1;
  })
  .finally(() => terminal?.close());
