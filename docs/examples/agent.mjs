// An mcpbus agent in plain JavaScript (ESM): nothing but the `nats` npm
// package. It lists the tools, calls one, reads an error, follows progress,
// cancels a call and meets a server nobody runs. Its JSDoc types make it
// type-check as TypeScript (tests/e2e/agent_test.go runs exactly this):
//
//   npm install nats@2 typescript@5 @types/node@20
//   npx tsc --noEmit --checkJs --allowJs --strict --module nodenext --target es2022 --types node agent.mjs
//
//   npm install nats@2
//   NATS_URL=nats://127.0.0.1:4222 NATS_NKEY=.mcpbus/nats/agent-demo.nk \
//     NATS_INBOX_PREFIX=_I.agent-demo MCP_PREFIX=mcp.v1.agent.demo node agent.mjs
//
// NATS_NKEY, NATS_INBOX_PREFIX and MCP_PREFIX are the seed file, inbox prefix
// and subject prefix that `mcpbus agents create demo` prints: mcpbus up's bus
// refuses a connection without an identity, an agent may read replies only
// under its inbox prefix, and it requests under its own subject prefix
// (mcp.v1.agent.<name>), which tells the runners who is calling. On a bus
// without identities (--insecure-bus) leave all three out.
//
// It expects server-everything to be running under the slug "everything"
// and the agent made with `mcpbus agents create demo --allow-tool 'everything__*'`
// (see docs/agents.md). tests/e2e/agent_test.go runs this file for real.
import { connect, createInbox, headers, ErrorCode, JSONCodec, nkeyAuthenticator } from "nats";
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";

/** The error contract of a failed call, with the status of its headers.
 * @typedef {{status: string, header: string | undefined, code: string, message: string, field?: string}} CallError */
/** A call's outcome: the reply body (a CallToolResult, the catalog…) or the error.
 * @typedef {{result?: any, error?: CallError}} Outcome */

/** @type {import("nats").Codec<any>} */
const jc = JSONCodec();
const seedFile = process.env.NATS_NKEY;
const prefix = process.env.MCP_PREFIX ?? "mcp.v1";
const inboxPrefix = process.env.NATS_INBOX_PREFIX;
const nc = await connect({
  servers: process.env.NATS_URL ?? "nats://127.0.0.1:4222",
  ...(seedFile ? { authenticator: nkeyAuthenticator(new TextEncoder().encode(readFileSync(seedFile, "utf8").trim())) } : {}),
  ...(inboxPrefix ? { inboxPrefix } : {}),
});

// call sends a request and returns {result} on success or {error} with the
// contract's {code, message, field} and the HTTP-like status of the headers.
/**
 * @param {string} subject
 * @param {unknown} body
 * @param {{hdrs?: import("nats").MsgHdrs, timeout?: number}} [opts]
 * @returns {Promise<Outcome>}
 */
async function call(subject, body, { hdrs, timeout = 35_000 } = {}) {
  const msg = await nc.request(subject, jc.encode(body), { headers: hdrs, timeout });
  const status = msg.headers?.get("Nats-Service-Error-Code");
  if (msg.headers && status) {
    return { error: { status, header: msg.headers.get("Nats-Service-Error"), ...jc.decode(msg.data) } };
  }
  return { result: jc.decode(msg.data) };
}

// 1. The tool catalog of every running server.
const { result: list } = await call(`${prefix}.tools.list`, {});
for (const t of list.tools) {
  console.log(`tool ${t.name} -> ${t.subject}`);
}

// 2. A tool call: the body is the tool's arguments, the reply a CallToolResult.
const { result: echo } = await call(`${prefix}.call.everything.echo`, { message: "hi" });
console.log(`echo: ${echo.content[0].text}`);

// 3. Errors come back as a reply with Nats-Service-Error-Code / Nats-Service-Error
//    headers and a JSON body {code, message, field}.
const { error } = await call(`${prefix}.call.everything.no-such-tool`, {});
if (!error) throw new Error("no-such-tool answered without an error");
console.log(`error: ${error.status} ${error.code}: ${error.message}`);

// 4. Progress: subscribe an inbox, name it in Mcp-Progress-Subject.
const inbox = createInbox(inboxPrefix);
const progress = nc.subscribe(inbox, {
  callback: (err, m) => {
    if (!err) {
      const p = jc.decode(m.data);
      console.log(`progress ${p.progress}/${p.total}`);
    }
  },
});
const h = headers();
h.set("Mcp-Request-Id", randomUUID());
h.set("Mcp-Progress-Subject", inbox);
h.set("Mcp-Timeout-Ms", "10000"); // the runner gives up after this long
const { result: long } = await call(
  `${prefix}.call.everything.trigger-long-running-operation`,
  { duration: 0.6, steps: 3 },
  { hdrs: h, timeout: 10_000 },
);
console.log(`long: ${long.content[0].text}`);
progress.unsubscribe();

// 5. Cancellation: publish the request id to <prefix>.cancel.<server>. Waiting
//    for the first progress message makes sure the call is already running.
const id = randomUUID();
const started = createInbox(inboxPrefix);
const firstProgress = nc.subscribe(started, { max: 1 });
const ch = headers();
ch.set("Mcp-Request-Id", id);
ch.set("Mcp-Progress-Subject", started);
const pending = call(
  `${prefix}.call.everything.trigger-long-running-operation`,
  { duration: 30, steps: 60 },
  { hdrs: ch },
);
for await (const _ of firstProgress) {
  nc.publish(`${prefix}.cancel.everything`, jc.encode({ request_id: id }));
}
const { error: cancelled } = await pending;
if (!cancelled) throw new Error("the cancelled call answered without an error");
console.log(`cancel: ${cancelled.status} ${cancelled.code}: ${cancelled.message}`);

// 6. A server outside the agent's globs (demo may call everything__* only):
// the bus refuses the publish, and nats.js fails the request with a
// permissions violation at once. An agent whose globs name every server
// ("*") gets NATS's "no responders" for a server nobody runs instead.
try {
  await nc.request(`${prefix}.call.nosuch.echo`, jc.encode({}), { timeout: 5_000 });
} catch (e) {
  const err = /** @type {import("nats").NatsError} */ (e);
  if (err.code === ErrorCode.PermissionsViolation) console.log("nosuch: not allowed for this agent");
  else if (err.code === ErrorCode.NoResponders) console.log("nosuch: no responders");
  else console.log(`nosuch: ${err.message}`);
}

await nc.drain();
