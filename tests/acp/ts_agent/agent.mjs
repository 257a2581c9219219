#!/usr/bin/env node
// A scripted ACP agent on the TypeScript SDK (@agentclientprotocol/sdk), written for turnback's
// tests as an agent turnback did not write: it knows nothing of turnback and keeps no step
// checkpoints. Run it as `node tests/acp/ts_agent/agent.mjs` after `npm ci` in this directory.
//
// Each prompt is a script, one command per line (blank lines are skipped):
//
//   say TEXT          agent_message_chunk updates, one per word
//   think TEXT        the same as agent_thought_chunk updates
//   plan A | B | C    a plan with those entries (the first in progress, the rest pending)
//   tool TITLE        a tool call (kind read) with an in_progress and a completed update
//   ask TITLE         a tool call and session/request_permission (allow / reject), then says
//                     "permission TITLE: allowed" (or rejected); a cancelled answer ends the
//                     turn with stop reason cancelled
//   write PATH TEXT   fs/write_text_file of TEXT plus a newline to PATH (relative to the
//                     session's cwd), reported as an edit tool call with a diff
//   run CMD ARG...    terminal/create, terminal/wait_for_exit, terminal/output,
//                     terminal/release; then says "ran CMD: exit N: OUTPUT"
//   ext [JSON]        the extension notification _ts/ping and request _ts/echo to the
//                     client (JSON, an object, merged into the params of both: a _meta, say);
//                     says what the client answered
//   sleep MS          wait; session/cancel interrupts it
//   crash             die by SIGKILL here
//   crash-once        die by SIGKILL the first time this line of this turn of this session is
//                     reached (a marker in the state directory), do nothing later
//   stop REASON       end the prompt here with that stop reason
//   fail MESSAGE      end the prompt with a JSON-RPC error carrying MESSAGE
//
// A prompt that is not a script (any line without a known verb) is taken as "go on": when the
// session's last turn never finished -- this agent or an earlier process of it died in it -- the
// agent says "continuing" and runs that turn's script again from the top (crash-once lines then
// do nothing); else it says it has nothing to continue. That is what a real agent does when told
// it was interrupted: it reads its own saved conversation and does the work again.
//
// Sessions are saved in $TS_AGENT_STATE, else in .ts-agent/ under the session's cwd (with a
// .gitignore of *): session/load (advertised) finds them from any process and replays them.
// The agent offers its own slash commands through available_commands_update: just after
// answering session/new, and with the replay of session/load, before answering it. A prompt that
// is just /ts-help lists the verbs; /ts-count says how many turns the session has had (neither
// is a turn of its own).
//
// Per-process state, for tests that must tell processes apart: the extension request _ts/state
// answers {pid, opened, extCalls, notes} -- the sessions this process opened (new or load), the
// _ts/* requests it answered, the _ts/note notifications it heard -- and with a sessionId also
// {session: {turns, notes, promptMeta}} for that session (promptMeta: the _meta of its last
// prompt, or null). _ts/echo answers {echo: params}. _ts/wait {ms} answers {waited: ms,
// requestId} after that long; a $/cancel_request of it first ends it with the error -32800 whose
// data is {requestId, meta: its params' _meta} (requestId: the id this agent was sent it under).
//
// TS_AGENT_INITIALIZE_DELAY_MS makes initialize answer that much later. session/delete removes
// the session and its saved file; only TS_AGENT_DELETE=1 makes the agent advertise it, so a
// test sees whether a client sends it to an agent that does not.

import * as acp from "@agentclientprotocol/sdk";
import { randomUUID } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { Readable, Writable } from "node:stream";

const VERBS = new Set([
  "say", "think", "plan", "tool", "ask", "write", "run", "ext", "sleep", "crash", "crash-once",
  "stop", "fail",
]);
const COMMANDS = [
  { name: "ts-help", description: "what this agent can do" },
  { name: "ts-count", description: "count the turns so far" },
];

const processState = { opened: [], extCalls: 0, notes: 0 };
const sessions = new Map(); // id -> {id, cwd, turns: [{script, updates, done}], notes, abort}
let client = null;

// -- sessions on disk ---------------------------------------------------------------------------

