// The schedules (`/ui/schedules`): every schedule the key may see, with its
// cron, time zone, next and last fire and what the last fire did; a link to
// the last fire's job. It refreshes every few seconds.

import { h, fill, link, banner, errorText, count } from "../dom.js";
import { api, every } from "../api.js";
import { shortId } from "./jobs.js";

const REFRESH_MS = 3000;

export function render(root, _params, signal) {
  const status = h("p", { class: "muted list-status", id: "schedules-status" });
  const body = h("tbody", {});
  const table = h(
    "table",
    { id: "schedules" },
    h("thead", {}, h("tr", {}, ...["Schedule", "Bundle", "Cron", "State", "Next fire", "Last fire", "Last job"].map((t) => h("th", { scope: "col" }, t)))),
    body,
  );
  fill(root, h("h1", {}, "Schedules"), h("p", { class: "muted" }, "Cron fires that submit a bundle's job: a bundle's own `schedule:` and those made over the API."), status, table);

  async function refresh() {
    try {
      const schedules = await api("/v1/schedules", { signal });
      fill(
        body,
        ...schedules.map((s) =>
          h(
            "tr",
            { dataset: { schedule: s.id } },
            h("td", {}, h("code", {}, s.id), s.source === "bundle" ? " (bundle)" : ""),
            h("td", {}, s.bundle),
            h("td", {}, h("code", {}, s.spec.cron), ` ${s.spec.timezone}`),
            h("td", {}, s.paused ? "paused" : "active"),
            h("td", {}, s.next_fire || "never"),
            h("td", {}, s.last_fire ? `${s.last_fire} (${s.last_outcome || "?"})` : "none yet"),
            h("td", {}, s.last_job ? link(`/ui/jobs/${encodeURIComponent(s.last_job)}`, shortId(s.last_job)) : "—"),
          ),
        ),
      );
      fill(status, schedules.length ? `${count(schedules.length, "schedule")} · updated ${new Date().toLocaleTimeString()}` : "No schedules.");
    } catch (error) {
      if (!signal.aborted) fill(status, banner("error", "Cannot read the schedules: ", errorText(error)));
    }
  }
  every(REFRESH_MS, refresh, signal);
}
