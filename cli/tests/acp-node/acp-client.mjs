// Drives `dsh acp` with the official ACP TypeScript SDK
// (@agentclientprotocol/sdk) against the bundled mock DeepSeek server:
// initialize, session/new, a prompt whose tool calls need permission
// (granted), one denied, a cancel mid-stream, then session/load in a new
// process. Every message in both directions is validated against the
// protocol's JSON schema shipped in the SDK package (schema/v1/schema.json):
// the whole message against the `Agent`/`Client` message union, and the
// params/result against the exact type of its method.
//
// Usage: node acp-client.mjs PATH/TO/dsh   (exit 0: every check passed)

import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync, existsSync, realpathSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import { createRequire } from "node:module";
import { createInterface } from "node:readline";
import * as acp from "@agentclientprotocol/sdk";
import Ajv2020 from "ajv/dist/2020.js";

const dsh = process.argv[2];
if (!dsh || !existsSync(dsh)) {
  console.error(`usage: node acp-client.mjs PATH/TO/dsh (got ${dsh})`);
  process.exit(2);
}

// ---- the protocol's JSON schema ----------------------------------------
const require = createRequire(import.meta.url);
const schemaPath = require.resolve("@agentclientprotocol/sdk/schema/v1/schema.json");
const schema = JSON.parse(readFileSync(schemaPath, "utf8"));
const ajv = new Ajv2020({ strict: false, allErrors: true });
// The schema's numeric formats (schemars names), checked, not ignored.
const range = (lo, hi) => (n) => Number.isInteger(n) && n >= lo && n <= hi;
for (const [name, ok] of Object.entries({
  int32: range(-(2 ** 31), 2 ** 31 - 1),
  int64: Number.isSafeInteger,
  uint16: range(0, 2 ** 16 - 1),
  uint32: range(0, 2 ** 32 - 1),
  uint64: (n) => Number.isSafeInteger(n) && n >= 0,
  double: Number.isFinite,
})) {
  ajv.addFormat(name, { type: "number", validate: ok });
}
ajv.addFormat("uri", (s) => { try { new URL(s); return true; } catch { return false; } });
ajv.addSchema(schema, "acp");
const compiled = new Map();
function validator(ref) {
  if (!compiled.has(ref)) compiled.set(ref, ajv.getSchema(`acp${ref}`));
  const v = compiled.get(ref);
  if (!v) throw new Error(`no schema for ${ref}`);
  return v;
}
// The message unions (the schema's top-level `anyOf` branches).
const agentMessage = ajv.compile({ $ref: "acp#/anyOf/0" });
const clientMessage = ajv.compile({ $ref: "acp#/anyOf/1" });

const requestTypes = {
  initialize: ["InitializeRequest", "InitializeResponse"],
  "session/new": ["NewSessionRequest", "NewSessionResponse"],
  "session/load": ["LoadSessionRequest", "LoadSessionResponse"],
  "session/prompt": ["PromptRequest", "PromptResponse"],
  "session/set_mode": ["SetSessionModeRequest", "SetSessionModeResponse"],
  "session/request_permission": ["RequestPermissionRequest", "RequestPermissionResponse"],
  "fs/read_text_file": ["ReadTextFileRequest", "ReadTextFileResponse"],
  "fs/write_text_file": ["WriteTextFileRequest", "WriteTextFileResponse"],
  "terminal/create": ["CreateTerminalRequest", "CreateTerminalResponse"],
  "terminal/wait_for_exit": ["WaitForTerminalExitRequest", "WaitForTerminalExitResponse"],
  "terminal/output": ["TerminalOutputRequest", "TerminalOutputResponse"],
  "terminal/release": ["ReleaseTerminalRequest", "ReleaseTerminalResponse"],
  "terminal/kill": ["KillTerminalRequest", "KillTerminalResponse"],
};
const notificationTypes = {
  "session/update": "SessionNotification",
  "session/cancel": "CancelNotification",
};

let failures = 0;
let checked = 0;
function fail(msg) {
  failures++;
  console.error(`FAIL: ${msg}`);
}
function check(cond, msg) {
  if (!cond) fail(msg);
}
function validate(fn, value, what) {
  checked++;
  if (!fn(value)) fail(`${what} does not match the ACP schema: ${ajv.errorsText(fn.errors)}\n  ${JSON.stringify(value)}`);
}

