// What a running job is doing right now, from its event stream's `progress`
// frames (never stored): a model call or a tool call in progress, with
// its elapsed time ticking, and what it waits for (a lease, an approval, a
// backoff, a model slot). A call leaves when its `*_ended` frame or its
// stored event arrives; everything leaves when the attempt ends.

import { h, fill, duration, millis } from "../dom.js";

export function create() {
  return { calls: new Map(), waits: new Map() };
}

/** Takes one `progress` frame. */
export function onProgress(live, p) {
  const run = p.run_id;
  switch (p.kind) {
    case "model_call_started":
      live.calls.set(`m|${run}|${p.turn}`, { kind: "model", run, turn: p.turn, at: p.at, model: p.model, attempt: p.attempt, messages: p.messages });
      break;
    case "model_call_ended":
      live.calls.delete(`m|${run}|${p.turn}`);
      break;
    case "tool_call_started":
      live.calls.set(`t|${run}|${p.call_id}`, { kind: "tool", run, turn: p.turn, at: p.at, tool: p.tool, callId: p.call_id });
      break;
    case "tool_call_ended":
      live.calls.delete(`t|${run}|${p.call_id}`);
      break;
    case "waiting":
      live.waits.set(`${run}|${p.for}`, { run, for: p.for, at: p.at, until: p.until, tool: p.tool, callId: p.call_id });
      break;
    case "waiting_ended":
      live.waits.delete(`${run}|${p.for}`);
      break;
  }
}

/** A stored event ends the live calls it records. */
export function onStored(live, e, jobId) {
  if (e.type === "ModelResponse") live.calls.delete(`m|${e.run_id}|${e.turn}`);
  else if (e.type === "ToolResult") live.calls.delete(`t|${e.run_id}|${e.call_id}`);
  else if (e.type === "KernelEnd") {
    for (const [key, c] of live.calls) if (c.run === e.run_id) live.calls.delete(key);
  } else if (e.type === "JobState" && e.run_id === jobId) {
    // A state change ends what began before it: every wait (a new attempt
    // ends the backoff or approval wait that led to it), and every call
    // unless the job runs. What began after it stays: the stream may carry
    // a live frame of the next attempt ahead of this stored event.
    const changed = Date.parse(e.timestamp);
    const before = (item) => !(Date.parse(item.at) > changed);
    for (const [key, w] of live.waits) if (before(w)) live.waits.delete(key);
    if (e.state !== "running") for (const [key, c] of live.calls) if (before(c)) live.calls.delete(key);
  }
}

/** Whether anything is in progress. */
export function busy(live) {
  return live.calls.size > 0 || live.waits.size > 0;
}

/** Draws what is in progress into `root` (empty when nothing is). */
export function draw(root, live, jobId) {
  if (!busy(live)) {
    fill(root);
    return;
  }
  const where = (run) => (run === jobId ? "" : ` in ${run.slice(jobId.length + 1)}`);
  const items = [...live.calls.values()].map((c) =>
    h(
      "li",
      { class: `in-progress-${c.kind}`, dataset: { kind: c.kind } },
      h("span", { class: "badge live" }, "in progress"),
      " ",
      c.kind === "model" ? `Model call${c.model ? ` to ${c.model}` : ""} (turn ${c.turn}${c.attempt > 1 ? `, try ${c.attempt}` : ""})${where(c.run)}` : `ƒ ${c.tool} (turn ${c.turn})${where(c.run)}`,
      " · ",
      h("b", { class: "elapsed", dataset: { since: c.at } }, duration(Date.now() - millis(c.at))),
    ),
  );
  const waits = [...live.waits.values()].map((w) =>
    h(
      "li",
      { class: "in-progress-wait", dataset: { kind: "wait" } },
      h("span", { class: "badge resumed" }, "waiting"),
      ` for ${String(w.for).replaceAll("_", " ")}${w.tool ? ` (ƒ ${w.tool})` : ""}${where(w.run)}${w.until ? ` until ${new Date(millis(w.until)).toLocaleTimeString()}` : ""} · `,
      h("b", { class: "elapsed", dataset: { since: w.at } }, duration(Date.now() - millis(w.at))),
    ),
  );
  fill(root, h("section", { class: "card live-now", "aria-live": "polite" }, h("h2", {}, "Now"), h("ul", { class: "plain" }, items, waits)));
}

/** Moves every elapsed clock under `root` on. */
export function tick(root) {
  for (const el of root.querySelectorAll(".elapsed[data-since]")) el.textContent = duration(Date.now() - millis(el.dataset.since));
}
