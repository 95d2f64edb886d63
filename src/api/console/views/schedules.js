// The schedules (`/ui/schedules`): every schedule the key may see, with its
// cron and time zone, its next fires in that zone and how far off they are,
// its last fire and what it did, and a link to the last fire's job; and
// what the CLI's `schedules` does: make one, edit it, pause and resume it,
// run it now, delete it (a bundle's own schedule is edited in the bundle).
// Each action asks first, and one the key may not take is disabled with
// the scopes it needs. The list refreshes every few seconds; the form
// stays as typed.

import { h, fill, link, banner, confirmAction, errorText, count, duration, millis } from "../dom.js";
import { api, every, serverNow } from "../api.js";
import { shortId } from "./jobs.js";
import { scheduleForm } from "./scheduleform.js";
import { may, mayOn, gate, reason } from "../session.js";

const REFRESH_MS = 3000;

export function render(root, _params, signal) {
  const status = h("p", { class: "muted list-status", id: "schedules-status" });
  const outcome = h("div", { id: "schedules-outcome", "aria-live": "polite" });
  const formPlace = h("div", { id: "schedule-form-place" });
  const body = h("tbody", {});
  const table = h(
    "table",
    { id: "schedules" },
    h("thead", {}, h("tr", {}, ...["Schedule", "Bundle", "Cron", "State", "Next fires", "Last fire", "Last job", ""].map((t) => h("th", { scope: "col" }, t)))),
    body,
  );
  const make = h("button", { type: "button", class: "primary", id: "new-schedule", onclick: () => openForm(null) }, "New schedule");
  fill(root, h("div", { class: "title-row" }, h("h1", {}, "Schedules"), gate(make, may("create_schedule"))), h("p", { class: "muted" }, "Cron fires that submit a bundle's job: a bundle's own `schedule:` and those made over the API."), outcome, formPlace, status, table);

  async function refresh() {
    try {
      const schedules = await api("/v1/schedules", { signal });
      fill(body, ...schedules.map((s) => row(s, act, openForm)));
      fill(status, schedules.length ? `${count(schedules.length, "schedule")} · updated ${new Date().toLocaleTimeString()}` : "No schedules.");
    } catch (error) {
      if (!signal.aborted) fill(status, banner("error", "Cannot read the schedules: ", errorText(error)));
    }
  }

  /** Asks, sends `request`, says what came of it, and reads the list again. */
  async function act({ title, text, path, method = "POST", done }) {
    if (!(await confirmAction({ title, body: text, confirm: title, danger: method === "DELETE" }))) return;
    try {
      const answer = await api(path, { method });
      fill(outcome, banner("ok", done(answer)));
    } catch (error) {
      fill(outcome, banner("error", `${title} failed: `, errorText(error)));
    }
    await refresh();
  }

  async function openForm(schedule) {
    const bundles = await api("/v1/bundles", { signal }).then((a) => a.bundles.filter((b) => b.status !== "invalid").map((b) => b.name));
    const close = () => fill(formPlace);
    const send = async (request) => {
      const path = schedule ? `/v1/schedules/${encodeURIComponent(schedule.id)}` : "/v1/schedules";
      try {
        const saved = await api(path, { method: schedule ? "PUT" : "POST", body: request });
        fill(outcome, banner("ok", `${schedule ? "Saved" : "Made"} schedule `, h("code", {}, saved.id), ": next fire ", nextFire(saved), "."));
        close();
        await refresh();
        return null;
      } catch (error) {
        return banner("error", "The daemon refused the schedule: ", errorText(error));
      }
    };
    fill(formPlace, scheduleForm({ schedule, bundles, send, cancel: close }));
    formPlace.querySelector("select, input:not([disabled])")?.focus();
  }

  every(REFRESH_MS, refresh, signal);
}