/** Validates one message; `sent` maps request ids to methods per side. */
function validateMessage(msg, from, sentByOther) {
  const union = from === "agent" ? agentMessage : clientMessage;
  validate(union, msg, `${from} message`);
  if ("method" in msg) {
    if ("id" in msg) {
      const t = requestTypes[msg.method];
      if (t) validate(validator(`#/$defs/${t[0]}`), msg.params, `${msg.method} params`);
      else fail(`${from} sent an unexpected request ${msg.method}`);
    } else {
      const t = notificationTypes[msg.method];
      if (t) validate(validator(`#/$defs/${t}`), msg.params, `${msg.method} params`);
      else fail(`${from} sent an unexpected notification ${msg.method}`);
    }
  } else {
    const method = sentByOther.get(msg.id);
    if ("error" in msg) {
      validate(validator("#/$defs/Error"), msg.error, `error answering ${method}`);
    } else if (method && requestTypes[method]) {
      validate(validator(`#/$defs/${requestTypes[method][1]}`), msg.result, `${method} result`);
    } else {
      fail(`${from} answered an unknown request id ${JSON.stringify(msg.id)}`);
    }
  }
}

// ---- processes -----------------------------------------------------------
const work = mkdtempSync(join(tmpdir(), "dsh-acp-node-"));
const data = join(work, "data");
const ws = realpathSync(mkdtempSync(join(work, "ws-")));
const env = { ...process.env, XDG_DATA_HOME: data, NO_COLOR: "1" };
delete env.DEEPSEEK_API_KEY;
delete env.DEEPSEEK_BASE_URL;

const script = {
  responses: [
    // Prompt 1: plan (never asks), write (needs permission: granted), answer.
    { turn: { reasoning: ["Plan first."], toolCalls: [{ id: "call_todo", name: "todo_write",
      arguments: ['{"todos":[{"content":"Write notes.txt","status":"in_progress"}]}'] }] } },
    { turn: { text: ["Writing."], toolCalls: [{ id: "call_write", name: "write",
      arguments: ['{"file_path":"notes.txt",', '"content":"one\\ntwo\\n"}'] }] } },
    { turn: { text: ["Wrote ", "notes.txt."] } },
    // Prompt 2: bash (denied), answer.
    { turn: { toolCalls: [{ id: "call_bash", name: "bash",
      arguments: ['{"command":"echo ran > ran.txt","description":"Mark that it ran"}'] }] } },
    { turn: { text: ["Not run."] } },
    // Prompt 3: bash in the editor's terminal (granted).
    { turn: { toolCalls: [{ id: "call_term", name: "bash",
      arguments: ['{"command":"make test","description":"Run the tests"}'] }] } },
    { turn: { text: ["Tests pass."] } },
    // Prompt 4: streams, then stalls until cancelled.
    { fault: { kind: "stall", turn: { text: ["Partial ", "answer ", "never ", "finished"] }, afterEvents: 3 } },
    // Third process, plan mode: a write refused, the plan
    // approved through a permission request, the write then asked and run.
    { turn: { toolCalls: [{ id: "call_early", name: "write",
      arguments: ['{"file_path":"plan.txt","content":"early\\n"}'] }] } },
    { turn: { toolCalls: [{ id: "call_exit", name: "exit_plan_mode",
      arguments: ['{"plan":"# Plan file\\n- write plan.txt\\n- say so"}'] }] } },
    { turn: { toolCalls: [{ id: "call_planned", name: "write",
      arguments: ['{"file_path":"plan.txt","content":"planned\\n"}'] }] } },
    { turn: { text: ["Planned."] } },
    // A question answered through a permission request.
    { turn: { toolCalls: [{ id: "call_ask", name: "ask_user_question",
      arguments: ['{"questions":[{"id":"lang","question":"Which language?","options":[{"label":"Rust"},{"label":"Go"}]}]}'] }] } },
    { turn: { text: ["Go it is."] } },
    // Always allow: the first bash asks, the second does not.
    { turn: { toolCalls: [{ id: "call_always1", name: "bash",
      arguments: ['{"command":"echo one","description":"one"}'] }] } },
    { turn: { toolCalls: [{ id: "call_always2", name: "bash",
      arguments: ['{"command":"echo two","description":"two"}'] }] } },
    { turn: { text: ["Both ran."] } },
  ],
};
const scriptPath = join(work, "script.json");
writeFileSync(scriptPath, JSON.stringify(script));

const mock = spawn(dsh, ["mock-server", "--script", scriptPath], { stdio: ["pipe", "pipe", "inherit"] });
const mockUrl = await new Promise((resolve, reject) => {
  createInterface({ input: mock.stdout }).once("line", resolve);
  mock.once("exit", (c) => reject(new Error(`mock server exited ${c}`)));
});

