// Where the time went: the job's queue wait, then each attempt's runs,
// model calls, tool calls and workflow stages as bars on one time axis,
// with the waits between them — backoff, approval, lease after a crash —
// as their own labelled spans. A call that waited for a person is drawn as
// that wait, not as the tool running; a call a crash cut short ends where
// its attempt's last event was, and says so.

import { h, duration, millis } from "../dom.js";
import { GAP } from "./attempts.js";

const MAX_ROWS = 300;
const REQUESTED = new Set(["ApprovalRequested", "approval_requested"]);
const DECIDED = new Set(["ApprovalDecided", "approval_decided"]);

/** Rows `{label, kind, depth, start, end, open}` of one attempt's run tree; `bound` ends what is open. */
export function spans(root, bound, over) {
  const rows = [];
  const visit = (run, depth) => {
    const runEnd = run.end ? millis(run.end.timestamp) : over ? millis(run.last) : bound;
    rows.push({ label: depth === 0 ? `run · ${run.bundle}` : `nested run · ${run.bundle}`, kind: "run", depth, start: millis(run.first), end: runEnd, open: !run.end && !over });
    for (const item of run.items) {
      if (item.kind === "turn") turnRows(item, depth + 1, bound, over, rows, visit);
      else if (item.kind === "stage") {
        const e = item.event;
        const start = millis(e.started_at);
        rows.push({ label: `stage ${e.stage}`, kind: "stage", depth: depth + 1, start, end: start + e.duration_ms });
        for (const child of item.runs) visit(child, depth + 2);
      }
    }
    for (const child of run.loose) visit(child, depth + 1);
  };
  if (root) visit(root, 0);
  return rows;
}

function turnRows(t, depth, bound, over, rows, visit) {
  const r = t.response;
  if (r) rows.push({ label: `turn ${t.turn} · model`, kind: "model", depth, start: millis(r.timestamp) - r.duration_ms, end: millis(r.timestamp) });
  else if (t.request) rows.push({ label: `turn ${t.turn} · model${over ? " · no reply" : ""}`, kind: over ? "crash" : "model", depth, start: millis(t.request.timestamp), end: bound, open: !over });
  for (const c of t.calls) {
    const name = c.call?.tool_name || c.result?.tool_name;
    const requested = c.approvals.find((e) => REQUESTED.has(e.type));
    const decided = c.approvals.find((e) => DECIDED.has(e.type));
    const denied = decided && decided.decision === "deny";
    if (requested) {
      const end = decided ? millis(decided.timestamp) : bound;
      rows.push({ label: `ƒ ${name} · approval wait${denied ? " · denied, never ran" : ""}`, kind: "approval", depth, start: millis(requested.timestamp), end, open: !decided && !over });
    }
    if (c.result && !denied) {
      const end = millis(c.result.timestamp);
      rows.push({ label: `ƒ ${name}`, kind: c.result.is_error && c.result.error_type !== "interrupted" ? "error" : "tool", depth, start: end - c.result.duration_ms, end });
    } else if (!c.result && !requested && c.call) {
      rows.push({ label: `ƒ ${name}${over ? " · cut short" : ""}`, kind: over ? "crash" : "tool", depth, start: millis(c.call.timestamp), end: bound, open: !over });
    }
    for (const child of c.runs) visit(child, depth + 1);
  }
}

/**
 * The rows of the whole job: `attempts` is `[{attempt, tree, start, last,
 * end, crashed, over}]` (attempts.js with each one's run tree), `waits`
 * the live waits (progress frames) still open.
 */
export function rows(job, attempts, waits, now) {
  const out = [];
  if (attempts.length) out.push({ label: "queue wait", kind: "wait", depth: 0, start: millis(job.created_at), end: millis(attempts[0].start) });
  attempts.forEach((a, i) => {
    // A parked attempt ends at its park (a decision recorded later is not its time).
    const bound = a.end ? millis(a.end.timestamp) : a.over ? millis(a.last) : now;
    out.push({ label: `attempt ${a.attempt}`, kind: "attempt", depth: 0, start: millis(a.start), end: bound, open: !a.over });
    out.push(...spans(a.tree, bound, a.over).map((r) => ({ ...r, depth: r.depth + 1 })));
    const next = attempts[i + 1];
    const why = a.crashed ? "crashed" : a.end?.state;
    if (GAP[why] && (next || a.over)) {
      const start = millis(a.end ? a.end.timestamp : a.last);
      out.push({ label: GAP[why], kind: why === "crashed" ? "lease" : "wait", depth: 0, start, end: next ? millis(next.start) : now, open: !next });
    }
  });
  for (const w of waits) out.push({ label: `waiting for ${String(w.for).replaceAll("_", " ")}${w.tool ? ` (ƒ ${w.tool})` : ""}`, kind: "wait", depth: 1, start: millis(w.at), end: now, open: true });
  return out.filter((r) => !Number.isNaN(r.start) && !Number.isNaN(r.end) && r.end >= r.start);
}

/** The waterfall of `list` (from `rows`); `finished` says whether the job's time has ended. */
export function draw(list, finished, now) {
  if (!list.length) return h("p", { class: "muted" }, "No timed steps yet.");
  const start = Math.min(...list.map((r) => r.start));
  const end = Math.max(...list.map((r) => r.end), finished ? 0 : now);
  const total = Math.max(end - start, 1);
  const shown = list.slice(0, MAX_ROWS);
  return h(
    "div",
    { class: "waterfall" },
    h("div", { class: "wf-axis" }, h("span", {}, "0"), h("span", {}, duration(total / 2)), h("span", {}, duration(total))),
    shown.map((r) => {
      const bar = h("span", { class: `wf-bar wf-${r.kind}${r.open ? " open" : ""}`, title: `${r.label}: ${duration(r.end - r.start)}` });
      bar.style.left = `${((r.start - start) / total) * 100}%`;
      bar.style.width = `${Math.max(((r.end - r.start) / total) * 100, 0.4)}%`;
      const label = h("span", { class: "wf-label" }, r.label);
      label.style.paddingLeft = `${r.depth * 0.8}rem`;
      return h("div", { class: "wf-row", dataset: { kind: r.kind } }, label, h("span", { class: "wf-track" }, bar), h("span", { class: "wf-time" }, duration(r.end - r.start) + (r.open ? "…" : "")));
    }),
    list.length > MAX_ROWS ? h("p", { class: "muted" }, `${list.length - MAX_ROWS} more steps not drawn`) : null,
  );
}
