// A job's timeline, built from its event stream: runs (the job's own and
// the nested ones an agent tool, a workflow stage or a group-chat reply
// started), each a sequence of turns and markers; each turn the model's
// request and reply (or the tokens streaming in) and its tool calls with
// their arguments, results, traces and the runs they started, folded.
// `build` is pure (events in, tree out); `draw` turns the tree into DOM.

import { h, compact, pretty, duration, millis, count } from "../dom.js";

/** Events that open a turn of their run. */
const TURN_EVENTS = new Set(["ModelRequest", "ModelResponse", "ToolCall", "ToolResult", "ToolTrace", "TurnComplete", "ParseError"]);
const APPROVAL_REQUESTED = new Set(["ApprovalRequested", "approval_requested"]);
const APPROVAL_DECIDED = new Set(["ApprovalDecided", "approval_decided"]);

/** The run tree of `events` (stored envelopes, in sequence order). */
export function build(events) {
  const runs = new Map();
  const calls = new Map(); // `${run}|${turn}|${call_id}` → call
  const run = (e) => {
    let r = runs.get(e.run_id);
    if (!r) {
      r = { id: e.run_id, bundle: e.bundle, version: e.bundle_version, parent: e.parent, items: [], turns: new Map(), era: 0, start: null, end: null, first: e.timestamp, last: e.timestamp, stages: [], loose: [] };
      runs.set(e.run_id, r);
    }
    r.last = e.timestamp;
    return r;
  };
  const turnOf = (r, e) => {
    const key = `${r.era}|${e.turn}`;
    let t = r.turns.get(key);
    if (!t) {
      t = { kind: "turn", turn: e.turn, resumed: r.era > 0, request: null, response: null, calls: [], parseErrors: [], complete: null, first: e.timestamp };
      r.turns.set(key, t);
      r.items.push(t);
    }
    return t;
  };
  for (const e of events) {
    const r = run(e);
    const known = (e.type === "ToolResult" || e.type === "ToolTrace") && calls.get(`${r.id}|${e.turn}|${e.call_id}`);
    if (known) {
      // A call started before a resume ends after it: it stays in its turn.
      if (e.type === "ToolTrace") known.traces.push(e);
      else if (!known.result) known.result = e;
      else turnEvent(r, turnOf(r, e), e, calls);
    } else if (TURN_EVENTS.has(e.type)) {
      turnEvent(r, turnOf(r, e), e, calls);
    } else if (APPROVAL_REQUESTED.has(e.type) || APPROVAL_DECIDED.has(e.type)) {
      const call = findCall(calls, r.id, e);
      if (call) call.approvals.push(e);
      else r.items.push({ kind: "marker", event: e });
    } else if (e.type === "KernelStart") {
      r.start = e;
    } else if (e.type === "KernelEnd") {
      r.end = e;
      r.items.push({ kind: "marker", event: e });
    } else if (e.type === "Resumed") {
      r.era += 1;
      r.items.push({ kind: "marker", event: e });
    } else if (e.type === "StageEnd") {
      const stage = { kind: "stage", event: e, runs: [] };
      r.stages.push(stage);
      r.items.push(stage);
    } else {
      // JobState, WorkflowStart, WorkflowEnd and any kind this console does
      // not know yet: shown in place, with all its fields.
      r.items.push({ kind: "marker", event: e });
    }
  }
  const root = nest(runs, calls);
  if (root) {
    root.latest = events[events.length - 1].timestamp;
    root.runs = runs;
  }
  return root;
}

function turnEvent(r, t, e, calls) {
  switch (e.type) {
    case "ModelRequest":
      t.request = e;
      break;
    case "ModelResponse":
      t.response = e;
      break;
    case "ToolCall": {
      const call = { call: e, result: null, traces: [], approvals: [], runs: [], turn: e.turn };
      calls.set(`${r.id}|${e.turn}|${e.call_id}`, call);
      t.calls.push(call);
      break;
    }
    case "ToolResult": {
      const call = calls.get(`${r.id}|${e.turn}|${e.call_id}`);
      if (call && !call.result) call.result = e;
      else t.calls.push({ call: null, result: e, traces: [], approvals: [], runs: [], turn: e.turn });
      break;
    }
    case "ToolTrace": {
      const call = calls.get(`${r.id}|${e.turn}|${e.call_id}`);
      if (call) call.traces.push(e);
      break;
    }
    case "TurnComplete":
      t.complete = e;
      break;
    case "ParseError":
      t.parseErrors.push(e);
      break;
  }
}

