// The A2A 1.0 JavaScript SDK (@a2a-js/sdk) against the daemon, for tests/a2a.rs.
//
// Usage: SA_TEST_A2A_JS=<node_modules dir> node client.mjs BASE_URL TOKEN.
// Sends (blocking and streaming), gets, lists, cancels, subscribes, answers
// an approval and provokes the errors; prints one JSON object with what it
// saw, or fails.

import { randomUUID } from "node:crypto";
import { pathToFileURL } from "node:url";

const modules = process.env.SA_TEST_A2A_JS;
if (!modules) throw new Error("SA_TEST_A2A_JS (the node_modules holding @a2a-js/sdk) is not set");
const sdk = await import(pathToFileURL(`${modules}/@a2a-js/sdk/dist/client/index.js`).href);
const [base, token] = process.argv.slice(2);

const authedFetch = (key) => (url, init = {}) => {
  const headers = new Headers(init.headers);
  headers.set("Authorization", `Bearer ${key}`);
  return fetch(url, { ...init, headers });
};

function factory(key) {
  const fetchImpl = authedFetch(key);
  return new sdk.ClientFactory(
    sdk.ClientFactoryOptions.createFrom(sdk.ClientFactoryOptions.default, {
      transports: [new sdk.JsonRpcTransportFactory({ fetchImpl })],
      cardResolver: new sdk.DefaultAgentCardResolver({ fetchImpl }),
    }),
  );
}

const client = (bundle, key = token) => factory(key).createFromUrl(`${base}/a2a/${bundle}/`);

function message(text, extra = {}) {
  return {
    message: {
      messageId: randomUUID(),
      role: 1, // ROLE_USER
      parts: [{ content: { $case: "text", value: text } }],
      ...extra,
    },
  };
}

// The task of a result (SendMessage answers with a task or a message).
const taskOf = (result) => (result.payload ? result.payload.value : result);
const stateName = (state) => (typeof state === "number" ? ["UNSPECIFIED", "SUBMITTED", "WORKING", "COMPLETED", "FAILED", "CANCELED", "INPUT_REQUIRED", "REJECTED", "AUTH_REQUIRED"][state] : String(state).replace("TASK_STATE_", ""));
const answerOf = (task) => (task.artifacts || []).flatMap((a) => a.parts).map((p) => p.content?.value ?? "").join("");

async function collect(stream) {
  const seen = [];
  for await (const event of stream) {
    const { $case, value } = event.payload;
    if ($case === "task") seen.push(["task", stateName(value.status.state), value.id]);
    if ($case === "statusUpdate") seen.push(["status", stateName(value.status.state)]);
    if ($case === "artifactUpdate") seen.push(["artifact", value.artifact.parts.map((p) => p.content?.value ?? "").join(""), value.lastChunk ?? false, value.append ?? false]);
  }
  return seen;
}

async function errorOf(promise) {
  try {
    await promise;
    return "no error";
  } catch (e) {
    return `${e.constructor.name}: ${e.message}`;
  }
}

const seen = {};
const greeter = await client("greeter");
const done = taskOf(await greeter.sendMessage(message("hi")));
seen.send = { state: stateName(done.status.state), answer: answerOf(done) };
seen.stream = await collect(greeter.sendMessageStream(message("hello")));
const got = await greeter.getTask({ id: done.id });
seen.get = { state: stateName(got.status.state), answer: answerOf(got) };
const listed = await greeter.listTasks({ contextId: done.contextId, pageSize: 10 });
seen.list = listed.tasks.map((t) => t.id);
seen.task_id = done.id;

const sleeper = await client("sleeper");
const queued = taskOf(await sleeper.sendMessage({ ...message("slow please"), configuration: { returnImmediately: true } }));
seen.immediate = stateName(queued.status.state);
let cancelled = await sleeper.cancelTask({ id: queued.id });
while (stateName(cancelled.status.state) !== "CANCELED") {
  await new Promise((r) => setTimeout(r, 200));
  cancelled = await sleeper.getTask({ id: queued.id });
}
seen.cancelled = stateName(cancelled.status.state);

const bank = await client("bank");
const parked = await collect(bank.sendMessageStream(message("a big transfer")));
seen.parked = parked;
const taskId = parked[0][2];
seen.subscribed = await collect(bank.resubscribeTask({ id: taskId }));
const approved = taskOf(await bank.sendMessage(message("approve", { taskId })));
seen.approved = { state: stateName(approved.status.state), answer: answerOf(approved) };

seen.unknown_task = await errorOf(greeter.getTask({ id: "no-such-task" }));
seen.wrong_key = await errorOf(client("greeter", "sa_wrong"));
console.log(JSON.stringify(seen));
