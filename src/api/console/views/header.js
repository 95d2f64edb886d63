// The run header of one job: its outcome and why it ended, how long it
// waited (created → started) against how long it ran (started → finished,
// ticking while it runs), its attempts, and the tokens and cost it spent
// against its budget (the job's own limits, else its bundle's).

import { h, fill, link, stateBadge, duration, millis } from "../dom.js";

/** States a job ends in. */
export const TERMINAL = ["succeeded", "failed", "cancelled", "dead"];
/** States in which a job waits for a person (the jobs list shows them first). */
export const PARKED = ["needs_attention", "awaiting_approval"];

/** Waiting and running time of `job` at `now`: `{wait, run, ticking}` in ms (NaN when not begun). */
export function times(job, now = Date.now()) {
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
  const said = reason ? words[reason] || reason.replaceAll("_", " ") : null;
  if (job.state === "dead") return `dead: every attempt failed (${job.attempts} of ${job.max_attempts}), so it is not retried${said ? `; the last ended because ${said}` : ""}`;
  return said || (job.state === "failed" ? "an error ended the run" : null);
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
export function drawHeader(root, job, { bundle, kernelEnd, turns }) {
  const limits = budget(job, bundle);
  const why = whyEnded(job, kernelEnd);
  const tokenLimit = (limits.prompt_tokens || 0) + (limits.completion_tokens || 0);
  const money = (x) => `$${Number(x || 0).toFixed(4)}`;
  fill(
    root,
    h(
      "div",
      { class: `run-header card outcome-${job.state}`, id: "run-header", dataset: { state: job.state } },
      h("div", { class: "run-outcome" }, stateBadge(job.state), why ? h("span", { id: "why-ended" }, why) : null),
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
        h("div", { class: "meter" }, h("span", { class: "k" }, "attempts"), h("b", {}, `${job.attempts} of ${job.max_attempts}`), job.crash_resumes ? h("span", { class: "muted" }, ` · ${job.crash_resumes} after a crash`) : null),
        turns !== undefined ? h("div", { class: "meter" }, h("span", { class: "k" }, "turns"), h("b", {}, String(turns)), bundle?.limits?.max_turns ? h("span", { class: "muted" }, ` of ${bundle.limits.max_turns}`) : null) : null,
        meter("tokens", job.tokens_spent || 0, tokenLimit, (n) => String(n), "tokens"),
        meter("cost", job.cost_spent || 0, limits.cost, money, "cost"),
        job.tool_errors !== undefined ? h("div", { class: "meter" }, h("span", { class: "k" }, "tool errors"), h("b", { id: "tool-errors" }, String(job.tool_errors))) : null,
      ),
    ),
  );
  tick(root, job);
}

/** Updates the header's clocks; returns whether they still tick. */
export function tick(root, job) {
  const t = times(job);
  const wait = root.querySelector("#wait-time");
  const run = root.querySelector("#run-time");
  if (wait) wait.textContent = Number.isNaN(t.wait) ? "—" : duration(t.wait);
  if (run) run.textContent = Number.isNaN(t.run) ? "not started" : duration(t.run) + (t.ticking ? " so far" : "");
  return t.ticking || (Number.isNaN(t.run) && !TERMINAL.includes(job.state));
}
