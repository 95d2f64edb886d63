// LangGraph's JS SDK (@langchain/langgraph-sdk, installed by ./scripts/test into
// ~/.cache/structured-agents/langgraph-js) against the daemon: one scenario per
// argument (the assistants a key sees; a custom assistant; its threads; runs; streamed runs; the store; crons; a thread's stream). Prints one JSON object for
// tests/langgraph.rs to check.
//
// Usage: node client.cjs SDK_MODULE_DIR URL API_KEY SCENARIO
const path = require("path");
const [moduleDir, apiUrl, apiKey, scenario] = process.argv.slice(2);
const { Client, ProtocolWebSocketTransportAdapter } = require(
  path.join(moduleDir, "@langchain/langgraph-sdk"),
);
// Node 20 has no WebSocket of its own: the `ws` package, which can send the key.
const WebSocket = require(path.join(moduleDir, "ws"));

// The HTTP status a call ended with (200 when it answered).
async function statusOf(call) {
  try {
    await call;
    return 200;
  } catch (e) {
    return e.status ?? String(e);
  }
}

async function assistants(client) {
  const all = await client.assistants.search({ limit: 100 });
  const paged = await client.assistants.search({ limit: 1, includePagination: true });
  const calc = await client.assistants.get("calc");
  const graph = await client.assistants.getGraph(calc.assistant_id);
  const schemas = await client.assistants.getSchemas(calc.assistant_id);
  const count = await client.assistants.count({ graphId: "calc" });
  const versions = await client.assistants.getVersions("calc");
  return {
    names: all.map((a) => a.graph_id).sort(),
    paged: { length: paged.assistants.length, next: paged.next },
    calc,
    nodes: graph.nodes.map((n) => n.id),
    context: schemas.context_schema,
    count,
    versions: versions.map((v) => v.metadata.bundle_version),
    hidden: await statusOf(client.assistants.get("secret")),
  };
}

async function threads(client) {
  const made = await client.threads.create({ threadId: "js-one", metadata: { ui: "js" } });
  const updated = await client.threads.update("js-one", { metadata: { seen: true } });
  const chat = await client.threads.get("chat-1");
  const found = await client.threads.search({ metadata: { ui: "js" } });
  const count = await client.threads.count({ status: "interrupted" });
  await client.threads.delete("js-one");
  const state = await client.threads.getState("chat-1");
  const history = await client.threads.getHistory("chat-1", { limit: 100 });
  return {
    state,
    history: history.map((s) => s.checkpoint.checkpoint_id),
    made,
    updated,
    chat,
    found: found.map((t) => t.thread_id),
    count,
    again: await statusOf(client.threads.create({ threadId: "chat-1" })),
    gone: await statusOf(client.threads.get("js-one")),
  };
}

async function runs(client) {
  const thread = (await client.threads.create()).thread_id;
  const input = { messages: [{ type: "human", content: "2+3" }] };
  const created = await client.runs.create(thread, "adder", { input });
  const joined = await client.runs.join(thread, created.run_id);
  const waited = await client.runs.wait(thread, "adder", {
    input: { messages: [{ type: "human", content: "again" }] },
  });
  const listed = await client.runs.list(thread);
  const hello = { messages: [{ role: "user", content: "hello" }] };
  const stateless = await client.runs.wait(null, "adder", { input: hello });
  // Double texting with `enqueue`: pending until the run ahead ends.
  const queueing = (await client.threads.create()).thread_id;
  const ahead = await client.runs.create(queueing, "adder", {
    input: { messages: [{ type: "human", content: "slowly" }] },
  });
  const queued = await client.runs.create(queueing, "adder", {
    input: hello,
    multitaskStrategy: "enqueue",
  });
  const pending = (await client.runs.get(queueing, queued.run_id)).status;
  await client.runs.cancel(queueing, ahead.run_id);
  return {
    created,
    joined,
    waited,
    listed: listed.map((r) => r.status),
    stateless,
    enqueued: { pending, joined: await client.runs.join(queueing, queued.run_id) },
  };
}

// A stream's parts as [event, data, id] (the id as the SSE spec keeps it:
// the last one sent).
async function collect(parts) {
  const all = [];
  for await (const part of parts) all.push([part.event, part.data, part.id ?? null]);
  return all;
}

async function stream(client) {
  const thread = (await client.threads.create()).thread_id;
  const streamMode = ["values", "updates", "messages-tuple"];
  let runId;
  const parts = await collect(
    client.runs.stream(thread, "adder", {
      input: { messages: [{ type: "human", content: "2+3" }] },
      streamMode,
      onRunCreated: (meta) => {
        runId = meta.run_id;
      },
    }),
  );
  const middle = parts[Math.floor(parts.length / 2)][2];
  return {
    runId,
    parts,
    middle,
    rest: await collect(client.runs.joinStream(thread, runId, { lastEventId: middle, streamMode })),
    whole: await collect(client.runs.joinStream(thread, runId, { lastEventId: "-1" })),
    state: await client.threads.getState(thread),
  };
}

async function interrupt(client) {
  const thread = (await client.threads.create()).thread_id;
  const parked = await collect(
    client.runs.stream(thread, "payer", {
      input: { messages: [{ type: "human", content: "pay 5" }] },
      streamMode: ["updates"],
    }),
  );
  const state = await client.threads.getState(thread);
  const resumed = await client.runs.wait(thread, "payer", {
    command: { resume: { type: "approve" } },
  });
  return { parked, state, resumed };
}

