// What a person can do to one job: cancel it; resolve it when it is parked
// on an `unsafe` call of unknown outcome (retry the call, skip it with a
// result, or fail the job); run it again (the same bundle, input and
// variables as a new job; a fork from a turn is offered on each turn of the
// journal, journal.js). A call awaiting approval is decided on its card
// (approval.js). Each asks for confirmation first and shows the answer; one
// the key may not take is disabled with the scope it needs (session.js).

import { h, fill, banner, confirmAction, pretty, navigate, errorText } from "../dom.js";
import { api } from "../api.js";
import { may, mayOn, gate, refusal } from "../session.js";
import { pendingCall } from "./pending.js";
import { TERMINAL } from "./header.js";

/** States a cancel stops. */
export const CANCELLABLE = ["queued", "running", "needs_attention", "awaiting_approval"];

/**
 * Draws the actions for `job` into `root`. `outcome` is where answers are
 * shown; `changed(job?)` is called after an action changed the job.
 */
export function drawActions(root, job, { outcome, changed }) {
  const base = `/v1/jobs/${encodeURIComponent(job.id)}`;
  const act = async (title, body, request, describe, danger = false) => {
    if (!(await confirmAction({ title, body, confirm: title, danger }))) return;
    fill(outcome, banner("info", `${title}…`));
    try {
      const answer = await api(request.path, { method: "POST", body: request.body });
      fill(outcome, banner("ok", describe(answer)));
      // A cancel a running job takes at its next step: the job page tells
      // the end when it comes (job.js).
      if (answer?.cancel_requested && !TERMINAL.includes(answer.state)) outcome.dataset.pending = "cancel";
      await changed(answer);
    } catch (error) {
      fill(outcome, banner("error", `${title} failed: `, errorText(error)));
      await changed();
    }
    focusOutcome(outcome);
  };
  const parts = [];
  if (job.state === "needs_attention") parts.push(resolvePanel(job, base, act));
  if (CANCELLABLE.includes(job.state) && !job.cancel_requested) parts.push(h("div", { class: "buttons" }, cancelButton(job, base, act)));
  const again = h("button", { type: "button", id: "rerun-job", onclick: () => rerun(job, outcome) }, "Run again");
  parts.push(h("div", { class: "buttons" }, gate(again, may("rerun_job"))));
  if (job.cancel_requested && !TERMINAL.includes(job.state)) {
    parts.push(banner("warn", "A cancel was requested; the job stops at its next step."));
  }
  fill(root, parts);
}

/**
 * After an action the page is drawn again and the button that had the
 * focus may be gone: the focus goes to the answer, so a keyboard or screen
 * reader user is where the news is, not back at the top of the page.
 */
function focusOutcome(outcome) {
  const lost = !document.activeElement || document.activeElement === document.body || !document.activeElement.isConnected;
  if (!lost || !outcome.isConnected) return;
  outcome.tabIndex = -1;
  outcome.focus();
}

function cancelButton(job, base, act) {
  const cancel = h(
    "button",
    {
      type: "button",
      class: "danger",
      id: "cancel-job",
      onclick: () =>
        act(
          "Cancel the job",
          `Job ${job.id} (${job.state}) stops: a queued or parked job ends cancelled at once, a running one at its next step.`,
          { path: `${base}/cancel` },
          (j) => `Cancel requested: the job is ${j.state.replaceAll("_", " ")}${j.cancel_requested && j.state === "running" ? " and will stop at its next step" : ""}.`,
          true,
        ),
    },
    "Cancel job",
  );
  return gate(cancel, mayOn("cancel_job", job.owner), "job");
}

/** A parked job: what is unknown, and the three answers an operator can give. */
function resolvePanel(job, base, act) {
  const call = pendingCall(job) || {};
  const output = h("textarea", { id: "skip-output", name: "output", rows: 3, placeholder: '{"charged": true}' });
  const isError = h("input", { type: "checkbox", id: "skip-is-error", name: "is_error" });
  const reason = h("input", { type: "text", id: "fail-reason", name: "reason", placeholder: "why the job fails" });
  const resolve = (title, body, resolution, verb) =>
    act(title, body, { path: `${base}/resolve`, body: resolution }, (j) => `Resolved with ${verb}: the job is ${j.state.replaceAll("_", " ")}${j.state === "queued" ? " and will continue from where it stopped" : ""}.`);
  const allowed = mayOn("resolve_job", job.owner);
  return h(
    "section",
    { class: "card attention", id: "resolve" },
    h("h2", {}, "This job needs a person"),
    h(
      "p",
      {},
      "The tool ",
      h("code", {}, call.tool),
      ` (effect ${call.effect}) was started by an attempt that did not finish, so nobody knows whether it had its effect. It is never run again on its own.`,
    ),
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "call"),
      h("dd", {}, h("code", {}, call.callId), ` of turn ${call.turn}`, call.scope ? ` in nested run ${call.scope}` : ""),
      h("dt", {}, "arguments"),
      h("dd", {}, h("pre", {}, pretty(call.arguments))),
    ),
    allowed.ok ? resolveOptions(call, output, isError, reason, resolve, job) : refusal("Resolving it", allowed, "job"),
  );
}