/** One schedule as a row, with the actions on it. */
function row(s, act, openForm) {
  const zone = s.spec.timezone;
  const fires = s.next_fires.length ? s.next_fires : s.next_fire ? [s.next_fire] : [];
  return h(
    "tr",
    { dataset: { schedule: s.id, paused: String(s.paused) } },
    h("td", { "data-label": "schedule" }, h("code", {}, s.id), s.source === "bundle" ? " (bundle)" : ""),
    h("td", { "data-label": "bundle" }, s.bundle),
    h("td", { "data-label": "cron" }, h("code", {}, s.spec.cron), ` ${zone}`),
    h("td", { "data-label": "state", class: "schedule-state" }, s.paused ? "paused" : "active"),
    h("td", { "data-label": "next fires", class: "next-fires" }, fires.length ? h("ul", { class: "fires" }, fires.map((f) => h("li", {}, whenIn(f, zone)))) : s.paused ? "none while paused" : "never"),
    h("td", { "data-label": "last fire" }, s.last_fire ? [whenIn(s.last_fire, zone), ` (${(s.last_outcome || "?").replaceAll("_", " ")})`] : "none yet"),
    h("td", { "data-label": "last job" }, s.last_job ? link(`/ui/jobs/${encodeURIComponent(s.last_job)}`, shortId(s.last_job)) : "—"),
    h("td", { class: "actions" }, h("div", { class: "buttons" }, actions(s, act, openForm))),
  );
}

/** Pause or resume, run now, edit and delete, as the key may. */
function actions(s, act, openForm) {
  const path = `/v1/schedules/${encodeURIComponent(s.id)}`;
  const manage = mayOn("manage_schedule", s.owner);
  const button = (cls, label, onclick) => h("button", { type: "button", class: cls, onclick }, label);
  const toggle = s.paused
    ? button("resume", "Resume", () => act({ title: `Resume ${s.id}`, text: "It fires again from now on; the fires while it was paused are passed over (counted as missed).", path: `${path}/resume`, done: (v) => [`Resumed ${v.id}: next fire `, nextFire(v), "."] }))
    : button("pause", "Pause", () => act({ title: `Pause ${s.id}`, text: "No fire is submitted until it is resumed; fires meanwhile count as missed.", path: `${path}/pause`, done: (v) => `Paused ${v.id}.` }));
  const run = button("run-now", "Run now", () => act({ title: `Run ${s.id} now`, text: `One job of ${s.bundle} now, with the schedule's input and variables, outside the cron (no fire is used up).`, path: `${path}/run`, done: (job) => [`Job queued: `, link(`/ui/jobs/${encodeURIComponent(job.id)}`, h("code", { class: "run-job" }, job.id))] }));
  const running = mayOn("run_schedule", s.owner);
  // Nothing it may do here: say why once, not on every button.
  if (!manage.ok && !running.ok) return h("span", { class: "why-not" }, reason(manage, "schedule"));
  const parts = [gate(toggle, manage, "schedule"), gate(run, running, "schedule")];
  if (s.source !== "bundle") {
    parts.push(gate(button("edit", "Edit", () => openForm(s)), manage, "schedule"));
    parts.push(gate(button("danger delete", "Delete", () => act({ title: `Delete ${s.id}`, text: "It fires no more; its jobs stay.", path, method: "DELETE", done: () => `Deleted ${s.id}.` })), manage, "schedule"));
  }
  return parts;
}

/** A schedule's next fire, in its zone, or "never". */
function nextFire(schedule) {
  return schedule.next_fire ? whenIn(schedule.next_fire, schedule.spec.timezone) : "never";
}

/** An RFC 3339 time in time zone `zone`, and how far off it is: "Mar 3, 2:30 AM Europe/Berlin (in 3 h 2 min)". */
export function whenIn(time, zone) {
  const at = millis(time);
  let shown;
  try {
    shown = new Intl.DateTimeFormat(undefined, { timeZone: zone, dateStyle: "medium", timeStyle: "short" }).format(at);
  } catch {
    shown = new Date(at).toISOString();
  }
  return h("time", { datetime: time, title: time }, `${shown} ${zone} (${relative(at - serverNow())})`);
}

/** How far off a time `off` ms from now is: "in 3 h 2 min", "in 32 days", "5 s ago". */
function relative(off) {
  const far = Math.abs(off);
  if (far < 1000) return "now";
  const text = far >= 2 * 86400000 ? `${Math.round(far / 86400000)} days` : duration(far);
  return off > 0 ? `in ${text}` : `${text} ago`;
}
