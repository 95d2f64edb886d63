// The approvals inbox (`/ui/approvals`): every call awaiting a person,
// across jobs, oldest request first, each a card to decide on (approval.js).
// It refreshes every few seconds; a card already shown stays as it is (a
// half-edited form or a typed reason is not lost), only new and decided
// calls come and go.

import { h, fill, link, banner, errorText } from "../dom.js";
import { api, every } from "../api.js";
import { pendingCall, scopeText } from "./pending.js";
import { approvalCard } from "./approval.js";
import { shortId } from "./jobs.js";

const REFRESH_MS = 3000;

export function render(root, _params, signal) {
  const outcome = h("div", { id: "outcome" });
  const status = h("p", { class: "muted list-status", id: "inbox-status" });
  const list = h("div", { id: "inbox" });
  fill(root, h("h1", {}, "Approvals"), h("p", { class: "muted" }, "Tool calls waiting for a person's decision, oldest first."), outcome, status, list);
  const shown = new Map(); // `${job}|${call}` → card wrapper
  const rules = new Map(); // bundle → Map(tool → rule)

  const ruleOf = async (bundle, tool) => {
    if (!rules.has(bundle)) {
      const tools = await api(`/v1/bundles/${encodeURIComponent(bundle)}`, { signal })
        .then((b) => new Map((b.tools || []).map((t) => [t.name, t.approval || null])))
        .catch(() => new Map());
      rules.set(bundle, tools);
    }
    return rules.get(bundle).get(tool) || null;
  };

  async function refresh() {
    try {
      const answer = await api("/v1/jobs?state=awaiting_approval&limit=200", { signal });
      const waiting = answer.jobs.map((job) => ({ job, call: pendingCall(job) })).filter((x) => x.call);
      waiting.sort((a, b) => String(a.call.requestedAt || a.job.updated_at).localeCompare(String(b.call.requestedAt || b.job.updated_at)));
      const keys = new Set(waiting.map((x) => `${x.job.id}|${x.call.callId}`));
      for (const [key, el] of shown) if (!keys.has(key)) (el.remove(), shown.delete(key));
      let previous = null;
      for (const { job, call } of waiting) {
        const key = `${job.id}|${call.callId}`;
        let el = shown.get(key);
        if (!el) {
          // A call of a nested run asks by its own bundle's rule, which the
          // park recorded; an older park's is looked up in that bundle.
          const nested = call.scope ? { bundle: call.bundle || "a nested bundle", path: [job.bundle, `via ${scopeText(call.scope)}`, call.bundle || "?"] } : null;
          const rule = call.rule || (await ruleOf(call.bundle || job.bundle, call.tool));
          el = h(
            "section",
            { class: "card attention inbox-item", dataset: { job: job.id } },
            h("p", { class: "crumbs" }, link(`/ui/jobs/${encodeURIComponent(job.id)}`, "job ", h("code", {}, shortId(job.id))), ` · ${job.bundle} · `, h("span", { class: "muted" }, job.input.slice(0, 120))),
            approvalCard(job, call, { rule, where: nested, outcome, changed: () => refresh() }),
          );
          shown.set(key, el);
        }
        if (previous ? previous.nextSibling !== el : list.firstChild !== el) list.insertBefore(el, previous ? previous.nextSibling : list.firstChild);
        previous = el;
      }
      fill(status, waiting.length ? `${waiting.length} waiting · updated ${new Date().toLocaleTimeString()}` : "Nothing waits for a decision.");
    } catch (error) {
      if (!signal.aborted) fill(status, banner("error", "Cannot read the calls awaiting approval: ", errorText(error)));
    }
  }
  every(REFRESH_MS, refresh, signal);
}
