// The form that makes a schedule (`POST /v1/schedules`) or edits one
// (`PUT /v1/schedules/{id}`): its id, bundle, cron and time zone, each
// fire's input, variables and priority, what happens to missed and
// overlapping fires and how many missed ones run — the fields
// `structured-agents schedules create` takes. The time zone defaults to
// this browser's; the cron is read in it.

import { h, fill, banner, confirmAction, pretty } from "../dom.js";

const MISSED = ["skip", "run_once", "run_all"];
const OVERLAP = ["skip", "queue", "cancel_previous"];

/**
 * The form, filled from `schedule` when it edits one. `bundles` are the
 * names a fire may submit; `send(body)` makes or edits it and resolves to
 * null, or to the refusal to show in the form; `cancel()` closes it.
 */
export function scheduleForm({ schedule, bundles, send, cancel }) {
  const spec = schedule?.spec || {};
  const field = (id, label, control) => [h("label", { for: id }, label), control];
  const id = h("input", { type: "text", id: "schedule-id", name: "id", placeholder: "optional: a fresh id", value: schedule?.id, disabled: Boolean(schedule) });
  const bundle = h("select", { id: "schedule-bundle", name: "bundle", required: true }, bundles.map((b) => h("option", { value: b, selected: b === schedule?.bundle }, b)));
  const cron = h("input", { type: "text", id: "schedule-cron", name: "cron", required: true, placeholder: "0 30 2 * * *", value: spec.cron, spellcheck: "false" });
  const zone = h("input", { type: "text", id: "schedule-timezone", name: "timezone", required: true, value: spec.timezone || Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC" });
  const input = h("textarea", { id: "schedule-input", name: "input", rows: 2 }, spec.input || "");
  const variables = h("textarea", { id: "schedule-variables", name: "variables", rows: 2, spellcheck: "false" }, JSON.stringify(spec.variables || {}));
  const missed = choice("schedule-missed", MISSED, spec.missed);
  const overlap = choice("schedule-overlap", OVERLAP, spec.overlap);
  const priority = h("input", { type: "number", id: "schedule-priority", name: "priority", step: 1, value: spec.priority ?? 0 });
  const catchUp = h("input", { type: "number", id: "schedule-catch-up", name: "max_catch_up", min: 1, step: 1, value: spec.max_catch_up, placeholder: "the daemon's default" });
  const outcome = h("div", { id: "schedule-form-outcome" });
  const title = schedule ? `Edit ${schedule.id}` : "Make a schedule";
  const form = h(
    "form",
    { class: "card narrow", id: "schedule-form", onsubmit: (e) => submit(e) },
    h("h2", {}, title),
    outcome,
    field("schedule-id", "Id", id),
    field("schedule-bundle", "Bundle", bundle),
    field("schedule-cron", "Cron (minute hour day month weekday, or seconds first)", cron),
    field("schedule-timezone", "Time zone (IANA, the cron is read in it)", zone),
    field("schedule-input", "Each fire's input", input),
    field("schedule-variables", "Each fire's variables (a JSON object)", variables),
    field("schedule-missed", "Fires missed while no daemon ran", missed),
    field("schedule-overlap", "A fire while the last job still runs", overlap),
    field("schedule-priority", "Each fire's job priority (higher runs first)", priority),
    field("schedule-catch-up", "The most missed fires “run all” submits", catchUp),
    h(
      "div",
      { class: "buttons" },
      h("button", { type: "submit", class: "primary", id: "schedule-save" }, schedule ? "Save" : "Make the schedule"),
      h("button", { type: "button", class: "secondary", id: "schedule-cancel", onclick: cancel }, "Cancel"),
    ),
  );

  async function submit(event) {
    event.preventDefault();
    let vars;
    try {
      vars = JSON.parse(variables.value.trim() || "{}");
      if (typeof vars !== "object" || vars === null || Array.isArray(vars)) throw new Error('it must be an object, like {"style": "short"}');
    } catch (error) {
      fill(outcome, banner("error", `Variables are not a JSON object: ${error.message}`));
      return;
    }
    const body = { ...spec, bundle: bundle.value, cron: cron.value.trim(), timezone: zone.value.trim(), input: input.value, variables: vars, missed: missed.value, overlap: overlap.value, priority: Number(priority.value || 0) };
    // Empty: the daemon's default (an edit sends none, so the default applies again).
    if (catchUp.value) body.max_catch_up = Number(catchUp.value);
    else delete body.max_catch_up;
    if (!schedule && id.value.trim()) body.id = id.value.trim();
    const ok = await confirmAction({ title, body: h("div", {}, `Fires of ${body.bundle} on ${body.cron} (${body.timezone}), each a job with:`, h("pre", {}, pretty(body))), confirm: schedule ? "Save" : "Make" });
    if (!ok) return;
    fill(outcome);
    const refused = await send(body);
    if (refused) fill(outcome, refused);
  }
  return form;
}

function choice(id, values, chosen) {
  return h("select", { id, name: id.replace("schedule-", "") }, values.map((v) => h("option", { value: v, selected: v === (chosen || "skip") }, v.replaceAll("_", " "))));
}