async function store(client) {
  const s = client.store;
  await s.putItem(["js", "notes"], "n1", { title: "Durable agents", year: 2026 });
  await s.putItem(["js", "notes"], "n2", { title: "Rust", year: 2024 }, { index: false });
  await s.putItem(["js", "brief"], "b", { text: "soon gone" }, { ttl: 5 });
  const got = await s.getItem(["js", "notes"], "n1");
  const result = {
    got,
    unrefreshed: await s.getItem(["js", "brief"], "b", { refreshTtl: false }),
    missing: await statusOf(s.getItem(["js", "notes"], "none")),
    search: await s.searchItems(["js"], { filter: { year: { $lt: 2025 } } }),
    query: await s.searchItems(["js"], { query: "durable" }),
    namespaces: await s.listNamespaces({ prefix: ["js"], maxDepth: 2 }),
  };
  await s.deleteItem(["js", "notes"], "n1");
  result.deleted = await statusOf(s.getItem(["js", "notes"], "n1"));
  return result;
}

async function crons(client) {
  const input = { messages: [{ role: "user", content: "hello" }] };
  const made = await client.crons.create("adder", {
    schedule: "0 9 * * *",
    input,
    metadata: { from: "js" },
  });
  const result = {
    made,
    search: await client.crons.search({ assistantId: "adder" }),
    count: await client.crons.count({ assistantId: "adder" }),
  };
  await client.crons.delete(made.cron_id);
  result.after = await client.crons.count();
  return result;
}

// A custom assistant over bundle `plain` with its variable `lang`: made, run,
// changed, picked back, deleted.
async function custom(client) {
  const made = await client.assistants.create({
    graphId: "plain",
    config: { configurable: { lang: "French" } },
    metadata: { team: "js" },
    name: "french",
  });
  const id = made.assistant_id;
  const hello = { messages: [{ role: "user", content: "hello" }] };
  const french = await client.runs.wait(null, id, { input: hello });
  const updated = await client.assistants.update(id, { context: { lang: "German" } });
  const german = await client.runs.wait(null, id, { input: hello });
  const versions = await client.assistants.getVersions(id);
  const picked = await client.assistants.setLatest(id, 1);
  const result = {
    made,
    french,
    updated,
    german,
    versions: versions.map((v) => v.version),
    picked,
    unread: await statusOf(client.assistants.create({ graphId: "plain", context: { colour: "red" } })),
  };
  await client.assistants.delete(id);
  result.gone = await statusOf(client.assistants.get(id));
  return result;
}

// The Agent Protocol's thread streaming (client.threads.stream): a run started on
// a thread the SDK names, its output and its state read by commands.
async function threadStream(client) {
  const thread = client.threads.stream({ assistantId: "adder" });
  const started = await thread.run.start({
    input: { messages: [{ role: "user", content: "2+3" }] },
  });
  const output = await thread.output;
  const state = await thread.state.get({ namespace: [] });
  const checkpoints = await thread.state.listCheckpoints({ limit: 2 });
  await thread.close();
  return { started, output, state, checkpoints, thread_id: thread.threadId };
}

// The same over a WebSocket: the SDK's transport given a factory whose socket
// sends the key (a platform WebSocket sends no headers).
async function threadSocket(client) {
  const transport = new ProtocolWebSocketTransportAdapter({
    apiUrl,
    webSocketFactory: (url) => new WebSocket(url, { headers: { "x-api-key": apiKey } }),
  });
  const thread = client.threads.stream({ assistantId: "adder", transport });
  const started = await thread.run.start({
    input: { messages: [{ role: "user", content: "2+3" }] },
  });
  const output = await thread.output;
  await thread.close();
  const refused = new ProtocolWebSocketTransportAdapter({
    apiUrl,
    webSocketFactory: (url) => new WebSocket(url, { headers: { "x-api-key": "sa_wrong" } }),
    maxReconnectAttempts: 0,
  });
  const denied = await statusOf(
    client.threads.stream({ assistantId: "adder", transport: refused }).run.start({
      input: { messages: [{ role: "user", content: "2+3" }] },
    }),
  );
  return { started, output, thread_id: thread.threadId, denied };
}

// The same, parked for a person: the interrupt the stream requests (its output
// the values at the park), answered with input.respond (an edit); the run goes
// on to its end, which joining it waits for (a ThreadStream's output is its
// first stop's).
async function threadInterrupt(client) {
  const thread = client.threads.stream({ assistantId: "payer" });
  const started = await thread.run.start({
    input: { messages: [{ role: "user", content: "pay 5" }] },
  });
  const parked = await thread.output;
  const interrupts = thread.interrupts.map((i) => ({ ...i }));
  const interrupted = thread.interrupted;
  const edit = { type: "edit", edited_action: { name: "pay", args: { amount: 7 } } };
  await thread.input.respond({
    interrupt_id: interrupts[0].interruptId,
    namespace: interrupts[0].namespace,
    response: edit,
  });
  const output = await client.runs.join(thread.threadId, started.run_id);
  await thread.close();
  return { parked, interrupts, interrupted, output, thread_id: thread.threadId };
}

async function main() {
  const client = new Client({ apiUrl, apiKey, callerOptions: { maxRetries: 0 } });
  const scenarios = {
    assistants, threads, runs, stream, interrupt, store, crons, custom, threadStream,
    threadSocket, threadInterrupt,
  };
  console.log(JSON.stringify(await scenarios[scenario](client)));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
