// Where the time went: every run, model call, tool call and workflow stage
// of a job as a bar on one time axis (from the job's first event to its
// last, or to now while it runs), nested rows indented under what started
// them.

import { h, duration, millis } from "../dom.js";

const MAX_ROWS = 300;

/** Rows `{label, kind, depth, start, end, open}` of the run tree, in timeline order. */
export function spans(root, now) {
  const rows = [];
  const visit = (run, depth) => {
    const runStart = millis(run.first);
    const runEnd = run.end ? millis(run.end.timestamp) : millis(run.last);
    rows.push({ label: depth === 0 ? `job · ${run.bundle}` : `run · ${run.bundle}`, kind: "run", depth, start: runStart, end: runEnd, open: !run.end && depth > 0 });
    for (const item of run.items) {
      if (item.kind === "turn") {
        const r = item.response;
        if (r) rows.push({ label: `turn ${item.turn} · model`, kind: "model", depth: depth + 1, start: millis(r.timestamp) - r.duration_ms, end: millis(r.timestamp) });
        else if (item.request) rows.push({ label: `turn ${item.turn} · model`, kind: "model", depth: depth + 1, start: millis(item.request.timestamp), end: now, open: true });
        for (const c of item.calls) {
          const name = c.call?.tool_name || c.result?.tool_name;
          const end = c.result ? millis(c.result.timestamp) : now;
          const start = c.result ? end - c.result.duration_ms : millis(c.call.timestamp);
          rows.push({ label: `ƒ ${name}`, kind: c.result?.is_error ? "error" : "tool", depth: depth + 1, start, end, open: !c.result });
          for (const child of c.runs) visit(child, depth + 2);
        }
      } else if (item.kind === "stage") {
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

/** The waterfall of `root`; `finished` says whether the job's time has ended. */
export function draw(root, finished) {
  // A finished job's open steps (cut short by a crash) end with its last event.
  const now = finished ? millis(root?.latest) : Date.now();
  const rows = spans(root, now).filter((r) => !Number.isNaN(r.start) && !Number.isNaN(r.end));
  if (!rows.length) return h("p", { class: "muted" }, "No timed steps yet.");
  const start = Math.min(...rows.map((r) => r.start));
  const end = Math.max(...rows.map((r) => r.end), finished ? 0 : now);
  const total = Math.max(end - start, 1);
  const shown = rows.slice(0, MAX_ROWS);
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
      return h("div", { class: "wf-row" }, label, h("span", { class: "wf-track" }, bar), h("span", { class: "wf-time" }, duration(r.end - r.start)));
    }),
    rows.length > MAX_ROWS ? h("p", { class: "muted" }, `${rows.length - MAX_ROWS} more steps not drawn`) : null,
  );
}