function stateDir(cwd) {
  const dir = process.env.TS_AGENT_STATE || path.join(cwd, ".ts-agent");
  fs.mkdirSync(dir, { recursive: true });
  const ignore = path.join(dir, ".gitignore");
  if (!fs.existsSync(ignore)) fs.writeFileSync(ignore, "*\n");
  return dir;
}

function save(session) {
  const file = path.join(stateDir(session.cwd), `${session.id}.json`);
  const { id, cwd, turns } = session;
  fs.writeFileSync(`${file}.tmp`, JSON.stringify({ id, cwd, turns }));
  fs.renameSync(`${file}.tmp`, file);
}

function open(id, cwd, turns) {
  const session = { id, cwd, turns, notes: 0, promptMeta: null, abort: null };
  sessions.set(id, session);
  processState.opened.push(id);
  return session;
}

const commandsUpdate = { sessionUpdate: "available_commands_update", availableCommands: COMMANDS };

// -- a turn -------------------------------------------------------------------------------------

function parse(text) {
  const lines = text.split("\n").map((l) => l.trim()).filter((l) => l !== "");
  const steps = lines.map((line) => {
    const at = line.indexOf(" ");
    return at < 0 ? [line, ""] : [line.slice(0, at), line.slice(at + 1)];
  });
  return steps.length > 0 && steps.every(([verb]) => VERBS.has(verb)) ? steps : null;
}

class Cancelled extends Error {}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      reject(new Cancelled());
    });
  });
}

async function runTurn(session, turn, number, ctx, signal) {
  let calls = 0;
  const send = async (update) => {
    turn.updates.push(update);
    await ctx.notify(acp.methods.client.session.update, { sessionId: session.id, update });
  };
  const words = async (kind, text) => {
    for (const word of `${text}\n`.split(/(?<= )/)) {
      await send({ sessionUpdate: kind, content: { type: "text", text: word } });
    }
  };
  const toolCall = async (title, kind, status = "pending") => {
    const toolCallId = `ts-${number}-${++calls}`;
    await send({ sessionUpdate: "tool_call", toolCallId, title, kind, status });
    return toolCallId;
  };
  const steps = parse(turn.script) ?? [];
  for (const [index, [verb, rest]] of steps.entries()) {
    if (signal.aborted) throw new Cancelled();
    if (verb === "say" || verb === "think") {
      await words(verb === "say" ? "agent_message_chunk" : "agent_thought_chunk", rest);
    } else if (verb === "plan") {
      const entries = rest.split("|").map((content, i) => ({
        content: content.trim(),
        priority: "medium",
        status: i === 0 ? "in_progress" : "pending",
      }));
      await send({ sessionUpdate: "plan", entries });
    } else if (verb === "tool") {
      const id = await toolCall(rest, "read");
      await send({ sessionUpdate: "tool_call_update", toolCallId: id, status: "in_progress" });
      const content = [{ type: "content", content: { type: "text", text: `read ${rest}` } }];
      await send({ sessionUpdate: "tool_call_update", toolCallId: id, status: "completed", content });
    } else if (verb === "ask") {
      const id = await toolCall(rest, "edit");
      const answer = await ctx.request(acp.methods.client.session.requestPermission, {
        sessionId: session.id,
        toolCall: { toolCallId: id, title: rest },
        options: [
          { optionId: "allow", name: "Allow", kind: "allow_once" },
          { optionId: "reject", name: "Reject", kind: "reject_once" },
        ],
      });
      if (answer.outcome.outcome === "cancelled") return "cancelled";
      const allowed = answer.outcome.optionId === "allow";
      await send({ sessionUpdate: "tool_call_update", toolCallId: id, status: allowed ? "completed" : "failed" });
      await words("agent_message_chunk", `permission ${rest}: ${allowed ? "allowed" : "rejected"}`);
    } else if (verb === "write") {
      const [file, ...text] = rest.split(" ");
      const target = path.join(session.cwd, file);
      const content = `${text.join(" ")}\n`;
      const id = await toolCall(`Write ${file}`, "edit", "in_progress");
      await ctx.request(acp.methods.client.fs.writeTextFile, { sessionId: session.id, path: target, content });
      const diff = [{ type: "diff", path: target, newText: content }];
      await send({ sessionUpdate: "tool_call_update", toolCallId: id, status: "completed", content: diff });
    } else if (verb === "run") {
      const [command, ...args] = rest.split(" ");
      const id = await toolCall(`Run ${rest}`, "execute", "in_progress");
      const terminal = await ctx.createTerminal({ sessionId: session.id, command, args, cwd: session.cwd });
      await send({
        sessionUpdate: "tool_call_update",
        toolCallId: id,
        content: [{ type: "terminal", terminalId: terminal.id }],
      });
      const exit = await terminal.waitForExit();
      const output = await terminal.currentOutput();
      await terminal.release();
      await send({ sessionUpdate: "tool_call_update", toolCallId: id, status: "completed" });
      await words("agent_message_chunk", `ran ${command}: exit ${exit.exitCode}: ${output.output.trim()}`);
    } else if (verb === "ext") {
      const extra = rest ? JSON.parse(rest) : {};
      await ctx.notify("_ts/ping", { sessionId: session.id, turn: number, ...extra });
      const echoed = await ctx.request("_ts/echo", { turn: number, ...extra });
      await words("agent_message_chunk", `echo ${JSON.stringify(echoed)}`);
    } else if (verb === "sleep") {
      await sleep(Number(rest), signal);
    } else if (verb === "crash") {
      process.kill(process.pid, "SIGKILL");
    } else if (verb === "crash-once") {
      const marker = path.join(stateDir(session.cwd), `crashed-${session.id}-${number}-${index}`);
      if (!fs.existsSync(marker)) {
        fs.writeFileSync(marker, "");
        process.kill(process.pid, "SIGKILL");
      }
    } else if (verb === "stop") {
      return rest;
    } else if (verb === "fail") {
      throw new acp.RequestError(-32000, rest);
    }
  }
  return "end_turn";
}

