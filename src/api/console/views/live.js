// What a running job is doing right now, from its event stream's `progress`
// frames (never stored): a model call or a tool call in progress, with
// its elapsed time ticking, and what it waits for (a lease, an approval, a
// backoff, a model slot). A call leaves when its `*_ended` frame or its
// stored event arrives; everything leaves when the attempt ends.
// The same frames are also the timeline's steps ahead of the store: a
// run's events are stored only with its next durable write (seconds later
// when the next model call is slow), so each frame is kept as the event
// it announces (`ModelRequest`, `ToolCall`, `ToolResult`, marked `live`)
// until that event is stored, and the timeline draws it meanwhile.

import { h, fill, duration, millis } from "../dom.js";
import { serverNow } from "../api.js";

export function create() {
  return { calls: new Map(), waits: new Map(), ahead: new Map() };
}

/** The key of the step a stored or announced event records. */
function stepKey(e) {
  const call = e.type === "ToolCall" || e.type === "ToolResult" ? `|${e.call_id}` : "";
  return `${e.type}|${e.run_id}|${e.turn}${call}`;
}

/** Keeps the event a frame announces until the stored one replaces it. */
function announce(live, p, event) {
  const e = { run_id: p.run_id, turn: p.turn, timestamp: p.at, live: true, ...event };
  live.ahead.set(stepKey(e), e);
}

/** Takes one `progress` frame. */
export function onProgress(live, p) {
  const run = p.run_id;
  switch (p.kind) {
    case "model_call_started":
      live.calls.set(`m|${run}|${p.turn}`, { kind: "model", run, turn: p.turn, at: p.at, model: p.model, attempt: p.attempt, messages: p.messages });
      announce(live, p, { type: "ModelRequest", model: p.model });
      break;
    case "model_call_ended": {
      live.calls.delete(`m|${run}|${p.turn}`);
      const request = live.ahead.get(stepKey({ type: "ModelRequest", run_id: run, turn: p.turn }));
      if (request && p.ok) request.replied = p.at;
      break;
    }
    case "tool_call_started":
      live.calls.set(`t|${run}|${p.call_id}`, { kind: "tool", run, turn: p.turn, at: p.at, tool: p.tool, callId: p.call_id });
      announce(live, p, { type: "ToolCall", call_id: p.call_id, tool_name: p.tool, arguments: p.arguments });
      break;
    case "tool_call_ended":
      live.calls.delete(`t|${run}|${p.call_id}`);
      // A frame of a daemon older than `output` says only whether it worked.
      if (p.output !== undefined) {
        announce(live, p, { type: "ToolResult", call_id: p.call_id, tool_name: p.tool, is_error: !p.ok, output_preview: p.output, duration_ms: p.duration_ms, error_type: p.error_type });
      }
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
  live.ahead.delete(stepKey(e));
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
    // An attempt's end stores every event of its steps, and a new attempt
    // starts after the last one ended or crashed: what is still announced
    // from before either (a call a park ended) never will be stored.
    for (const [key, a] of live.ahead) if (!(Date.parse(a.timestamp) > changed)) live.ahead.delete(key);
    if (e.state !== "running") for (const [key, c] of live.calls) if (before(c)) live.calls.delete(key);
  }
}

/**
 * The steps of the job's runs that frames announced and the store does not
 * hold yet (in the order they happened), for the timeline to draw after
 * `events`: only of runs the stored events know (a nested run is hung
 * under its call by its stored start) or of the job's own run.
 */
export function ahead(live, events, jobId) {
  if (!live.ahead.size) return [];
  const stored = new Set(events.map(stepKey));
  const runs = new Set(events.map((e) => e.run_id));
  return [...live.ahead.values()].filter((e) => !stored.has(stepKey(e)) && (e.run_id === jobId || runs.has(e.run_id)));
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
      h("b", { class: "elapsed", dataset: { since: c.at } }, duration(serverNow() - millis(c.at))),
    ),
  );
  const waits = [...live.waits.values()].map((w) =>
    h(
      "li",
      { class: "in-progress-wait", dataset: { kind: "wait" } },
      h("span", { class: "badge resumed" }, "waiting"),
      ` for ${String(w.for).replaceAll("_", " ")}${w.tool ? ` (ƒ ${w.tool})` : ""}${where(w.run)}${w.until ? ` until ${new Date(millis(w.until)).toLocaleTimeString()}` : ""} · `,
      h("b", { class: "elapsed", dataset: { since: w.at } }, duration(serverNow() - millis(w.at))),
    ),
  );
  fill(root, h("section", { class: "card live-now", "aria-live": "polite" }, h("h2", {}, "Now"), h("ul", { class: "plain" }, items, waits)));
}

/** Moves every elapsed clock under `root` on. */
export function tick(root) {
  for (const el of root.querySelectorAll(".elapsed[data-since]")) el.textContent = duration(serverNow() - millis(el.dataset.since));
}
