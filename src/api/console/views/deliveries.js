// The webhook and push deliveries (`/ui/deliveries`): by default the dead
// letters — deliveries whose every attempt failed — with where they went,
// why the last attempt failed and the job they tell of; "Redrive" sends a
// dead one again (`POST /v1/deliveries/{id}/redrive`, scope `operate`). The
// daemon decides what a key sees: its own jobs' deliveries, or all with
// `operate_all`.

import { h, fill, link, banner, confirmAction, errorText, count } from "../dom.js";
import { api, every } from "../api.js";
import { shortId } from "./jobs.js";
import { may, gate } from "../session.js";

const REFRESH_MS = 3000;
const STATES = [
  ["dead", "Dead letters"],
  ["pending", "Pending"],
  ["delivered", "Delivered"],
  ["", "All"],
];

export function render(root, params, signal) {
  const chosen = params.query.get("state") ?? "dead";
  const select = h(
    "select",
    { id: "deliveries-state", onchange: () => refresh() },
    ...STATES.map(([value, label]) => h("option", { value, selected: value === chosen }, label)),
  );
  const status = h("p", { class: "muted list-status", id: "deliveries-status", "aria-live": "polite" });
  const body = h("tbody", {});
  const table = h(
    "table",
    { id: "deliveries" },
    h("thead", {}, h("tr", {}, ...["Delivery", "Job", "Event", "Target", "State", "Attempts", "Last error", "Updated", ""].map((t) => h("th", { scope: "col" }, t)))),
    body,
  );
  fill(
    root,
    h("h1", {}, "Deliveries"),
    h("p", { class: "muted" }, "Completion webhooks and A2A push notifications from the outbox. A dead letter is sent again only when redriven."),
    h("label", { for: "deliveries-state" }, "Show "),
    select,
    status,
    table,
  );

  async function redrive(d, button) {
    const text = `Send ${d.event} of job ${shortId(d.job_id)} to ${d.target} again, as a new first attempt (the receiver sees the same webhook-id).`;
    if (!(await confirmAction({ title: "Redrive the delivery", body: text, confirm: "Redrive" }))) return;
    button.disabled = true;
    try {
      await api(`/v1/deliveries/${encodeURIComponent(d.id)}/redrive`, { method: "POST", body: {} });
      fill(status, banner("info", `Redriven: ${d.id} is pending again.`));
      await refresh(false);
    } catch (error) {
      button.disabled = false;
      fill(status, banner("error", `Cannot redrive ${d.id}: `, errorText(error)));
    }
  }

  function row(d) {
    const action = d.state === "dead" ? h("button", { type: "button", class: "redrive" }, "Redrive") : "";
    if (action) action.onclick = () => redrive(d, action);
    const offered = action ? gate(action, may("redrive_delivery")) : "";
    return h(
      "tr",
      { dataset: { delivery: d.id, state: d.state } },
      h("td", {}, h("code", {}, d.id), ` ${d.kind}`),
      h("td", {}, link(`/ui/jobs/${encodeURIComponent(d.job_id)}`, shortId(d.job_id))),
      h("td", {}, d.event),
      h("td", {}, h("code", {}, d.target)),
      h("td", { class: "delivery-state" }, d.state),
      h("td", {}, String(d.attempts)),
      h("td", {}, d.last_error || "—"),
      h("td", {}, d.updated_at),
      h("td", {}, offered),
    );
  }

  async function refresh(sayCount = true) {
    const query = new URLSearchParams({ limit: "100" });
    if (select.value) query.set("state", select.value);
    try {
      const page = await api(`/v1/deliveries?${query}`, { signal });
      fill(body, ...page.deliveries.map(row));
      if (sayCount) {
        fill(status, page.deliveries.length ? `${count(page.deliveries.length, "delivery", "deliveries")} · updated ${new Date().toLocaleTimeString()}` : "No deliveries here.");
      }
    } catch (error) {
      if (!signal.aborted) fill(status, banner("error", "Cannot read the deliveries: ", errorText(error)));
    }
  }
  every(REFRESH_MS, refresh, signal);
}
