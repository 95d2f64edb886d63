// A job's attempts, each its own section: the events one lease of the job
// produced (from its `JobState running` to the next), how it ended —
// retried after a backoff, dead with no attempts left, parked for a
// person, or cut short when its worker died — and its error, said once
// (an attempt that failed the same way as the one before says so).

import { h, duration, millis } from "../dom.js";
import { PARKED } from "./header.js";

/** How an attempt ended → the wait before the next one, as the waterfall labels it. */
export const GAP = {
  retrying: "backoff before the retry",
  awaiting_approval: "approval wait",
  needs_attention: "waiting for an operator",
  released: "queued again (the daemon drained)",
  crashed: "lease wait after a crash",
};

/**
 * The attempts of `events` (stored envelopes, in order):
 * `[{attempt, events, start, last, end, crashed}]`. `end` is the
 * attempt's final JobState event (null while it runs or when its worker
 * died); `events` excludes the JobState events (the section says them).
 */
export function partition(events, jobId) {
  const attempts = [];
  let current = null;
  for (const e of events) {
    const own = e.run_id === jobId;
    if (own && e.type === "JobState" && e.state === "running") {
      current = { attempt: e.attempt, events: [], start: e.timestamp, last: e.timestamp, end: null, crashed: false };
      attempts.push(current);
      continue;
    }
    if (!current) {
      current = { attempt: 1, events: [], start: e.timestamp, last: e.timestamp, end: null, crashed: false };
      attempts.push(current);
    }
    current.last = e.timestamp;
    if (own && e.type === "JobState") current.end = e;
    else current.events.push(e);
  }
  // An attempt another followed without its end recorded lost its worker.
  attempts.forEach((a, i) => (a.crashed = !a.end && i < attempts.length - 1));
  return attempts;
}

/** What ended attempt `a` (of a job allowed `max` attempts), in words. */
export function endText(a, max) {
  if (a.crashed) return "its worker stopped (a crash) before it recorded an end; the next attempt took the job once the lease expired and replayed the journal";
  if (!a.end) return null;
  const after = a.end.duration_ms !== undefined ? ` after ${duration(a.end.duration_ms)}` : "";
  switch (a.end.state) {
    case "retrying":
      return `failed${after}; retried after a backoff`;
    case "dead":
      return `failed${after} with no attempts left (${a.attempt} of ${max}): the job is dead and is not retried`;
    case "awaiting_approval":
      return `parked${after}: a tool call waits for a person's approval`;
    case "needs_attention":
      return `parked${after}: an unsafe call's outcome is unknown and needs an operator`;
    case "released":
      return `released${after}: the daemon drained and put the job back in the queue`;
    default:
      return `${String(a.end.state).replaceAll("_", " ")}${after}`;
  }
}

/** The header of attempt `a`; `previous` is the attempt before it (for the same-error note). */
export function drawAttemptHead(a, previous, max) {
  const said = endText(a, max);
  // A park's "error" is the request for a person, which the job's panel shows.
  const parked = PARKED.includes(a.end?.state);
  const error = parked ? null : a.end?.error;
  const same = error && previous?.end?.error === error;
  const state = a.crashed ? "crashed" : a.end ? a.end.state : "running";
  return h(
    "div",
    { class: "attempt-head" },
    h("h3", {}, `Attempt ${a.attempt}`),
    h("span", { class: `badge attempt-${state}` }, state.replaceAll("_", " ")),
    h("span", { class: "muted" }, ` started ${new Date(millis(a.start)).toLocaleTimeString()}`),
    said ? h("p", { class: "attempt-end" }, said) : null,
    error ? (same ? h("p", { class: "muted same-error" }, `The same error as attempt ${previous.attempt}.`) : h("pre", { class: "attempt-error" }, error)) : null,
  );
}
