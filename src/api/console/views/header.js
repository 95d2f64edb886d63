// The run header of one job: its outcome and why it ended, when it is
// scheduled to start (a `run_at` ahead), how long it waited (created →
// started) against how long it ran (started → finished, ticking while it
// runs), its attempts, and a meter for every budget that can stop it —
// tokens, cost, tool calls, model calls, wall time — against its limit (the
// job's own limits, else its bundle's). A running job whose worker stopped
// renewing its lease (a crashed daemon) says so, and when the lease
// expires so that another worker resumes it, instead of reading as running.

import { h, fill, link, stateBadge, duration, millis } from "../dom.js";
import { serverNow } from "../api.js";

/** How often the job's page reads the job again while it can change. */
export const JOB_POLL_MS = 3000;

/** States a job ends in. */
export const TERMINAL = ["succeeded", "failed", "cancelled", "dead"];
/** States in which a job waits for a person (the jobs list shows them first). */
export const PARKED = ["needs_attention", "awaiting_approval"];
/** States of a job that ended in an error: the API's `error=true` (docs/api.md, Listing jobs). */
export const ERRORED = ["failed", "dead"];

/** Waiting and running time of `job` at `now`: `{wait, run, ticking}` in ms (NaN when not begun). */
export function times(job, now = serverNow()) {
  const created = millis(job.created_at);
  const started = millis(job.started_at);
  const finished = millis(job.finished_at);
  const parked = PARKED.includes(job.state);
  const ticking = !TERMINAL.includes(job.state) && !parked;
  const wait = Number.isNaN(started) ? (ticking ? now - created : NaN) : started - created;
  const end = !Number.isNaN(finished) ? finished : parked ? millis(job.updated_at) : now;
  const run = Number.isNaN(started) ? NaN : end - started;
  return { wait, run, ticking: ticking && !Number.isNaN(started) };
}

/**
 * Why the job ended, in words: the recorded termination reason (C2), else
 * what its events and state say. `kernelEnd` is the job's own run's last
 * KernelEnd event, when there is one.
 */
export function whyEnded(job, kernelEnd) {
  if (!TERMINAL.includes(job.state)) return null;
  const reason = job.termination_reason || (job.state === "cancelled" ? "cancelled" : kernelEnd?.termination_reason);
  const words = {
    no_tool_calls: "the model gave its final answer (a reply without tool calls)",
    workflow_finished: "the workflow reached its end",
    timeout: "the run's time limit passed",
    max_turns: "it reached max_turns without a final answer",
    termination_tool: "a termination tool ended it",
    budget_exceeded: "a budget was used up",
    cancelled: "a person cancelled it",
    error: "an error ended the run",
  };
  const said = chatEnd(job) || (reason ? words[reason] || reason.replaceAll("_", " ") : null);
  if (job.state === "dead") return `dead: every attempt failed (${job.attempts} of ${job.max_attempts}), so it is not retried${said ? `; the last ended because ${said}` : ""}`;
  return said || (job.state === "failed" ? "an error ended the run" : null);
}

/**
 * A running job's silent worker: `{silent, expires}` in ms (how long since
 * its lease was last renewed, and until the lease expires: negative once it
 * has) when the worker missed two heartbeats (`heartbeat_every_ms`, said
 * by the daemon for a running job); else null. Renewals set `updated_at`;
 * the page's copy of the job may be one poll old, so a poll is allowed on
 * top (a healthy job never reads as silent).
 */
export function silence(job, now = serverNow()) {
  if (job.state !== "running" || !job.heartbeat_every_ms) return null;
  const silent = now - millis(job.updated_at);
  if (!(silent > 2 * job.heartbeat_every_ms + JOB_POLL_MS)) return null;
  return { silent, expires: millis(job.lease_expires_at) - now };
}

function silenceText({ silent, expires }) {
  const secs = (ms) => `${Math.max(Math.round(ms / 1000), 0)} s`;
  const lease = expires > 0 ? `lease expires in ${secs(expires)}; then another worker resumes the job from its journal` : `the lease expired ${secs(-expires)} ago; the next free worker resumes the job from its journal`;
  return `no heartbeat for ${secs(silent)} — ${lease}`;
}

/**
 * Why a group chat ended, by its result's `terminated_by` (its run records
 * any strategy's stop as `termination_tool`, which no tool was): null for
 * any other job.
 */
function chatEnd(job) {
  const phrase = job.kind?.plan?.termination?.phrase;
  return {
    stop_phrase: `an agent's reply said the stop phrase${phrase ? ` "${phrase}"` : ""}`,
    selector: "the selector judged the chat done (its reply had the stop word)",
    max_iterations: "it held every round it was allowed (max_iterations)",
  }[job.result?.terminated_by] || null;
}

/** A budget's duration ("10m", "1h30m", "250ms", "5s") in ms (NaN when it is none). */
export function limitMillis(text) {
  if (typeof text !== "string" || !text.trim()) return NaN;
  const unit = { ms: 1, s: 1000, m: 60000, min: 60000, h: 3600000, d: 86400000 };
  let total = 0;
  let rest = text.replaceAll(" ", "");
  while (rest) {
    const part = /^(\d+(?:\.\d+)?)(ms|min|s|m|h|d)/.exec(rest);
    if (!part) return NaN;
    total += Number(part[1]) * unit[part[2]];
    rest = rest.slice(part[0].length);
  }
  return total;
}

