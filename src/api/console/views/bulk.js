// Bulk actions on the jobs list: a box per row and one to select every job
// shown, and the actions for the selection — cancel, run again, resolve a
// job parked on an outcome nobody knows (retry the call, or fail the job).
// Each is the one-job request (`POST /v1/jobs/{id}/cancel`, `…/rerun`,
// `…/resolve`) sent for each selected job it applies to: the count says how
// many, a confirmation names them ("Cancel 12 jobs?"), the answer says how
// many were done and why any was refused. An action the key's scopes do not
// allow is disabled with the scope it needs (session.js).

import { h, fill, banner, confirmAction, errorText, count } from "../dom.js";
import { api } from "../api.js";
import { may, mayOn, gate } from "../session.js";
import { CANCELLABLE } from "./actions.js";
import { shortId } from "./jobs.js";

/** Requests in flight at once. */
const AT_ONCE = 4;

const ACTIONS = [
  {
    id: "cancel",
    label: "Cancel",
    grant: "cancel_job",
    danger: true,
    applies: (job) => CANCELLABLE.includes(job.state) && !job.cancel_requested,
    request: (id) => ({ path: `/v1/jobs/${id}/cancel` }),
    done: "cancelled (a running one stops at its next step)",
    skipped: "have ended or are already stopping",
  },
  {
    id: "rerun",
    label: "Run again",
    grant: "rerun_job",
    applies: () => true,
    request: (id) => ({ path: `/v1/jobs/${id}/rerun` }),
    done: "queued again as new jobs",
    skipped: "",
  },
  {
    id: "retry",
    label: "Resolve: retry the call",
    grant: "resolve_job",
    applies: (job) => job.state === "needs_attention",
    request: (id) => ({ path: `/v1/jobs/${id}/resolve`, body: { action: "retry" } }),
    done: "resolved: their unknown call runs again",
    skipped: "are not parked on an unknown outcome",
  },
  {
    id: "fail",
    label: "Resolve: fail",
    grant: "resolve_job",
    danger: true,
    applies: (job) => job.state === "needs_attention",
    request: (id) => ({ path: `/v1/jobs/${id}/resolve`, body: { action: "fail", reason: "failed from the console's jobs list" } }),
    done: "resolved: failed",
    skipped: "are not parked on an unknown outcome",
  },
];

/**
 * The selection of the jobs list. `box(job)` is a row's checkbox,
 * `allBox(jobs)` the header's; `shown(jobs)` keeps the selection to the
 * jobs shown and draws the bar; `changed()` is called after an action.
 */
export function bulkActions({ changed }) {
  const selected = new Set();
  let jobs = [];
  const bar = h("div", { class: "bulk", id: "bulk", role: "region", "aria-label": "Selected jobs" });
  const outcome = h("div", { id: "bulk-outcome", role: "status" });

  let drawn = "";
  /** Draws the bar when what it says changed (a redraw would take the focus from its button). */
  function draw() {
    const picked = jobs.filter((job) => selected.has(job.id));
    const says = JSON.stringify(picked.map((job) => [job.id, job.state, job.cancel_requested]));
    if (says === drawn) return;
    drawn = says;
    if (!picked.length) {
      fill(bar);
      bar.hidden = true;
      return;
    }
    bar.hidden = false;
    fill(
      bar,
      h("span", { id: "bulk-count" }, `${count(picked.length, "job")} selected`),
      ACTIONS.map((action) => actionButton(action, picked)),
      h("button", { type: "button", class: "secondary", onclick: () => (selected.clear(), sync()) }, "Clear"),
    );
  }

  /** Redraws the bar and every box (a box's own change redraws nothing else). */
  function sync() {
    draw();
    for (const input of document.querySelectorAll("input.pick[data-job]")) input.checked = selected.has(input.dataset.job);
    const all = document.getElementById("pick-all");
    if (all) all.checked = jobs.length > 0 && jobs.every((job) => selected.has(job.id));
  }

  function actionButton(action, picked) {
    const verdict = may(action.grant);
    const able = picked.filter((job) => action.applies(job) && mayOn(action.grant, job.owner).ok);
    const button = h(
      "button",
      { type: "button", class: action.danger ? "danger" : "secondary", id: `bulk-${action.id}`, disabled: !able.length, onclick: () => run(action, able, picked.length) },
      `${action.label} (${able.length})`,
    );
    return gate(button, verdict, "job");
  }

  async function run(action, able, of) {
    if (await perform(action, able, of, outcome)) {
      selected.clear();
      sync();
      changed();
    }
  }

  return {
    bar,
    outcome,
    box(job) {
      return h("input", {
        type: "checkbox",
        class: "pick",
        dataset: { job: job.id },
        checked: selected.has(job.id),
        "aria-label": `Select job ${shortId(job.id)}`,
        onchange: (e) => (e.target.checked ? selected.add(job.id) : selected.delete(job.id), sync()),
      });
    },
    allBox(shownJobs) {
      return h("input", {
        type: "checkbox",
        id: "pick-all",
        checked: shownJobs.length > 0 && shownJobs.every((job) => selected.has(job.id)),
        "aria-label": "Select every job shown",
        onchange: (e) => {
          for (const job of shownJobs) e.target.checked ? selected.add(job.id) : selected.delete(job.id);
          sync();
        },
      });
    },
    shown(shownJobs) {
      jobs = shownJobs;
      const ids = new Set(jobs.map((job) => job.id));
      for (const id of selected) if (!ids.has(id)) selected.delete(id);
      draw();
    },
  };
}

/**
 * Asks, then sends `action`'s request for each job of `able` (`of` were
 * selected) and says what came of it in `outcome`; false when the person
 * did not confirm.
 */
async function perform(action, able, of, outcome) {
  const title = `${action.label} ${count(able.length, "job")}?`;
  const left = of - able.length;
  const body = h(
    "div",
    {},
    h("p", {}, able.map((job) => shortId(job.id)).slice(0, 12).join(", "), able.length > 12 ? ` and ${able.length - 12} more` : ""),
    left ? h("p", { class: "muted" }, `${count(left, "other selected job")} ${action.skipped || "cannot be"}: left as they are.`) : null,
  );
  if (!(await confirmAction({ title, body, confirm: `${action.label} ${count(able.length, "job")}`, danger: action.danger }))) return false;
  fill(outcome, banner("info", `${title.slice(0, -1)}…`));
  const failures = await each(able, (job) => {
    const request = action.request(encodeURIComponent(job.id));
    return api(request.path, { method: "POST", body: request.body });
  });
  const first = failures[0];
  fill(
    outcome,
    banner(
      failures.length ? "error" : "ok",
      `${count(able.length - failures.length, "job")} ${action.done}.`,
      first ? ` ${failures.length} refused; job ${shortId(first.job.id)}: ${errorText(first.error)}` : "",
    ),
  );
  return true;
}

/** Runs `task` for each job, `AT_ONCE` at a time; resolves to the failures `{job, error}`. */
async function each(jobs, task) {
  const failures = [];
  let next = 0;
  const worker = async () => {
    while (next < jobs.length) {
      const job = jobs[next++];
      try {
        await task(job);
      } catch (error) {
        failures.push({ job, error });
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(AT_ONCE, jobs.length) }, worker));
  return failures;
}
