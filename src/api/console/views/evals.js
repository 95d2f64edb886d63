// "Evals", on each served bundle of the bundles page (issue 52): opened on
// demand (a <details>), it reads the suite of the version the release
// gate holds, else of the serving one — the cases a decision rests on
// (`GET /v1/bundles/{name}/evals/suite[?version=]`: each case's id, tags,
// input and graders) and the bundle's eval runs (`GET /v1/bundles/{name}/evals`:
// newest first, the key's own unless it reads every key's), refreshed
// while it is open so a running eval turns into its score; the score over
// versions (each version's latest finished run, an inline SVG bar each);
// and a form that runs the suite (`POST /v1/bundles/{name}/evals`: a
// version and one to compare against, from the versions the daemon
// served; tags; the real tools, listed and confirmed as verify's are).
// Choosing a run shows its report (evalreport.js): its cases, and with
// `against` the case-by-case diff of the two versions.

import { h, fill, banner, errorText, confirmAction, ago, stateBadge } from "../dom.js";
import { api, every } from "../api.js";
import { may, refusal } from "../session.js";
import { runReport } from "./evalreport.js";

/** How often an open panel reads the runs again. */
const REFRESH_MS = 2000;
/** The runs the panel lists (and draws the score over versions from). */
const RUNS = 100;

/** The panel for bundle `b` (an `h3` section inside its card). */
export function evalsPanel(b) {
  const id = `evals-${b.name}`;
  const path = `/v1/bundles/${encodeURIComponent(b.name)}/evals`;
  const suite = h("div", { class: "evals-suite" });
  const scores = h("div", { class: "evals-scores" });
  const runs = h("div", { class: "evals-runs", id: `${id}-runs` });
  const report = h("div", { class: "evals-report", id: `${id}-report`, "aria-live": "polite" });
  const outcome = h("div", { class: "evals-outcome", "aria-live": "polite" });
  const form = h("div", { class: "evals-form" });
  const state = { selected: null, seen: null, stop: null, formDrawn: false };

  async function refresh() {
    try {
      const answer = await api(`${path}?limit=${RUNS}`);
      if (!state.formDrawn) {
        state.formDrawn = true;
        fill(form, runForm(b, id, path, answer.versions, started));
      }
      // Redrawn only when a run changed: a redraw would take the focus
      // from a Show button every refresh.
      const seen = JSON.stringify(answer.runs);
      if (seen !== state.seen) {
        state.seen = seen;
        fill(scores, scoreOverVersions(answer.runs));
        fill(runs, runTable(answer.runs, state.selected, show));
      }
      const chosen = answer.runs.find((r) => r.id === state.selected);
      // A chosen run that was running has ended: draw its report now.
      if (chosen && report.dataset.state !== chosen.state) show(chosen.id);
    } catch (error) {
      state.seen = null;
      fill(runs, banner("error", `Cannot read the eval runs of ${b.name}: `, errorText(error)));
    }
  }

  async function show(runId) {
    state.selected = runId;
    for (const row of runs.querySelectorAll("tr[data-run]")) row.classList.toggle("chosen", row.dataset.run === runId);
    try {
      const job = await api(`/v1/jobs/${encodeURIComponent(runId)}`);
      report.dataset.state = job.state;
      fill(report, runReport(job));
    } catch (error) {
      fill(report, banner("error", "Cannot read the run: ", errorText(error)));
    }
  }

  function started(job) {
    fill(outcome, banner("ok", `Eval ${job.id} queued: it runs every case as a job of your key.`));
    state.selected = job.id;
    refresh();
  }

  async function opened() {
    const controller = new AbortController();
    state.stop = () => controller.abort();
    fill(suite, banner("info", "Reading the suite…"));
    const held = b.candidate?.version;
    api(held ? `${path}/suite?version=${encodeURIComponent(held)}` : `${path}/suite`)
      .then((s) => fill(suite, suiteList(s, held)))
      .catch((error) => fill(suite, banner("error", "Cannot read the suite: ", errorText(error))));
    every(
      REFRESH_MS,
      async () => {
        // A card drawn away (a reload of the page's list) stops its panel.
        if (!section.isConnected) controller.abort();
        else await refresh();
      },
      controller.signal,
    );
  }

  const section = layout(b, id, { suite, form, outcome, scores, runs, report }, (open) => (open ? opened() : state.stop?.()));
  return section;
}

