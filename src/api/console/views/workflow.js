// A workflow's stages as a graph: each stage it has (from its events) a
// node, each transition it took an edge labelled with the event that took
// it (and how often), and the current position marked — the stage it runs
// now, or where it finished.

import { h } from "../dom.js";

/** `{nodes: [{name, visits, current, final}], edges: Map(name → [{to, event, count}])}`, or null. */
export function graph(events) {
  const start = events.find((e) => e.type === "WorkflowStart");
  if (!start) return null;
  const nodes = new Map();
  const edges = new Map();
  const node = (name) => {
    if (!nodes.has(name)) nodes.set(name, { name, visits: 0, current: false, final: false });
    return nodes.get(name);
  };
  node(start.stage);
  let position = start.stage;
  let end = null;
  for (const e of events) {
    if (e.type === "WorkflowStart") position = e.stage;
    if (e.type === "StageEnd") {
      node(e.stage).visits += e.ran === false ? 0 : 1;
      node(e.next);
      const out = edges.get(e.stage) || [];
      const edge = out.find((x) => x.to === e.next && x.event === e.event);
      if (edge) edge.count += 1;
      else out.push({ to: e.next, event: e.event, count: 1 });
      edges.set(e.stage, out);
      position = e.next;
    }
    if (e.type === "WorkflowEnd") end = e;
  }
  if (end) node(end.stage).final = true;
  else node(position).current = true;
  return { nodes: [...nodes.values()], edges, end };
}

export function draw(g) {
  return h(
    "div",
    { class: "workflow-graph", role: "list", "aria-label": "workflow stages" },
    g.nodes.map((n) =>
      h(
        "div",
        { class: `stage-node${n.current ? " current" : ""}${n.final ? " final" : ""}${n.visits ? " visited" : ""}`, role: "listitem", dataset: { stage: n.name } },
        h("b", {}, n.name),
        n.current ? h("span", { class: "badge live" }, "current") : null,
        n.final ? h("span", { class: "badge" }, `ended: ${g.end.outcome}`) : null,
        // `finish` and `fatal` are where a workflow ends, not stages that run.
        ["finish", "fatal"].includes(n.name) ? null : h("span", { class: "muted" }, ` ran ${n.visits}×`),
        h("ul", { class: "edges" }, (g.edges.get(n.name) || []).map((e) => h("li", {}, `→ ${e.to}`, h("span", { class: "muted" }, ` on ${e.event}${e.count > 1 ? ` ×${e.count}` : ""}`)))),
      ),
    ),
  );
}
