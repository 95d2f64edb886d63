// The `openai` npm package against the daemon's /v1/responses: a background
// response cancelled with `client.responses.cancel(id)`, which POSTs with no
// body and no Content-Type, then an unknown response's error. Prints one JSON
// object: the statuses seen and the error's status and code.
//
// Usage: node cancel.cjs OPENAI_MODULE_DIR BASE_URL MODEL
const path = require("path");
const [moduleDir, base, model] = process.argv.slice(2);
const OpenAI = require(path.join(moduleDir, "openai")).default;

async function main() {
  const client = new OpenAI({ baseURL: base, apiKey: "unused", maxRetries: 0, timeout: 30000 });
  const started = await client.responses.create({ model, input: "What is x?", background: true });
  const cancelled = await client.responses.cancel(started.id);
  let status = cancelled.status;
  const deadline = Date.now() + 30000;
  while (!["cancelled", "completed", "failed"].includes(status) && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    status = (await client.responses.retrieve(started.id)).status;
  }
  let missing = null;
  try {
    await client.responses.retrieve("resp_nope");
  } catch (e) {
    missing = { status: e.status, code: e.code };
  }
  console.log(JSON.stringify({ started: started.status, id: started.id, final: status, missing }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
