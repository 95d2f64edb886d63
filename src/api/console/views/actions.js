// What a person can do to one job: cancel it; resolve it when it is parked
// on an `unsafe` call of unknown outcome (retry the call, skip it with a
// result, or fail the job); approve, deny or edit a call awaiting approval.
// Each asks for confirmation first and shows the daemon's answer.

import { h, fill, banner, confirmAction, pretty, compact, errorText, ago } from "../dom.js";
import { api } from "../api.js";

const CANCELLABLE = ["queued", "running", "needs_attention", "awaiting_approval"];

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
      changed(answer);
    } catch (error) {
      fill(outcome, banner("error", `${title} failed: `, errorText(error)));
      changed();
    }
  };
  const parts = [];
  if (job.state === "needs_attention") parts.push(resolvePanel(job, base, act));
  if (CANCELLABLE.includes(job.state) && !job.cancel_requested) {
    parts.push(
      h(
        "div",
        { class: "buttons" },
        h(
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
        ),
      ),
    );
  }
  if (job.cancel_requested && !["cancelled", "succeeded", "failed", "dead"].includes(job.state)) {
    parts.push(banner("warn", "A cancel was requested; the job stops at its next step."));
  }
  fill(root, parts);
}

/** A parked job: what is unknown, and the three answers an operator can give. */
function resolvePanel(job, base, act) {
  const call = job.pending_call || {};
  const output = h("textarea", { id: "skip-output", name: "output", rows: 3, placeholder: '{"charged": true}' });
  const isError = h("input", { type: "checkbox", id: "skip-is-error", name: "is_error" });
  const reason = h("input", { type: "text", id: "fail-reason", name: "reason", placeholder: "why the job fails" });
  const resolve = (title, body, resolution, verb) =>
    act(title, body, { path: `${base}/resolve`, body: resolution }, (j) => `Resolved with ${verb}: the job is ${j.state.replaceAll("_", " ")}${j.state === "queued" ? " and will continue from where it stopped" : ""}.`);
  return h(
    "section",
    { class: "card attention", id: "resolve" },
    h("h2", {}, "This job needs a person"),
    h(
      "p",
      {},
      "The tool ",
      h("code", {}, call.tool_name),
      ` (effect ${call.effect}) was started by an attempt that did not finish, so nobody knows whether it had its effect. It is never run again on its own.`,
    ),
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "call"),
      h("dd", {}, h("code", {}, call.call_id), ` of turn ${call.turn}`, call.scope ? ` in nested run ${call.scope}` : ""),
      h("dt", {}, "arguments"),
      h("dd", {}, h("pre", {}, pretty(call.arguments))),
    ),
    h(
      "div",
      { class: "resolve-options" },
      h(
        "div",
        { class: "option" },
        h("h3", {}, "Retry"),
        h("p", { class: "muted" }, "Run the call again: only when you know it had no effect, or that repeating it is harmless."),
        h("button", { type: "button", id: "resolve-retry", onclick: () => resolve("Retry the call", `The tool ${call.tool_name} runs again with the same arguments.`, { action: "retry" }, "retry") }, "Retry the call"),
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
                h("div", {}, `The tool ${call.tool_name} is not run; the model reads this result:`, h("pre", {}, output.value || "(empty)")),
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
    ),
  );
}

/**
 * The calls awaiting approval, from `GET /v1/jobs/{id}/approvals`. A
 * daemon without approvals answers 404: then nothing is shown.
 */
export async function drawApprovals(root, job, { outcome, changed, signal }) {
  let approvals;
  try {
    approvals = (await api(`/v1/jobs/${encodeURIComponent(job.id)}/approvals`, { signal })).approvals || [];
  } catch (error) {
    if (error.status !== 404 && !signal.aborted) fill(root, banner("error", "Cannot read the approvals: ", errorText(error)));
    else fill(root);
    return;
  }
  if (!approvals.length) {
    fill(root);
    return;
  }
  fill(root, h("section", { class: "card attention", id: "approvals" }, h("h2", {}, `Waiting for approval (${approvals.length})`), approvals.map((a) => approvalCard(job, a, { outcome, changed }))));
}

function approvalCard(job, approval, { outcome, changed }) {
  const path = `/v1/jobs/${encodeURIComponent(job.id)}/approvals/${encodeURIComponent(approval.call)}`;
  const edited = h("textarea", { rows: 5, class: "approval-args" }, pretty(approval.arguments));
  const reason = h("input", { type: "text", placeholder: "why (the model reads it)" });
  const decide = async (title, body, decision) => {
    if (!(await confirmAction({ title, body, confirm: title, danger: decision.decision === "deny" }))) return;
    try {
      const answer = await api(path, { method: "POST", body: { ...decision, digest: approval.digest } });
      fill(outcome, banner("ok", `Recorded: ${answer.decision || decision.decision} for ${approval.tool} (call ${approval.call}).`));
    } catch (error) {
      const stale = error.status === 409 ? " It was already decided, or the call changed since this page read it: the page reads it again." : "";
      fill(outcome, banner("error", `${title} failed: `, errorText(error), stale));
    }
    changed();
  };
  const editDecision = () => {
    let args;
    try {
      args = JSON.parse(edited.value);
    } catch (error) {
      fill(outcome, banner("error", `The edited arguments are not JSON: ${error.message}`));
      return;
    }
    decide("Approve with edits", h("div", {}, `${approval.tool} runs with:`, h("pre", {}, pretty(args))), { decision: "edit", arguments: args });
  };
  return h(
    "div",
    { class: "approval", dataset: { call: approval.call } },
    h("div", { class: "call-head" }, h("span", { class: "fn" }, "ƒ"), h("b", {}, approval.tool), h("code", { class: "muted" }, approval.call)),
    h("p", { class: "muted" }, `requested ${ago(approval.requested_at)}`, approval.expires_at ? ` · expires ${new Date(approval.expires_at).toLocaleString()}` : "", ` · ${compact(approval.digest, 24)}`),
    h("label", {}, "Arguments (edit them to approve a changed call)"),
    edited,
    h(
      "div",
      { class: "buttons" },
      h("button", { type: "button", class: "primary", onclick: () => decide("Approve", `${approval.tool} runs with the arguments the model gave.`, { decision: "approve" }) }, "Approve"),
      h("button", { type: "button", onclick: editDecision }, "Approve edited"),
      reason,
      h("button", { type: "button", class: "danger", onclick: () => decide("Deny", `${approval.tool} does not run; the model is told${reason.value ? `: ${reason.value}` : " it was denied"}.`, { decision: "deny", reason: reason.value }) }, "Deny"),
    ),
  );
}