async function prompt({ params, client: ctx }) {
  const session = sessions.get(params.sessionId);
  if (!session) throw acp.RequestError.resourceNotFound(params.sessionId);
  session.promptMeta = params._meta ?? null;
  const text = params.prompt
    .filter((block) => block.type === "text")
    .map((block) => block.text)
    .join("\n");
  let turn = { script: text, updates: [], done: false };
  const last = session.turns.at(-1);
  const command = text.match(/^\/(ts-help|ts-count)\s*$/)?.[1];
  if (command !== undefined) {
    const said = command === "ts-help" ? [...VERBS].join(" ") : `${session.turns.length} turns so far`;
    const update = { sessionUpdate: "agent_message_chunk", content: { type: "text", text: `${said}\n` } };
    await ctx.notify(acp.methods.client.session.update, { sessionId: session.id, update });
    return { stopReason: "end_turn" };
  }
  if (parse(text) === null) {
    if (last === undefined || last.done) {
      session.turns.push({ script: text, updates: [], done: true });
      const update = { sessionUpdate: "agent_message_chunk", content: { type: "text", text: "nothing to continue\n" } };
      await ctx.notify(acp.methods.client.session.update, { sessionId: session.id, update });
      save(session);
      return { stopReason: "end_turn" };
    }
    turn = last;
    await ctx.notify(acp.methods.client.session.update, {
      sessionId: session.id,
      update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: "continuing\n" } },
    });
  } else {
    session.turns.push(turn);
  }
  const number = session.turns.indexOf(turn) + 1;
  save(session); // the turn is known to be unfinished before any of it runs
  const abort = new AbortController();
  session.abort = abort;
  try {
    const stopReason = await runTurn(session, turn, number, ctx, abort.signal);
    return { stopReason };
  } catch (error) {
    if (error instanceof Cancelled) return { stopReason: "cancelled" };
    throw error;
  } finally {
    session.abort = null;
    turn.done = true;
    save(session);
  }
}

// -- the agent ------------------------------------------------------------------------------------

const state = ({ params }) => {
  processState.extCalls += 1;
  const { opened, extCalls, notes } = processState;
  const answer = { pid: process.pid, opened: opened.length, extCalls, notes };
  const session = sessions.get(params?.sessionId);
  if (session) {
    const { turns, notes, promptMeta } = session;
    answer.session = { turns: turns.length, notes, promptMeta };
  }
  return answer;
};