/** Starts `dsh acp` and returns an SDK stream that validates every message. */
function startAgent() {
  const args = ["acp", "--base-url", mockUrl, "--client-terminal"];
  const child = spawn(dsh, args, { stdio: ["pipe", "pipe", "inherit"], env });
  const inner = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  const sentByClient = new Map();
  const sentByAgent = new Map();
  const transcript = [];
  const readable = inner.readable.pipeThrough(
    new TransformStream({
      transform(msg, controller) {
        transcript.push({ from: "agent", msg });
        if ("method" in msg && "id" in msg) sentByAgent.set(msg.id, msg.method);
        validateMessage(msg, "agent", sentByClient);
        controller.enqueue(msg);
      },
    }),
  );
  const writer = inner.writable.getWriter();
  const writable = new WritableStream({
    async write(msg) {
      transcript.push({ from: "client", msg });
      if ("method" in msg && "id" in msg) sentByClient.set(msg.id, msg.method);
      validateMessage(msg, "client", sentByAgent);
      await writer.write(msg);
    },
    async close() {
      await writer.close();
    },
  });
  const exited = new Promise((resolve) => child.once("exit", (code) => resolve(code)));
  return { stream: { readable, writable }, child, exited, transcript };
}

// ---- the client ----------------------------------------------------------
let permissionAnswer = "allow_once";
let questionAnswer = "option-0";
let onChunk = null;
// The SDK runs notification handlers asynchronously: a response can
// resolve before the handlers of the updates sent ahead of it have run.
// Checks therefore read the updates from the validated wire transcript
// (in wire order) from a mark on.
let updates = [];
function wireUpdates(conn, mark) {
  return conn.transcript
    .slice(mark)
    .filter((t) => t.from === "agent" && t.msg.method === "session/update")
    .map((t) => t.msg.params);
}
const permissionRequests = [];
// The "editor buffers" the agent reads and writes through `fs/*`.
const buffers = new Map();
const terminals = [];

const app = acp
  .client({ name: "dsh-acp-node-test" })
  .onRequest(acp.methods.client.session.requestPermission, async ({ params }) => {
    permissionRequests.push(params);
    // A question's options are its choices (`option-N`).
    if (params.options[0].optionId.startsWith("option-")) {
      return { outcome: { outcome: "selected", optionId: questionAnswer } };
    }
    return { outcome: { outcome: "selected", optionId: permissionAnswer } };
  })
  .onRequest(acp.methods.client.fs.readTextFile, async ({ params }) => {
    if (!buffers.has(params.path)) throw acp.RequestError.resourceNotFound(params.path);
    return { content: buffers.get(params.path) };
  })
  .onRequest(acp.methods.client.fs.writeTextFile, async ({ params }) => {
    buffers.set(params.path, params.content);
    return {};
  })
  // The "editor terminal": every command prints one line and exits 0.
  .onRequest(acp.methods.client.terminal.create, async ({ params }) => {
    terminals.push(params);
    return { terminalId: `term-${terminals.length}` };
  })
  .onRequest(acp.methods.client.terminal.waitForExit, async () => ({ exitCode: 0 }))
  .onRequest(acp.methods.client.terminal.output, async () => ({
    output: "all tests passed\n", truncated: false, exitStatus: { exitCode: 0 },
  }))
  .onRequest(acp.methods.client.terminal.release, async () => ({}))
  .onRequest(acp.methods.client.terminal.kill, async () => ({}))
  .onNotification(acp.methods.client.session.update, async ({ params }) => {
    if (onChunk && params.update.sessionUpdate === "agent_message_chunk") onChunk(params);
  });

const kinds = (list) => list.map((n) => n.update.sessionUpdate);
let sessionId;