/** The budget a job runs under: its own limits, else its bundle's. */
function budget(job, bundle) {
  return { ...(bundle?.limits || {}), ...(job.limits || {}) };
}

function meter(label, spent, limit, text, id) {
  const share = limit ? Math.min(spent / limit, 1) : null;
  return h(
    "div",
    { class: "meter", id },
    h("span", { class: "k" }, label),
    h("b", {}, text(spent)),
    limit ? h("span", { class: "muted" }, ` of ${text(limit)}`) : h("span", { class: "muted" }, " (no budget)"),
    share !== null ? h("progress", { max: 1, value: share, "aria-label": `${label} against its budget` }) : null,
  );
}

/** Draws the header into `root`. */
export function drawHeader(root, job, { bundle, kernelEnd, turns, calls = { tools: 0, models: 0, prompt: 0, completion: 0 } }) {
  const limits = budget(job, bundle);
  const why = whyEnded(job, kernelEnd);
  // A budget of prompt or completion tokens is a meter of its own; the
  // tokens meter is their sum, against a `tokens` budget if there is one.
  const tokenLimit = limits.tokens;
  const wallLimit = limitMillis(limits.wall_time);
  const ran = times(job).run;
  const money = (x) => `$${Number(x || 0).toFixed(4)}`;
  fill(
    root,
    h(
      "div",
      { class: `run-header card outcome-${job.state}`, id: "run-header", dataset: { state: job.state } },
      h("div", { class: "run-outcome" }, stateBadge(job.state), why ? h("span", { id: "why-ended" }, why) : null),
      job.state === "running" ? h("p", { class: "banner warn", id: "no-heartbeat", role: "status", hidden: true }) : null,
      scheduled(job),
      job.forked_from
        ? h(
            "p",
            { class: "forked-from muted", id: "forked-from" },
            "forked from ",
            link(`/ui/jobs/${encodeURIComponent(job.forked_from.job_id)}`, job.forked_from.job_id),
            ` at turn ${job.forked_from.at_turn} (earlier turns replayed from its journal)`,
          )
        : null,
      h(
        "div",
        { class: "run-figures" },
        h("div", { class: "meter" }, h("span", { class: "k" }, "waited"), h("b", { id: "wait-time" })),
        h("div", { class: "meter" }, h("span", { class: "k" }, "ran"), h("b", { id: "run-time" })),
        h("div", { class: "meter" }, h("span", { class: "k" }, "attempts"), h("b", { id: "attempts" }, `${job.attempts} of ${job.max_attempts}`), job.crash_resumes ? h("span", { class: "muted" }, ` · ${job.crash_resumes} after a crash`) : null),
        turns !== undefined ? h("div", { class: "meter" }, h("span", { class: "k" }, "turns"), h("b", {}, String(turns)), bundle?.limits?.max_turns ? h("span", { class: "muted" }, ` of ${bundle.limits.max_turns}`) : null) : null,
        meter("tokens", job.tokens_spent || 0, tokenLimit, (n) => String(n), "tokens"),
        limits.prompt_tokens ? meter("prompt tokens", calls.prompt, limits.prompt_tokens, String, "prompt-tokens") : null,
        limits.completion_tokens ? meter("completion tokens", calls.completion, limits.completion_tokens, String, "completion-tokens") : null,
        meter("cost", job.cost_spent || 0, limits.cost, money, "cost"),
        limits.tool_calls || calls.tools ? meter("tool calls", calls.tools, limits.tool_calls, String, "tool-calls") : null,
        limits.model_calls ? meter("model calls", calls.models, limits.model_calls, String, "model-calls") : null,
        Number.isNaN(wallLimit) ? null : meter("wall time", Number.isNaN(ran) ? 0 : ran, wallLimit, duration, "wall-time"),
        job.tool_errors !== undefined ? h("div", { class: "meter" }, h("span", { class: "k" }, "tool errors"), h("b", { id: "tool-errors" }, String(job.tool_errors))) : null,
      ),
    ),
  );
  tick(root, job);
}

/** When a job whose `run_at` is ahead starts: "scheduled for … (in …)". */
function scheduled(job) {
  const at = millis(job.run_at);
  if (job.state !== "queued" || Number.isNaN(at) || at <= serverNow()) return null;
  return h(
    "p",
    { class: "scheduled", id: "scheduled" },
    "scheduled for ",
    h("time", { datetime: job.run_at, title: job.run_at }, new Date(at).toLocaleString()),
    h("span", { class: "muted", id: "scheduled-in" }, ` (in ${duration(at - serverNow())})`),
  );
}

/** Updates the header's clocks; returns whether they still tick. */
export function tick(root, job) {
  const t = times(job);
  const wait = root.querySelector("#wait-time");
  const run = root.querySelector("#run-time");
  if (wait) wait.textContent = Number.isNaN(t.wait) ? "—" : duration(t.wait);
  if (run) run.textContent = Number.isNaN(t.run) ? "not started" : duration(t.run) + (t.ticking ? " so far" : "");
  const quiet = root.querySelector("#no-heartbeat");
  if (quiet) {
    const s = silence(job);
    quiet.hidden = !s;
    quiet.textContent = s ? silenceText(s) : "";
  }
  const until = root.querySelector("#scheduled-in");
  if (until) until.textContent = ` (in ${duration(Math.max(millis(job.run_at) - serverNow(), 0))})`;
  return t.ticking || (Number.isNaN(t.run) && !TERMINAL.includes(job.state));
}