const app = acp
  .agent({ name: "ts-scripted-agent" })
  .onConnect((connection) => {
    client = connection.client;
  })
  .onRequest(acp.methods.agent.initialize, async ({ params }) => {
    const delay = Number(process.env.TS_AGENT_INITIALIZE_DELAY_MS || 0);
    if (delay > 0) await new Promise((resolve) => setTimeout(resolve, delay));
    return {
      protocolVersion: Math.min(params.protocolVersion, acp.PROTOCOL_VERSION),
      agentCapabilities: {
        loadSession: true,
        ...(process.env.TS_AGENT_DELETE === "1" ? { sessionCapabilities: { delete: {} } } : {}),
      },
      agentInfo: { name: "ts-scripted-agent", title: "TypeScript scripted agent", version: "1.0.0" },
      authMethods: [],
      _meta: { tsAgent: { sdk: "@agentclientprotocol/sdk" } },
    };
  })
  .onRequest(acp.methods.agent.session.new, async ({ params }) => {
    const id = `ts-${randomUUID()}`;
    save(open(id, params.cwd, []));
    // Once the client knows the session: after the response has gone out (TS_AGENT_COMMANDS_MS
    // later, 20 by default; 0 sends them right behind it, as some agents do; below 0, ahead of
    // it, which no client can place, to see what a proxy does with that).
    const offer = () =>
      client?.notify(acp.methods.client.session.update, { sessionId: id, update: commandsUpdate });
    const ms = Number(process.env.TS_AGENT_COMMANDS_MS ?? 20);
    if (ms < 0) await offer();
    else setTimeout(() => offer()?.catch(() => {}), ms);
    return { sessionId: id };
  })
  .onRequest(acp.methods.agent.session.load, ({ params, client: ctx }) => {
    const file = path.join(stateDir(params.cwd), `${params.sessionId}.json`);
    if (!fs.existsSync(file)) throw acp.RequestError.resourceNotFound(params.sessionId);
    const saved = JSON.parse(fs.readFileSync(file, "utf8"));
    const session = open(saved.id, params.cwd, saved.turns);
    // the conversation replayed in order, then the commands, all before the response
    return (async () => {
      const replay = session.turns.flatMap((turn) => [
        { sessionUpdate: "user_message_chunk", content: { type: "text", text: turn.script } },
        ...turn.updates,
      ]);
      for (const update of [...replay, commandsUpdate]) {
        await ctx.notify(acp.methods.client.session.update, { sessionId: session.id, update });
      }
      return {};
    })();
  })
  .onRequest(acp.methods.agent.session.prompt, prompt)
  .onRequest(acp.methods.agent.session.delete, ({ params }) => {
    const session = sessions.get(params.sessionId);
    if (!session) throw acp.RequestError.resourceNotFound(params.sessionId);
    sessions.delete(params.sessionId);
    fs.rmSync(path.join(stateDir(session.cwd), `${session.id}.json`), { force: true });
    return {};
  })
  .onNotification(acp.methods.agent.session.cancel, ({ params }) => {
    sessions.get(params.sessionId)?.abort?.abort();
  })
  .onRequest("_ts/state", (params) => params ?? {}, state)
  .onRequest("_ts/echo", (params) => params ?? {}, ({ params }) => {
    processState.extCalls += 1;
    return { echo: params };
  })
  .onRequest("_ts/wait", (params) => params ?? {}, async ({ params, signal, requestId }) => {
    try {
      await sleep(Number(params.ms ?? 0), signal);
    } catch (error) {
      if (!(error instanceof Cancelled)) throw error;
      throw new acp.RequestError(-32800, "Request cancelled", {
        requestId,
        meta: params._meta ?? null,
      });
    }
    return { waited: params.ms ?? 0, requestId };
  })
  .onNotification("_ts/note", (params) => params ?? {}, ({ params }) => {
    processState.notes += 1;
    const session = sessions.get(params.sessionId);
    if (session) session.notes += 1;
  });

const output = Writable.toWeb(process.stdout);
const input = Readable.toWeb(process.stdin);
app.connect(acp.ndJsonStream(output, input));