function findCall(calls, runId, e) {
  const id = e.call_id || e.call;
  for (const [key, call] of calls) {
    if (key.startsWith(`${runId}|`) && key.endsWith(`|${id}`)) return call;
  }
  return null;
}

/**
 * Where a call parked in the run of journal scope `scope` (`""` for the
 * job's own run, `1:0/` for the run its turn 1's first call started, and
 * so on down) asks: `{bundle, path}`, the bundle whose tool it is and the
 * way to it from the job's bundle (`["parent", "ƒ banker", "bank"]`); null
 * until the events of that run are in.
 */
export function parkedIn(events, jobId, scope) {
  const root = events.length ? build(events) : null;
  let r = root?.runs.get(scope ? `${jobId}/${scope.replace(/\/$/, "")}` : jobId);
  if (!r) return null;
  const bundle = r.bundle;
  const path = [];
  while (r) {
    path.unshift(r.bundle);
    if (!r.parent) break;
    const parent = root.runs.get(r.parent.run_id);
    const call = parent?.items.flatMap((i) => i.calls || []).find((c) => c.call?.call_id === r.parent.call_id);
    path.unshift(`ƒ ${call?.call.tool_name || r.parent.call_id}`);
    r = parent;
  }
  return { bundle, path };
}

/**
 * Hangs every nested run under what started it: an agent call (matched by
 * turn and call id, since a model may repeat ids across turns), a workflow
 * stage (key `s<step>-<stage>`) or a group-chat reply (its call id).
 */
function nest(runs, calls) {
  let root = null;
  for (const r of runs.values()) {
    if (!r.parent) {
      root = root || r;
      continue;
    }
    const parent = runs.get(r.parent.run_id);
    if (!parent) {
      (root || r).loose.push(r);
      continue;
    }
    const key = r.id.slice(r.parent.run_id.length + 1);
    const turn = /^(\d+):\d+$/.exec(key)?.[1];
    const byTurn = turn !== undefined ? calls.get(`${parent.id}|${turn}|${r.parent.call_id}`) : null;
    const call = byTurn || findCall(calls, parent.id, { call_id: r.parent.call_id });
    const stage = parent.stages.find((s) => `s${s.event.step}-${s.event.stage}` === r.parent.call_id);
    if (call) call.runs.push(r);
    else if (stage) stage.runs.push(r);
    else parent.loose.push(r);
  }
  return root;
}

/**
 * Draws `run` (and what is nested in it). `ctx` carries the live tokens by
 * `${run_id}|${turn}`, tool effects by name, and the set of open folds (so
 * a redraw keeps what the person opened).
 */
export function draw(run, ctx, depth = 0) {
  const unseen = depth === 0 ? unseenRuns(run, ctx) : [];
  if (!run && !unseen.length) return h("p", { class: "muted" }, "No events yet.");
  return h(
    "ol",
    { class: `timeline depth-${Math.min(depth, 4)}` },
    run ? run.items.map((item) => h("li", { class: `item ${item.kind}` }, drawItem(run, item, ctx, depth))) : null,
    run ? run.loose.map((child) => h("li", { class: "item nested" }, fold(child, ctx, depth, `run ${child.id}`))) : null,
    run ? streaming(run, ctx, run.items.filter((i) => i.kind === "turn")) : null,
    unseen.map((id) => streaming({ id }, ctx, [], id)),
  );
}

/** Runs whose tokens arrive before any of their events was stored. */
function unseenRuns(root, ctx) {
  const ids = new Set([...ctx.tokens.keys()].map((key) => key.split("|")[0]));
  return [...ids].filter((id) => !root || !root.runs.has(id));
}

function drawItem(run, item, ctx, depth) {
  if (item.kind === "turn") return drawTurn(run, item, ctx, depth);
  if (item.kind === "stage") return drawStage(item, ctx, depth);
  return drawMarker(item.event, ctx);
}

/** Tokens of a turn whose request has no reply yet: shown as they arrive. */
function streaming(run, ctx, turns, label) {
  const replied = new Set(turns.filter((t) => t.response).map((t) => t.turn));
  const live = [];
  for (const [key, text] of ctx.tokens) {
    const [runId, turn] = key.split("|");
    if (runId === run.id && !replied.has(Number(turn)) && !turns.some((t) => t.turn === Number(turn))) {
      live.push(h("li", { class: "item turn" }, h("div", { class: "turn-head" }, h("b", {}, `Turn ${turn}`), label ? h("span", { class: "muted" }, ` run ${label}`) : null, " ", h("span", { class: "badge live" }, "streaming")), h("div", { class: "reply streaming" }, text)));
    }
  }
  return live;
}

