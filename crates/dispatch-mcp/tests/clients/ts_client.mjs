// Drive tooldispatch's MCP server with the official TypeScript SDK client
// (@modelcontextprotocol/sdk, installed in e2e/node_modules by `npm ci`).
//
// Usage: node ts_client.mjs SDK_DIR WORKDIR (--url URL | -- SERVER_COMMAND...)
//
// The same scenario as py_client.py, printed as one JSON object.

import { existsSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [sdkDir, workdir, mode, ...rest] = process.argv.slice(2);
const sdk = (path) => import(pathToFileURL(join(sdkDir, "dist/esm", path)).href);
const { Client } = await sdk("client/index.js");
const { StdioClientTransport } = await sdk("client/stdio.js");
const { StreamableHTTPClientTransport } = await sdk("client/streamableHttp.js");
const { ElicitRequestSchema } = await sdk("types.js");

const answer = { next: "accept" };
const asked = [];

const client = new Client(
  { name: "tooldispatch-ts-test", version: "1.0.0" },
  { capabilities: { elicitation: {} } },
);
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  asked.push(request.params.message);
  if (request.params.requestedSchema?.properties?.answer_1) {
    return { action: "accept", content: { answer_1: "blue" } }; // ask_user's question
  }
  return answer.next === "accept" ? { action: "accept", content: {} } : { action: "decline" };
});

const connect = (client) =>
  client.connect(
    mode === "--url"
      ? new StreamableHTTPClientTransport(new URL(rest[0]))
      : new StdioClientTransport({ command: rest[0], args: rest.slice(1), env: process.env, stderr: "inherit" }),
  );
await connect(client);
const ASK_USER = {
  questions: [{ question: "Which colour?", options: ["red", "blue"] }],
  state: { objective: "pick a colour", completed: [], next_steps: ["paint"] },
};

const summary = (result) => ({
  is_error: Boolean(result.isError),
  text: result.content.filter((c) => c.type === "text").map((c) => c.text).join("\n"),
  status: result._meta?.["tooldispatch/status"] ?? null,
  session: result._meta?.["tooldispatch/session"] ?? null,
});
const callOn = async (c, name, args, options) => summary(await c.callTool({ name, arguments: args }, undefined, options));
const call = (name, args, options) => callOn(client, name, args, options);

const out = { protocol_version: client.getServerVersion() ? "initialized" : null };
const listed = await client.listTools();
out.tools = Object.fromEntries(listed.tools.map((t) => [t.name, t.annotations ?? {}]));
out.calculate = await call("calculate", { expressions: ["6*7"] });
out.read_files = await call("read_files", { files: [{ path: "hello.txt" }] });

answer.next = "accept";
out.write_approved = await call("edit_file", { path: "approved.txt", content: "written after approval\n" });
answer.next = "decline";
out.write_declined = await call("edit_file", { path: "declined.txt", content: "must not exist\n" });
out.approved_exists = existsSync(join(workdir, "approved.txt"));
out.declined_exists = existsSync(join(workdir, "declined.txt"));

answer.next = "accept";
const progress = [];
out.progress_call = await call(
  "run_command",
  { argv: ["sh", "-c", "for i in 1 2 3; do echo line $i; sleep 0.3; done"] },
  { onprogress: (p) => progress.push({ progress: p.progress, message: p.message ?? null }) },
);
out.progress = progress;

// Cancellation: abort after 1.5 s, which sends notifications/cancelled; the command would
// have written late.txt after 4 s.
const abort = new AbortController();
const started = Date.now();
setTimeout(() => abort.abort("the test gives up"), 1500);
try {
  await client.callTool(
    { name: "run_command", arguments: { argv: ["sh", "-c", "sleep 4; echo late > late.txt"] } },
    undefined,
    { signal: abort.signal },
  );
  out.cancel_raised = false;
} catch (e) {
  out.cancel_raised = true;
  out.cancel_error = e?.name ?? String(e);
}
out.cancel_seconds = (Date.now() - started) / 1000;
await new Promise((resolve) => setTimeout(resolve, 4500));
out.late_exists = existsSync(join(workdir, "late.txt"));
out.after_cancel = await call("calculate", { expressions: ["1+1"] });
out.ask_user = await call("ask_user", ASK_USER);
out.asked = asked;
await client.close();

// A client without elicitation: nobody can approve, and ask_user cannot reach the user.
const plain = new Client({ name: "tooldispatch-ts-test-plain", version: "1.0.0" }, { capabilities: {} });
await connect(plain);
out.plain_write = await callOn(plain, "edit_file", { path: "plain.txt", content: "must not exist\n" });
out.plain_exists = existsSync(join(workdir, "plain.txt"));
out.plain_ask = await callOn(plain, "ask_user", ASK_USER);
await plain.close();
console.log(JSON.stringify(out));
