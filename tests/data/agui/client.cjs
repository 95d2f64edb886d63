// `@ag-ui/client`'s HttpAgent against the daemon's POST /v1/agui/{bundle}:
// runs the bundle, gets the interrupt for an approval, resumes it with
// resume[] (approving), and the run finishes. Prints one JSON object: the
// events of each run, the pending interrupts, the result and messages.
//
// Usage: node client.cjs AGUI_MODULE_DIR URL
const path = require("path");
const [moduleDir, url] = process.argv.slice(2);
const { HttpAgent } = require(path.join(moduleDir, "@ag-ui/client"));

async function run(agent, params) {
  const events = [];
  const result = await agent.runAgent(params, {
    onEvent: ({ event }) => {
      events.push(event);
    },
  });
  return { events, result: result.result, pending: agent.pendingInterrupts };
}

(async () => {
  const agent = new HttpAgent({
    url,
    initialMessages: [{ id: "m1", role: "user", content: "Pay Bob 250." }],
  });
  const first = await run(agent, { runId: "run-1" });
  const resume = first.pending.map((interrupt) => ({
    interruptId: interrupt.id,
    status: "resolved",
    payload: { approved: true },
  }));
  const second = await run(agent, { runId: "run-2", resume });
  console.log(JSON.stringify({
    first,
    second,
    messages: agent.messages,
  }));
})().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