const first = startAgent();
await app.connectWith(first.stream, async (agent) => {
  const init = await agent.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: true, writeTextFile: true }, terminal: true },
    clientInfo: { name: "dsh-acp-node-test", version: "0.0.0" },
  });
  check(init.protocolVersion === 1, `protocol version 1, got ${init.protocolVersion}`);
  check(init.agentCapabilities.loadSession === true, "loadSession offered");
  check(init.agentCapabilities.promptCapabilities.image === false, "images not offered");

  const created = await agent.request(acp.methods.agent.session.new, { cwd: ws, mcpServers: [] });
  sessionId = created.sessionId;
  check(typeof sessionId === "string" && sessionId.length > 0, "a session id");
  check(created.modes && created.modes.currentModeId === "ask", "modes offered, starting in ask");
  await agent.request(acp.methods.agent.session.setMode, { sessionId, modeId: "ask" });

  // Prompt 1: permission granted.
  let mark = first.transcript.length;
  permissionAnswer = "allow_once";
  const r1 = await agent.request(acp.methods.agent.session.prompt, {
    sessionId,
    prompt: [{ type: "text", text: "Write two lines to notes.txt" }],
  });
  check(r1.stopReason === "end_turn", `prompt 1 ends end_turn, got ${r1.stopReason}`);
  updates = wireUpdates(first, mark);
  check(buffers.get(join(ws, "notes.txt")) === "one\ntwo\n", "notes.txt written to the editor's buffer");
  check(!existsSync(join(ws, "notes.txt")), "not to the disk");
  check(permissionRequests.length === 1, `one permission request (the plan never asks), got ${permissionRequests.length}`);
  check(permissionRequests[0].toolCall.toolCallId === "call_write",
    `the permission request names the write call, got ${permissionRequests[0].toolCall.toolCallId}`);
  const plan = updates.find((u) => u.update.sessionUpdate === "plan");
  check(plan && plan.update.entries[0].content === "Write notes.txt" && plan.update.entries[0].status === "in_progress",
    "todo_write becomes a plan");
  const writeCall = updates.find((u) => u.update.sessionUpdate === "tool_call" && u.update.toolCallId === "call_write");
  check(writeCall && writeCall.update.kind === "edit" && writeCall.update.locations[0].path === join(ws, "notes.txt"),
    "the write call has kind edit and its location");
  const writeDone = updates.filter((u) => u.update.sessionUpdate === "tool_call_update" && u.update.toolCallId === "call_write").pop();
  check(writeDone && writeDone.update.status === "completed" && writeDone.update.content[0].type === "diff"
    && writeDone.update.content[0].newText === "one\ntwo\n", "the write ends completed with a diff");

  // Prompt 2: permission denied.
  mark = first.transcript.length;
  permissionAnswer = "reject_once";
  const r2 = await agent.request(acp.methods.agent.session.prompt, {
    sessionId,
    prompt: [{ type: "text", text: "Run something" }],
  });
  check(r2.stopReason === "end_turn", `prompt 2 ends end_turn, got ${r2.stopReason}`);
  updates = wireUpdates(first, mark);
  check(!existsSync(join(ws, "ran.txt")), "a denied command does not run");
  const bashDone = updates.filter((u) => u.update.sessionUpdate === "tool_call_update").pop();
  check(bashDone && bashDone.update.status === "failed", "the denied call ends failed");

  // Prompt 3: bash in the editor's terminal.
  mark = first.transcript.length;
  permissionAnswer = "allow_once";
  const r3t = await agent.request(acp.methods.agent.session.prompt, {
    sessionId,
    prompt: [{ type: "text", text: "Run the tests" }],
  });
  check(r3t.stopReason === "end_turn", `prompt 3 ends end_turn, got ${r3t.stopReason}`);
  updates = wireUpdates(first, mark);
  check(terminals.length === 1 && terminals[0].command === "bash" && terminals[0].args[1] === "make test"
    && terminals[0].cwd === ws, `the command ran in the editor's terminal: ${JSON.stringify(terminals)}`);
  const termDone = updates.filter((u) => u.update.sessionUpdate === "tool_call_update").pop();
  check(termDone && termDone.update.status === "completed"
    && termDone.update.content[0].content.text === "all tests passed\n", "the terminal's output is the result");

  // Prompt 4: cancel mid-stream.
  const streaming = new Promise((resolve) => { onChunk = resolve; });
  const p3 = agent.request(acp.methods.agent.session.prompt, {
    sessionId,
    prompt: [{ type: "text", text: "Say something long" }],
  });
  await streaming;
  onChunk = null;
  await agent.notify(acp.methods.agent.session.cancel, { sessionId });
  const r3 = await p3;
  check(r3.stopReason === "cancelled", `prompt 4 ends cancelled, got ${r3.stopReason}`);
});
first.child.stdin.end();
check((await first.exited) === 0, "dsh acp exits 0 when the client closes stdin");