/** Retry, skip with a result, or fail the job. */
function resolveOptions(call, output, isError, reason, resolve, job) {
  return h(
    "div",
    { class: "resolve-options" },
    h(
      "div",
      { class: "option" },
      h("h3", {}, "Retry"),
      h("p", { class: "muted" }, "Run the call again: only when you know it had no effect, or that repeating it is harmless."),
      h("button", { type: "button", id: "resolve-retry", onclick: () => resolve("Retry the call", `The tool ${call.tool} runs again with the same arguments.`, { action: "retry" }, "retry") }, "Retry the call"),
    ),
    h(
      "div",
      { class: "option" },
      h("h3", {}, "Skip with a result"),
      h("p", { class: "muted" }, "Do not run it; the model reads this as the call's result."),
      h("label", { for: "skip-output" }, "Result"),
      output,
      h("label", { class: "inline" }, isError, " the result is an error"),
      h(
        "button",
        {
          type: "button",
          id: "resolve-skip",
          onclick: () =>
            resolve(
              "Skip the call",
              h("div", {}, `The tool ${call.tool} is not run; the model reads this result:`, h("pre", {}, output.value || "(empty)")),
              { action: "skip", output: output.value, is_error: isError.checked },
              "skip",
            ),
        },
        "Skip with this result",
      ),
    ),
    h(
      "div",
      { class: "option" },
      h("h3", {}, "Fail the job"),
      h("p", { class: "muted" }, "End the job as failed, with a reason."),
      reason,
      h(
        "button",
        {
          type: "button",
          class: "danger",
          id: "resolve-fail",
          onclick: () => resolve("Fail the job", `Job ${job.id} ends failed${reason.value ? `: ${reason.value}` : ""}.`, { action: "fail", reason: reason.value || null }, "fail"),
        },
        "Fail the job",
      ),
    ),
  );
}

/**
 * Forks the job at `turn` (`POST /v1/jobs/{id}/fork`): a new job that
 * replays the turns before it from the journal, on the content the job ran,
 * and runs live from it; then shows the new job.
 */
export async function forkFromHere(job, turn, outcome) {
  const body = h("div", {}, `A new job of ${job.bundle} (version ${job.bundle_version || "as pinned"}) replays turns 1 to ${turn - 1} of this job from its journal — no model call, no tool call — and runs live from turn ${turn}.`);
  if (!(await confirmAction({ title: `Fork from turn ${turn}`, body, confirm: "Fork" }))) return;
  try {
    const fork = await api(`/v1/jobs/${encodeURIComponent(job.id)}/fork`, { method: "POST", body: { at_turn: turn } });
    navigate(`/ui/jobs/${encodeURIComponent(fork.id)}`);
  } catch (error) {
    fill(outcome, banner("error", `The daemon refused the fork from turn ${turn}: `, errorText(error)));
  }
}

/** Runs the job again (`POST /v1/jobs/{id}/rerun`, which decides what is copied), then shows the new job. */
async function rerun(job, outcome) {
  const copied = { bundle: job.bundle, input: job.input, variables: job.variables || {} };
  if (job.kind && job.kind.type !== "bundle") copied.kind = job.kind;
  if (Object.keys(job.controls || {}).length) copied.controls = job.controls;
  if (job.messages) copied.messages = job.messages;
  const ok = await confirmAction({ title: "Run again", body: h("div", {}, `A new job of ${job.bundle} (its current version) runs with:`, h("pre", {}, pretty(copied))), confirm: "Run again" });
  if (!ok) return;
  try {
    const fresh = await api(`/v1/jobs/${encodeURIComponent(job.id)}/rerun`, { method: "POST", body: {} });
    navigate(`/ui/jobs/${encodeURIComponent(fresh.id)}`);
  } catch (error) {
    fill(outcome, banner("error", "The daemon refused the new job: ", errorText(error)));
  }
}