/** The panel's section: its heading, and its parts in a fold that `toggled(open)` hears. */
function layout(b, id, parts, toggled) {
  const fold = h(
    "details",
    { class: "fold evals-fold", ontoggle: (e) => toggled(e.target.open) },
    h("summary", {}, "The suite, its runs and the score over versions"),
    h("h4", {}, "Suite"),
    parts.suite,
    h("h4", {}, "Run the suite"),
    parts.form,
    parts.outcome,
    h("h4", {}, "Score over versions"),
    parts.scores,
    h("h4", {}, "Runs"),
    parts.runs,
    parts.report,
  );
  return h(
    "section",
    { class: "evals", id, "aria-labelledby": `${id}-title` },
    h("h3", { id: `${id}-title` }, "Evals"),
    h("p", { class: "muted" }, `Runs the eval suite under evals/ (each case a job of your key, graded) on a version of ${b.name} the daemon served, optionally against another, case by case.`),
    fold,
  );
}

/** The suite's cases (of `held`, the version the gate holds, when it holds one), or why there are none. */
function suiteList(s, held) {
  if (!s.cases.length) return banner("warn", s.note || "The suite holds no case.");
  const whose = held ? `the version the release gate holds, ${s.version}` : `version ${s.version}, serving`;
  return h(
    "table",
    { class: "evals-cases" },
    h("caption", { class: "evals-suite-version" }, `The cases of ${whose}`),
    h("thead", {}, h("tr", {}, ["case", "tags", "input", "graders"].map((t) => h("th", {}, t)))),
    h(
      "tbody",
      {},
      s.cases.map((c) =>
        h(
          "tr",
          { dataset: { case: c.id } },
          h("td", { "data-label": "case" }, h("code", {}, c.id)),
          h("td", { "data-label": "tags" }, c.tags.join(", ")),
          h("td", { "data-label": "input", class: "input" }, c.input || (c.messages ? `${c.messages} messages` : "")),
          h("td", { "data-label": "graders" }, c.graders.join(", ")),
        ),
      ),
    ),
  );
}

/** Each version's latest finished run's score, as a bar and in words. */
function scoreOverVersions(runs) {
  const latest = new Map();
  for (const r of runs) {
    if (r.version && r.score !== null && r.score !== undefined && !latest.has(r.version)) latest.set(r.version, r);
  }
  if (!latest.size) return h("p", { class: "muted" }, "No finished run yet.");
  const versions = [...latest.keys()].sort((a, b) => a.localeCompare(b, undefined, { numeric: true }));
  return h(
    "ol",
    { class: "plain evals-score-list" },
    versions.map((v) => {
      const r = latest.get(v);
      return h(
        "li",
        { dataset: { version: v, pass: String(r.pass) } },
        h("span", { class: "evals-score-version" }, `version ${v}`),
        bar(r.score, r.pass),
        h("span", {}, `${r.score.toFixed(2)} · ${r.pass ? "pass" : "fail"}`),
      );
    }),
  );
}

/** A score from 0 to 1 as an inline SVG bar (its number is beside it in words). */
function bar(score, pass) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  for (const [k, v] of Object.entries({ viewBox: "0 0 100 10", width: "120", height: "12", "aria-hidden": "true", focusable: "false", class: "evals-bar" })) svg.setAttribute(k, v);
  const track = document.createElementNS(ns, "rect");
  for (const [k, v] of Object.entries({ x: "0", y: "0", width: "100", height: "10", rx: "2", class: "evals-bar-track" })) track.setAttribute(k, v);
  const fillRect = document.createElementNS(ns, "rect");
  const width = Math.max(0, Math.min(1, score)) * 100;
  for (const [k, v] of Object.entries({ x: "0", y: "0", width: String(width), height: "10", rx: "2", class: pass ? "evals-bar-pass" : "evals-bar-fail" })) fillRect.setAttribute(k, v);
  svg.append(track, fillRect);
  return svg;
}

