// One call awaiting a person's approval, as a card: the tool and its
// arguments, the rule that asked, who may decide, when it is denied on its
// own, a form built from the tool's parameter schema to approve changed
// arguments, and approve / deny (with a reason the model reads). Used by
// the job's page and the approvals inbox alike. A key that may not decide
// on the job sees the call and why it may not (session.js), no buttons.

import { h, fill, banner, confirmAction, pretty, ago, duration, errorText } from "../dom.js";
import { api, serverNow } from "../api.js";
import { mayOn, refusal, mayDecideOn, gateAll } from "../session.js";
import { autoDenyAt } from "./pending.js";
import { schemaForm } from "./schemaform.js";

/**
 * The card for `call` (pending.js's shape) of `job`. `rule` is the tool's
 * approval rule as its bundle says it (or null); `where` (for a call of a
 * nested run) the bundle whose rule it is and the path to it from the
 * job's bundle; `outcome` shows answers; `changed()` runs after a decision.
 */
export function approvalCard(job, call, { rule, where, outcome, changed }) {
  const path = `/v1/jobs/${encodeURIComponent(job.id)}/approvals/${encodeURIComponent(call.callId)}`;
  const form = schemaForm(call.parameters, call.arguments);
  const reasonId = `deny-reason-${call.callId}`;
  const reason = h("input", { type: "text", id: reasonId, placeholder: "why (the model reads it)" });
  const deadline = autoDenyAt(call);
  const decide = async (title, body, decision) => {
    if (!(await confirmAction({ title, body, confirm: title, danger: decision.decision === "deny" }))) return;
    try {
      const answer = await api(path, { method: "POST", body: { ...decision, digest: call.digest } });
      fill(outcome, banner("ok", `Recorded: ${answer.decision || decision.decision} for ${call.tool} (call ${call.callId}).`));
    } catch (error) {
      const stale = error.status === 409 ? " It was already decided, or the call changed since this page read it: the page reads it again." : "";
      fill(outcome, banner("error", `${title} failed: `, errorText(error), stale));
    }
    changed();
  };
  const approveEdited = () => {
    let args;
    try {
      args = form.read();
    } catch (error) {
      fill(outcome, banner("error", `The edited arguments cannot be sent: ${error.message}`));
      return;
    }
    decide("Approve with edits", h("div", {}, `${call.tool} runs with:`, h("pre", {}, pretty(args))), { decision: "edit", arguments: args });
  };
  const decisions = () => [
    h("details", { class: "fold edit-args" }, h("summary", {}, "Edit the arguments"), form.element, h("div", { class: "buttons" }, h("button", { type: "button", class: "approve-edited", onclick: approveEdited }, "Approve edited"))),
    h(
      "div",
      { class: "buttons" },
      h("button", { type: "button", class: "primary approve", onclick: () => decide("Approve", `${call.tool} runs with the arguments the model gave.`, { decision: "approve" }) }, "Approve"),
      h("label", { for: reasonId, class: "visually-hidden" }, "Reason to deny"),
      reason,
      h("button", { type: "button", class: "danger deny", onclick: () => decide("Deny", `${call.tool} does not run; the model is told${reason.value ? `: ${reason.value}` : " it was denied"}.`, { decision: "deny", reason: reason.value }) }, "Deny"),
    ),
  ];
  const allowed = mayOn("decide_approval", job.owner);
  return h(
    "div",
    { class: "approval", dataset: { call: call.callId, job: job.id } },
    h("div", { class: "call-head" }, h("span", { class: "fn" }, "ƒ"), h("b", {}, call.tool), call.effect ? h("span", { class: `badge effect-${call.effect}` }, call.effect.replaceAll("_", " ")) : null, h("code", { class: "muted call-id" }, call.callId)),
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "asked by"),
      h("dd", { class: "approval-rule" }, rule ? h("code", {}, `approval: ${rule}`) : "the tool's approval rule", where ? [" in bundle ", h("b", {}, where.bundle)] : null),
      where ? [h("dt", {}, "where"), h("dd", { class: "approval-path" }, [...where.path, `ƒ ${call.tool}`].join(" → "))] : null,
      h("dt", {}, "who decides"),
      h("dd", {}, call.approver === "others" ? "someone other than the job's submitter" : "anyone who may approve"),
      h("dt", {}, "requested"),
      h("dd", {}, call.requestedAt ? ago(call.requestedAt) : "—"),
      h("dt", {}, "auto-deny"),
      h("dd", { class: "auto-deny" }, Number.isNaN(deadline) ? "never: it waits for a person" : deadline > serverNow() ? `in ${duration(deadline - serverNow())} (at ${new Date(deadline).toLocaleTimeString()})` : "due now"),
      h("dt", {}, "arguments"),
      h("dd", {}, h("pre", { class: "args" }, pretty(call.arguments))),
    ),
    allowed.ok ? gateAll(decisions(), mayDecideOn(call)) : refusal("Deciding on it", allowed, "job"),
  );
}