// A new process loads the session back.
const second = startAgent();
await app.connectWith(second.stream, async (agent) => {
  await agent.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: {},
  });
  await agent.request(acp.methods.agent.session.load, { sessionId, cwd: ws, mcpServers: [] });
});
second.child.stdin.end();
check((await second.exited) === 0, "the second dsh acp exits 0");
updates = wireUpdates(second, 0);
const replayed = kinds(updates);
const users = updates.filter((u) => u.update.sessionUpdate === "user_message_chunk").map((u) => u.update.content.text);
check(JSON.stringify(users) === JSON.stringify(["Write two lines to notes.txt", "Run something", "Run the tests", "Say something long"]),
  `the replay carries the three prompts, got ${JSON.stringify(users)}`);
check(replayed.includes("plan") && replayed.includes("tool_call") && replayed.includes("tool_call_update"),
  `the replay carries plan and tool calls, got ${replayed.join(",")}`);

// ---- a third process: slash commands, plan mode, a question -------------
const third = startAgent();
let planSession;
permissionRequests.length = 0;
await app.connectWith(third.stream, async (agent) => {
  await agent.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: true, writeTextFile: true } },
  });
  const created = await agent.request(acp.methods.agent.session.new, { cwd: ws, mcpServers: [] });
  planSession = created.sessionId;
  check(created.modes.availableModes.some((m) => m.id === "plan"), "a plan mode is offered");
  // A slash command runs without the model.
  let mark = third.transcript.length;
  const status = await agent.request(acp.methods.agent.session.prompt, {
    sessionId: planSession, prompt: [{ type: "text", text: "/status" }],
  });
  // The command list follows the session/new response.
  const listed = wireUpdates(third, 0).find((u) => u.update.sessionUpdate === "available_commands_update");
  const names = listed ? listed.update.availableCommands.map((c) => c.name) : [];
  for (const n of ["plan", "compact", "model", "effort", "status", "sessions", "resume", "fork", "help", "permissions"]) {
    check(names.includes(n), `available_commands_update lists /${n}: ${names.join(",")}`);
  }
  check(status.stopReason === "end_turn", `/status ends end_turn, got ${status.stopReason}`);
  const said = wireUpdates(third, mark).filter((u) => u.update.sessionUpdate === "agent_message_chunk")
    .map((u) => u.update.content.text).join("");
  check(said.includes("model: deepseek-v4-flash"), `/status shows the model: ${said}`);

  await agent.request(acp.methods.agent.session.setMode, { sessionId: planSession, modeId: "plan" });
  mark = third.transcript.length;
  questionAnswer = "option-0";
  permissionAnswer = "allow_once";
  const planned = await agent.request(acp.methods.agent.session.prompt, {
    sessionId: planSession, prompt: [{ type: "text", text: "Plan, then write plan.txt" }],
  });
  check(planned.stopReason === "end_turn", `the plan prompt ends end_turn, got ${planned.stopReason}`);
  const u = wireUpdates(third, mark);
  check(permissionRequests.length === 2, `a plan review and a write permission, got ${permissionRequests.length}`);
  const review = permissionRequests[0];
  check(review && review.toolCall.toolCallId === "call_exit"
    && review.options.map((o) => o.name).join("|") === "Approve|Keep planning"
    && review.toolCall.content[0].content.text.startsWith("# Plan file"),
    `the review carries the plan and its choices: ${JSON.stringify(review)}`);
  const planUpdate = u.find((x) => x.update.sessionUpdate === "plan");
  check(planUpdate && planUpdate.update.entries.map((e) => e.content).join("|") === "write plan.txt|say so",
    "the plan is sent as a plan update");
  check(u.some((x) => x.update.sessionUpdate === "current_mode_update" && x.update.currentModeId === "ask"),
    "approving the plan leaves plan mode");
  check(permissionRequests[1] && permissionRequests[1].toolCall.toolCallId === "call_planned",
    "the write after the plan asks");
  const diff = permissionRequests[1] && permissionRequests[1].toolCall.content && permissionRequests[1].toolCall.content[0];
  check(diff && diff.type === "diff" && diff.newText === "planned\n" && diff.path === join(ws, "plan.txt"),
    `the write's permission request carries its diff: ${JSON.stringify(diff)}`);
  check(buffers.get(join(ws, "plan.txt")) === "planned\n", "only the planned write ran");

  questionAnswer = "option-1";
  const asked = await agent.request(acp.methods.agent.session.prompt, {
    sessionId: planSession, prompt: [{ type: "text", text: "Ask me" }],
  });
  check(asked.stopReason === "end_turn", `the question prompt ends end_turn, got ${asked.stopReason}`);
  const q = permissionRequests[2];
  check(q && q.options.map((o) => o.name).join("|") === "Rust|Go", `the question's choices are the options: ${JSON.stringify(q)}`);

  permissionAnswer = "allow_always";
  const always = await agent.request(acp.methods.agent.session.prompt, {
    sessionId: planSession, prompt: [{ type: "text", text: "Run two commands" }],
  });
  check(always.stopReason === "end_turn", `the always prompt ends end_turn, got ${always.stopReason}`);
  check(permissionRequests.length === 4, `always-allow asks once, got ${permissionRequests.length - 3} requests`);

  // `/plan` and `/plan off` typed as prompts switch the session mode.
  mark = third.transcript.length;
  for (const text of ["/plan", "/plan off"]) {
    const r = await agent.request(acp.methods.agent.session.prompt, {
      sessionId: planSession, prompt: [{ type: "text", text }],
    });
    check(r.stopReason === "end_turn", `${text} ends end_turn, got ${r.stopReason}`);
  }
  const switched = wireUpdates(third, mark).filter((x) => x.update.sessionUpdate === "current_mode_update")
    .map((x) => x.update.currentModeId);
  check(JSON.stringify(switched) === '["plan","ask"]', `/plan and /plan off switch the mode: ${JSON.stringify(switched)}`);
});
third.child.stdin.end();
check((await third.exited) === 0, "the third dsh acp exits 0");
{
  const { spawnSync } = await import("node:child_process");
  const { readdirSync, statSync } = await import("node:fs");
  const find = (dir) => readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    return statSync(p).isDirectory() ? find(p) : n === "session.jsonl" ? [p] : [];
  });
  const log = find(data).find((p) => p.includes(planSession));
  check(log, "the plan session is stored");
  if (log) {
    const lines = readFileSync(log, "utf8").trim().split("\n").map((l) => JSON.parse(l));
    const types = lines.map((l) => l.type);
    const modes = lines.filter((l) => l.type === "plan/mode").map((l) => l.data.active);
    check(JSON.stringify(modes) === "[true,false,true,false]", `plan/mode on, off, on, off: ${JSON.stringify(modes)}`);
    check(types.includes("command/run") && types.includes("command/done"), "the /status command is logged");
    const decided = lines.filter((l) => l.type === "approval/decided").map((l) => l.data.outcome);
    check(JSON.stringify(decided) === '["allowed-once","allowed-once"]',
      `the write's and the always-allowed bash's approvals are logged: ${JSON.stringify(decided)}`);
    const asked = lines.filter((l) => l.type === "approval/asked").map((l) => l.data.callId);
    check(JSON.stringify(asked) === '["call_planned","call_always1"]', `asked: ${JSON.stringify(asked)}`);
    const answer = lines.filter((l) => l.type === "tool/result")
      .map((l) => l.data.message.content[0].content[0].text).find((t) => t.startsWith('{"answers"'));
    check(answer === '{"answers":[{"id":"lang","selected":["Go"]}]}', `the answer shape: ${answer}`);
    for (const args of [["log", "check", log], ["replay", "--check", log]]) {
      const r = spawnSync(dsh, args, { env, encoding: "utf8" });
      check(r.status === 0, `dsh ${args.slice(0, 2).join(" ")} passes: ${r.stdout}${r.stderr}`);
    }
  }
}

// The first session's trail: allowed, rejected, allowed.
{
  const { readdirSync, statSync } = await import("node:fs");
  const find = (dir) => readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    return statSync(p).isDirectory() ? find(p) : n === "session.jsonl" ? [p] : [];
  });
  const log = find(data).find((p) => p.includes(sessionId));
  const lines = log ? readFileSync(log, "utf8").trim().split("\n").map((l) => JSON.parse(l)) : [];
  const decided = lines.filter((l) => l.type === "approval/decided").map((l) => l.data.outcome);
  check(JSON.stringify(decided) === '["allowed-once","rejected","allowed-once"]',
    `the first session's approvals are logged: ${JSON.stringify(decided)}`);
}

mock.stdin.end();

// One prompt exchange with a tool call, as JSON lines (for the docs).
if (process.env.ACP_TRANSCRIPT) {
  writeFileSync(process.env.ACP_TRANSCRIPT, first.transcript.map((t) => `${t.from === "client" ? "->" : "<-"} ${JSON.stringify(t.msg)}`).join("\n") + "\n");
}

console.log(`acp node client: ${checked} messages validated against ${schemaPath.split("node_modules/")[1]}, ${failures} failure(s)`);
process.exit(failures === 0 ? 0 : 1);