/** A reply's answer: what is left once the tool calls were parsed out of it
 * (`parsed_content`; `content` is the reply as the server sent it). Events
 * recorded before `parsed_content` existed carried the answer as `content`. */
function answer(r) {
  return "parsed_content" in r ? r.parsed_content : r.content;
}

function drawTurn(run, t, ctx, depth) {
  const label = ctx.groupChat && depth === 0 ? `Round ${t.turn}` : `Turn ${t.turn}`;
  const r = t.response;
  const usage = r?.usage ? `${r.usage.prompt_tokens ?? "?"} → ${r.usage.completion_tokens ?? "?"} tokens` : null;
  const live = ctx.tokens.get(`${run.id}|${t.turn}`);
  return [
    h(
      "div",
      { class: "turn-head" },
      h("b", {}, label),
      t.resumed ? h("span", { class: "badge resumed" }, "after resume") : null,
      t.request ? h("span", { class: "muted" }, ` model ${t.request.model}`) : null,
      r ? h("span", { class: "muted" }, ` · ${duration(r.duration_ms)}`) : null,
      usage ? h("span", { class: "muted" }, ` · ${usage}`) : null,
      r?.finish_reason ? h("span", { class: "muted" }, ` · ${r.finish_reason}`) : null,
      !r && t.request && !ctx.finished ? h("span", { class: "badge live" }, t.request.replied ? "replied" : live ? "streaming" : "waiting for the model") : null,
      !r && t.request && ctx.finished ? h("span", { class: "badge" }, "no reply: the attempt ended first") : null,
    ),
    r && answer(r) ? h("div", { class: "reply" }, answer(r)) : null,
    !r && live ? h("div", { class: "reply streaming" }, live) : null,
    t.request?.messages ? fold({ messages: t.request.messages, parameters: t.request.parameters }, ctx, depth, `request ${run.id} ${t.turn}`, "messages sent") : null,
    t.parseErrors.map((e) => h("div", { class: "banner error" }, "The reply's tool call did not parse: ", e.detail)),
    t.calls.length ? h("ul", { class: "calls" }, t.calls.map((c) => h("li", {}, drawCall(run, c, ctx, depth)))) : null,
  ];
}

/**
 * The result the journal holds for a call that has no result event: one
 * an operator supplied (resolve with skip), replayed by the next attempt.
 */
function journaled(run, c, ctx) {
  if (c.result || !c.call) return null;
  const scope = run.id === ctx.jobId ? "" : `${run.id.slice(ctx.jobId.length + 1)}/`;
  return ctx.journalResults.get(`${scope}|${c.call.turn}|${c.call.call_id}`) || null;
}

/**
 * The approval requests and decisions on the job's calls, of all its
 * attempts (a call parks in one attempt and runs in the next):
 * `${run}|${turn}|${call}` → `{requested, decided}`.
 */
export function decisions(events) {
  const found = new Map();
  for (const e of events) {
    const requested = APPROVAL_REQUESTED.has(e.type);
    if (!requested && !APPROVAL_DECIDED.has(e.type)) continue;
    const key = `${e.run_id}|${e.turn}|${e.call_id || e.call}`;
    found.set(key, { ...found.get(key), [requested ? "requested" : "decided"]: e });
  }
  return found;
}

/** What an edit changed: `[{path, from, to}]`, object keys followed down (`to.name`), anything else compared whole. */
export function argsDiff(before, after, path = "") {
  const object = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
  if (object(before) && object(after)) {
    const keys = [...new Set([...Object.keys(before), ...Object.keys(after)])];
    return keys.flatMap((k) => argsDiff(before[k], after[k], path ? `${path}.${k}` : k));
  }
  return JSON.stringify(before) === JSON.stringify(after) ? [] : [{ path: path || "(the whole)", from: before, to: after }];
}

/** A call a person approved with edits: what it ran with, the edit against the model's arguments, who decided and when. */
function editedArgs(asked, decided, ctx, key) {
  const shown = (v) => (v === undefined ? "(none)" : compact(v, 400));
  return [
    h("div", { class: "kv run-args" }, h("span", { class: "k" }, "ran with"), h("pre", { class: "args" }, compact(decided.arguments, 2000))),
    h(
      "div",
      { class: "kv" },
      h("span", { class: "k" }, "edit"),
      h("ul", { class: "plain args-diff" }, argsDiff(asked, decided.arguments).map((d) => h("li", {}, h("code", {}, d.path), ": ", h("del", {}, shown(d.from)), " → ", h("ins", {}, shown(d.to))))),
    ),
    h("p", { class: "muted decided-by" }, `approved with this edit by ${decided.by === "timeout" ? "the approval timeout" : decided.by} at ${new Date(millis(decided.timestamp)).toLocaleString()}`),
    asked !== undefined ? fold({ body: asked }, ctx, 0, `asked ${key}`, "the model's arguments") : null,
  ];
}