/** The runs, newest first; each can be chosen to show its report. */
function runTable(runs, selected, show) {
  if (!runs.length) return h("p", { class: "empty" }, "No eval run of this bundle yet.");
  const cell = (label, ...content) => h("td", { "data-label": label }, ...content);
  return h(
    "table",
    { class: "evals-run-list" },
    h("thead", {}, h("tr", {}, ["when", "version", "against", "result", "cost", ""].map((t) => h("th", {}, t)))),
    h(
      "tbody",
      {},
      runs.map((r) => {
        const ended = r.score !== null && r.score !== undefined;
        const result = ended
          ? [h("span", { class: `badge ${r.pass ? "state-succeeded" : "state-failed"}` }, r.pass ? "pass" : "fail"), ` ${r.score.toFixed(2)} (${r.passed} passed, ${r.failed} failed)`]
          : [stateBadge(r.state), r.error ? ` ${r.error}` : ""];
        return h(
          "tr",
          { class: r.id === selected ? "chosen" : "", dataset: { run: r.id, state: r.state, pass: ended ? String(r.pass) : "" } },
          cell("when", h("span", { title: r.created_at }, ago(r.created_at))),
          cell("version", r.version || ""),
          cell("against", r.against || ""),
          // One child: a phone lays a cell out as its label and one value.
          cell("result", h("span", {}, ...result, r.regressions.length ? h("span", { class: "evals-regressed" }, ` · regressed: ${r.regressions.join(", ")}`) : null)),
          cell("cost", ended ? `$${r.cost_usd.toFixed(4)}` : ""),
          cell("", h("button", { type: "button", class: "link evals-show", onclick: () => show(r.id) }, "Show")),
        );
      }),
    ),
  );
}

/** The form that runs the suite, or why this key may not. */
function runForm(b, id, path, versions, started) {
  const verdict = may("submit_job");
  if (!verdict.ok) return refusal("Running the suite", verdict);
  const option = (v) => h("option", { value: v }, v === b.version ? `${v} (serving)` : v);
  const version = h("select", { id: `${id}-version`, class: "evals-version" }, versions.map(option));
  const against = h("select", { id: `${id}-against`, class: "evals-against" }, h("option", { value: "" }, "(none)"), versions.map(option));
  const tags = h("input", { type: "text", id: `${id}-tags`, class: "evals-tags", placeholder: "smoke, gate" });
  const real = h("input", { type: "checkbox", id: `${id}-real`, class: "evals-real" });
  const standIns = b.verify_stand_ins || [];
  const run = h("button", { type: "button", class: "primary evals-run", onclick: () => doRun() }, "Run suite");
  const failure = h("div", { "aria-live": "polite" });

  async function doRun() {
    const body = { version: version.value };
    if (against.value) body.against = against.value;
    const tagList = tags.value.split(",").map((t) => t.trim()).filter(Boolean);
    if (tagList.length) body.tags = tagList;
    if (real.checked) body.real_tools = true;
    if (!(await confirmAction(confirmation(b, body, standIns)))) return;
    run.disabled = true;
    fill(failure);
    try {
      started(await api(path, { method: "POST", body }));
    } catch (error) {
      fill(failure, banner("error", `Cannot run the suite of ${b.name}: `, errorText(error)));
    } finally {
      run.disabled = false;
    }
  }

  return h(
    "div",
    {},
    h("div", { class: "evals-fields" }, h("div", {}, h("label", { for: version.id }, "Version"), version), h("div", {}, h("label", { for: against.id }, "Against"), against), h("div", {}, h("label", { for: tags.id }, "Tags (any of them)"), tags)),
    h("p", { class: "evals-real-choice" }, real, h("label", { for: real.id }, standIns.length ? ` Run the real tools (${standIns.join(", ")})` : " Run the real tools")),
    h("div", { class: "buttons" }, run),
    failure,
  );
}

/** What a run does, for the person to confirm: the versions, and the tools that really run. */
function confirmation(b, body, standIns) {
  const effects = new Map((b.tools || []).map((t) => [t.name, (t.effect || "").replaceAll("_", " ")]));
  const tools = [...effects.keys()];
  const real = Boolean(body.real_tools);
  const running = real ? tools : tools.filter((t) => !standIns.includes(t));
  const item = (t) => h("li", { dataset: { tool: t } }, h("code", {}, t), ` (${effects.get(t)}${real && standIns.includes(t) ? ": side effects and all" : ""})`);
  const list = (names, cls) => h("ul", { class: cls }, names.map(item));
  const versions = body.against ? `version ${body.version} and version ${body.against}` : `version ${body.version}`;
  return {
    title: real && standIns.length ? `Run ${b.name}'s real tools?` : `Run ${b.name}'s suite?`,
    body: h(
      "div",
      {},
      h("p", {}, `Every case${body.tags ? ` tagged ${body.tags.join(" or ")}` : ""} runs as a job of your key on ${versions}, graded as the suite says.`),
      running.length ? [h("p", {}, "These tools would really run, in every case that calls them:"), list(running, "evals-real-tools")] : h("p", {}, "No tool would really run."),
      !real && standIns.length ? [h("p", {}, "Stand-ins answer these; nothing of theirs runs:"), list(standIns, "evals-stand-ins")] : null,
    ),
    confirm: real && standIns.length ? "Run the real tools" : "Run suite",
    danger: real && standIns.length > 0,
  };
}
