// LangGraph's JS SDK (@langchain/langgraph-sdk, installed by ./scripts/test into
// ~/.cache/structured-agents/langgraph-js) against the daemon: the assistants a key
// sees. Prints one JSON object for tests/langgraph.rs to check.
//
// Usage: node client.cjs SDK_MODULE_DIR URL API_KEY
const path = require("path");
const [moduleDir, apiUrl, apiKey] = process.argv.slice(2);
const { Client } = require(path.join(moduleDir, "@langchain/langgraph-sdk"));

async function main() {
  const client = new Client({ apiUrl, apiKey, callerOptions: { maxRetries: 0 } });
  const all = await client.assistants.search({ limit: 100 });
  const paged = await client.assistants.search({ limit: 1, includePagination: true });
  const calc = await client.assistants.get("calc");
  const graph = await client.assistants.getGraph(calc.assistant_id);
  const schemas = await client.assistants.getSchemas(calc.assistant_id);
  const count = await client.assistants.count({ graphId: "calc" });
  const versions = await client.assistants.getVersions("calc");
  let hidden = null;
  try {
    await client.assistants.get("secret");
  } catch (e) {
    hidden = e.status ?? String(e);
  }
  console.log(JSON.stringify({
    names: all.map((a) => a.graph_id).sort(),
    paged: { length: paged.assistants.length, next: paged.next },
    calc,
    nodes: graph.nodes.map((n) => n.id),
    context: schemas.context_schema,
    count,
    versions: versions.map((v) => v.metadata.bundle_version),
    hidden,
  }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