function drawCall(run, c, ctx, depth) {
  const name = c.call?.tool_name || c.result?.tool_name;
  const id = c.call?.call_id || c.result?.call_id;
  const approval = ctx.decisions?.get(`${run.id}|${c.call?.turn ?? c.result?.turn}|${id}`);
  const edited = approval?.decided?.arguments !== undefined ? approval.decided : null;
  const effect = ctx.effects.get(name);
  const recorded = journaled(run, c, ctx);
  const asked = c.approvals.some((e) => APPROVAL_REQUESTED.has(e.type));
  const decision = c.approvals.find((e) => APPROVAL_DECIDED.has(e.type))?.decision;
  // A call the job's cancel or deadline cut short did not fail: the job stopped.
  const interrupted = c.result?.error_type === "interrupted";
  const state = interrupted ? "cut" : c.result ? (c.result.is_error ? "error" : "ok") : recorded ? (recorded.is_error ? "error" : "ok") : asked && !decision ? "approval" : ctx.finished ? "cut" : "running";
  const waiting = { approval: "awaiting approval", cut: "no result: the attempt ended first", running: "no result yet" }[state];
  const badge = interrupted ? "interrupted: the job stopped" : c.result ? (c.result.is_error ? c.result.error_type || "error" : "ok") : recorded ? "result from the journal" : waiting;
  // A step drawn from its live frame until its stored event replaces it.
  const ahead = c.result?.live || (!c.result && c.call?.live);
  return h(
    "div",
    { class: `call ${state}`, dataset: { tool: name, call: id, source: ahead ? "live" : "stored" }, title: ahead ? "as it happened (live); the stored event replaces this when it is written" : null },
    h(
      "div",
      { class: "call-head" },
      h("span", { class: "fn" }, "ƒ"),
      h("b", { class: "tool-name" }, name),
      effect ? h("span", { class: `badge effect-${effect}`, title: "the tool's effect class" }, effect.replaceAll("_", " ")) : null,
      h("span", { class: `badge call-${state}` }, badge),
      c.result ? h("span", { class: "muted" }, duration(c.result.duration_ms)) : null,
      h("code", { class: "muted call-id" }, id),
    ),
    edited
      ? editedArgs(c.call?.live ? approval.requested?.arguments : c.call?.arguments ?? approval.requested?.arguments, edited, ctx, `${run.id}|${id}`)
      : c.call
        ? h("div", { class: "kv" }, h("span", { class: "k" }, "arguments"), h("pre", { class: "args" }, compact(c.call.arguments, 2000)))
        : h("p", { class: "muted" }, "started by an earlier attempt"),
    c.result ? h("div", { class: "kv" }, h("span", { class: "k" }, "result"), h("pre", { class: `result${c.result.is_error && !interrupted ? " error" : ""}` }, c.result.output_preview)) : null,
    recorded ? h("div", { class: "kv" }, h("span", { class: "k" }, "result"), h("pre", { class: `result${recorded.is_error ? " error" : ""}`, title: "recorded in the journal (an operator's skip, or a step replayed on resume)" }, recorded.output)) : null,
    c.traces.length ? h("div", { class: "traces" }, c.traces.map((t) => h("span", { class: "badge trace", title: compact(t.detail, 400) }, t.stage))) : null,
    c.approvals.map((e) => drawMarker(e, ctx)),
    c.runs.map((child) => fold(child, ctx, depth, `run ${child.id}`)),
  );
}

/**
 * Which stage each workflow artifact belongs to (`impl-input-2`,
 * `parse-iter-1.json`, `review-iter-2.json`: a prefix and an iteration):
 * the stage of that iteration the prefix names, else the iteration's first
 * agent stage (whose gate wrote it). Stage event seq → artifacts.
 */
export function assignArtifacts(root, artifacts) {
  const byStage = new Map();
  const stages = root ? root.stages.map((s) => s.event) : [];
  for (const a of artifacts) {
    const m = /^(.*)-(?:input|iter)-(\d+)(?:\.json)?$/.exec(a.name);
    if (!m) continue;
    const [, prefix, n] = m;
    const same = stages.filter((e) => e.iteration === Number(n));
    const stage =
      same.find((e) => e.stage === prefix) ||
      same.find((e) => e.stage.startsWith(prefix) || prefix.startsWith(e.stage)) ||
      same.find((e) => e.kind === "agent") ||
      same[0];
    if (stage) byStage.set(stage.seq, [...(byStage.get(stage.seq) || []), a]);
  }
  return byStage;
}

