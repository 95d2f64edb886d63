// "Jobs on earlier versions", on each served bundle of the bundles page:
// `POST /v1/bundles/{name}/migrate-jobs` as a dry run ("Check") lists the
// waiting and parked jobs that would move to the bundle's current version
// and those that cannot, each with its reason; "Move N jobs" does the move
// (the daemon decides who may: a refusal is shown as the API says it).

import { h, fill, banner, confirmAction, link, errorText, count } from "../dom.js";
import { api } from "../api.js";
import { may, gate } from "../session.js";

/** The panel for bundle `b` (an `h3` section inside its card). */
export function migratePanel(b) {
  const id = `migrate-${b.name}`;
  const result = h("div", { class: "migrate-result", id: `${id}-result`, "aria-live": "polite" });
  const move = h("button", { type: "button", class: "primary migrate-move", hidden: true, onclick: () => doMove() }, "Move");
  const check = h("button", { type: "button", class: "migrate-check", "aria-describedby": `${id}-help`, onclick: () => doCheck() }, "Check");
  const path = `/v1/bundles/${encodeURIComponent(b.name)}/migrate-jobs`;

  async function doCheck() {
    check.disabled = true;
    move.hidden = true;
    fill(result, banner("info", "Checking…"));
    try {
      const plan = await api(path, { method: "POST", body: { dry_run: true } });
      fill(result, planReport(plan));
      move.hidden = plan.moves.length === 0;
      fill(move, `Move ${count(plan.moves.length, "job")}`);
    } catch (error) {
      fill(result, banner("error", `Cannot check the jobs of ${b.name}: `, errorText(error)));
    } finally {
      check.disabled = false;
    }
  }

  async function doMove() {
    const body = `The waiting and parked jobs of ${b.name} whose journals replay on version ${b.version} are pinned to it; they continue on it from where they stopped.`;
    if (!(await confirmAction({ title: move.textContent, body, confirm: "Move" }))) return;
    move.disabled = true;
    fill(result, banner("info", "Moving…"));
    try {
      const plan = await api(path, { method: "POST", body: {} });
      move.hidden = true;
      fill(result, planReport(plan));
    } catch (error) {
      fill(result, banner("error", `The daemon refused to move the jobs of ${b.name}: `, errorText(error)));
    } finally {
      move.disabled = false;
    }
  }

  return h(
    "section",
    { class: "migrate", id, "aria-labelledby": `${id}-title` },
    h("h3", { id: `${id}-title` }, "Jobs on earlier versions"),
    h("p", { class: "muted", id: `${id}-help` }, `Which waiting and parked jobs can move to version ${b.version || "current"} (their journal replays on it), and which cannot.`),
    h("div", { class: "buttons" }, gate(check, may("migrate_jobs")), move),
    result,
  );
}

/** A plan (dry run or done): the jobs that move and those that cannot, with why. */
function planReport(plan) {
  const verb = plan.dry_run ? "would move" : "moved";
  const row = (m) =>
    h(
      "li",
      { dataset: { job: m.job_id } },
      link(`/ui/jobs/${encodeURIComponent(m.job_id)}`, h("code", {}, m.job_id)),
      ` (${m.state.replaceAll("_", " ")}) from version ${m.from_version}`,
      m.reason ? `: ${m.reason}` : "",
    );
  return h(
    "div",
    { class: "migrate-plan", dataset: { dryRun: String(plan.dry_run) } },
    banner(
      plan.moves.length ? "ok" : "info",
      `${count(plan.moves.length, "job")} ${verb} to version ${plan.version}, ${plan.refused.length} cannot.`,
    ),
    plan.moves.length ? [h("h4", {}, plan.dry_run ? "Would move" : "Moved"), h("ul", { class: "plain migrate-moves" }, plan.moves.map(row))] : null,
    plan.refused.length ? [h("h4", {}, "Cannot move"), h("ul", { class: "plain migrate-refused" }, plan.refused.map(row))] : null,
  );
}