function drawStage(stage, ctx, depth) {
  const e = stage.event;
  const reports = ctx.stageArtifacts.get(e.seq) || [];
  return [
    h(
      "div",
      { class: "turn-head" },
      h("b", {}, `Stage ${e.stage}`),
      h("span", { class: "badge" }, e.kind),
      h("span", { class: `badge stage-${e.event}` }, e.event),
      e.original_event && e.original_event !== e.event ? h("span", { class: "muted", title: "the event's original name" }, ` (${e.original_event})`) : null,
      h("span", { class: "muted" }, ` → ${e.next} · iteration ${e.iteration} · ${duration(e.duration_ms)}${e.ran ? "" : " · not run (attempt cap)"}`),
    ),
    e.reason ? h("div", { class: "reply" }, e.reason) : null,
    reports.map((a) => fold({ body: a.body }, ctx, depth, `artifact ${a.name}`, `artifact ${a.name}`)),
    stage.runs.map((child) => fold(child, ctx, depth, `run ${child.id}`)),
  ];
}

/** A marker event (resume, job state, workflow start and end, anything else): its kind and fields. */
function drawMarker(e, ctx) {
  const { run_id, bundle, bundle_version, parent, seq, timestamp, type, ...fields } = e;
  const text = {
    Resumed: () => `Resumed at turn ${e.from_turn} from the journal: ${count(e.replayed_steps, "recorded step")} replayed, no model or tool call made again`,
    JobState: () => `Job ${String(e.state).replaceAll("_", " ")} (attempt ${e.attempt})${e.duration_ms !== undefined ? ` after ${duration(e.duration_ms)}` : ""}${e.error ? `: ${e.error}` : ""}`,
    // The job's own run's error is said once, by its attempt.
    KernelEnd: () => `Run ended: ${e.termination_reason} after ${count(e.turn_count, "turn")}, ${duration(e.total_duration_ms)}${e.error && e.run_id !== ctx.jobId ? `: ${e.error}` : ""}`,
    ApprovalRequested: () => `ƒ ${e.tool_name} (call ${e.call_id}, turn ${e.turn}) waits for a person's approval`,
    ApprovalDecided: () => `${{ approve: "Approved", deny: "Denied", edit: "Approved with edited arguments" }[e.decision] || e.decision} by ${e.by === "timeout" ? "the approval timeout" : e.by}${e.reason ? `: ${e.reason}` : ""}`,
    BudgetExceeded: () => `Budget ${e.budget} used up: spent ${e.spent} of ${e.limit}`,
    WorkflowStart: () => `Workflow ${e.workflow} ${e.resumed ? "resumed" : "started"} at stage ${e.stage} (iteration ${e.iteration})`,
    WorkflowEnd: () => `Workflow reached ${e.outcome} at stage ${e.stage} (iteration ${e.iteration})${e.reason ? `: ${e.reason}` : ""}`,
  }[type];
  return h(
    "div",
    { class: `marker marker-${type}`, dataset: { type } },
    h("span", { class: "badge marker-kind" }, type),
    " ",
    text ? text() : compact(fields, 400),
    h("span", { class: "muted when" }, new Date(millis(timestamp)).toLocaleTimeString()),
  );
}

/**
 * A fold: a nested run (summary: bundle, turns, duration, outcome) or any
 * value (pretty JSON). Its open state survives redraws through `ctx.open`.
 */
function fold(value, ctx, depth, key, label) {
  const isRun = value && value.items;
  const summary = isRun ? runSummary(value) : label;
  const details = h("details", { class: isRun ? "nested-run" : "fold", open: ctx.open.has(key), dataset: { fold: key } }, h("summary", {}, summary));
  details.addEventListener("toggle", () => (details.open ? ctx.open.add(key) : ctx.open.delete(key)));
  details.append(isRun ? draw(value, ctx, depth + 1) : h("pre", {}, pretty(value.body ?? value)));
  return details;
}

function runSummary(r) {
  const turns = new Set(r.items.filter((i) => i.kind === "turn").map((i) => i.turn)).size;
  const took = r.end ? duration(r.end.total_duration_ms) : duration(millis(r.last) - millis(r.first));
  const outcome = r.end ? r.end.termination_reason : "running";
  return [h("b", {}, `nested run · ${r.bundle}`), h("span", { class: "muted" }, ` ${count(turns, "turn")} · ${took} · ${outcome}`)];
}
