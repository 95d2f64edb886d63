// The bundles (`/ui/bundles`): an overview of every directory of the
// bundles directory, problems first — rejected (nothing serves) and
// degraded (its last edit is broken; the last good version serves), each
// with its errors located by file, line and key — then the bundles that
// serve; one compact card each (name, status, version, tools, model), its
// details on demand (a <details>, open when the URL's `?open=NAME` names
// it, so a bundle's details can be linked): digest, tools, the panel that
// moves its jobs on earlier versions to the current one (migrate.js) and
// the one that runs its crash matrix (verify.js) and its evals (evals.js:
// the suite, the runs, the score over versions, a run's case-by-case
// diff). A version the release gate holds shows as a banner: under
// evaluation, or rejected and why, with Promote and Reject for a key that
// may (release.js). A reload button shows the typed reload outcome.

import { h, fill, link, banner, confirmAction, pretty, ago, errorText, count } from "../dom.js";
import { api } from "../api.js";
import { migratePanel } from "./migrate.js";
import { verifyPanel } from "./verify.js";
import { evalsPanel } from "./evals.js";
import { releaseActions } from "./release.js";
import { may, gate } from "../session.js";

/** `/x/bundles/calc/bundle.yaml:12: tools[0].timeout: invalid duration "soon"` → its parts. */
export function locate(error) {
  const m = /^(.*?):(\d+): ([^\s:]+): ([\s\S]*)$/.exec(error);
  return m ? { file: m[1], line: m[2], key: m[3], message: m[4] } : { message: error };
}

/** Problems first: what serves nothing, then what serves an older version, then the rest. */
const PROBLEM = { invalid: 0, degraded: 1 };
function problemFirst(a, b) {
  return (PROBLEM[a.status] ?? 2) - (PROBLEM[b.status] ?? 2) || a.name.localeCompare(b.name);
}

export function render(root, { query: params }, signal) {
  const outcome = h("div", { id: "reload-outcome" });
  const list = h("div", { id: "bundles" });
  const generation = h("span", { class: "muted" });
  const reload = h("button", { type: "button", class: "primary", id: "reload", onclick: () => doReload() }, "Reload");
  const open = new Set(params.getAll("open"));
  fill(root, h("div", { class: "title-row" }, h("h1", {}, "Bundles"), generation, gate(reload, may("reload"))), outcome, list);

  async function load() {
    try {
      const answer = await api("/v1/bundles", { signal });
      fill(generation, `snapshot generation ${answer.generation}`);
      const details = await Promise.all(
        answer.bundles.map((b) => api(`/v1/bundles/${encodeURIComponent(b.name)}`, { signal }).catch(() => b)),
      );
      const all = [...details, ...(answer.rejected || []).map((b) => ({ ...b, status: "invalid" }))].sort(problemFirst);
      const problems = all.filter((b) => b.status in PROBLEM);
      const serving = all.filter((b) => !(b.status in PROBLEM));
      const card = (b) => bundleCard(b, open, decided);
      fill(
        list,
        all.length ? null : h("p", { class: "empty" }, "No bundle directory yet: drop one into the bundles directory."),
        problems.length ? [h("h2", { class: "attention-title" }, `Needs attention (${problems.length})`), problems.map(card)] : null,
        problems.length && serving.length ? h("h2", {}, `Serving (${serving.length})`) : null,
        serving.map(card),
      );
    } catch (error) {
      if (!signal.aborted) fill(list, banner("error", "Cannot read the bundles: ", errorText(error)));
    }
  }

  /** A release decision was made: say so, and draw what serves now. */
  function decided(note) {
    fill(outcome, note);
    load();
  }

  async function doReload() {
    const ok = await confirmAction({
      title: "Reload",
      body: "The daemon reads every bundle, model config, plugin and the config again. A broken bundle keeps its last good version; running jobs keep the content they started with.",
      confirm: "Reload",
    });
    if (!ok) return;
    reload.disabled = true;
    fill(outcome, banner("info", "Reloading…"));
    try {
      fill(outcome, reloadReport(await api("/v1/reload", { method: "POST" })));
    } catch (error) {
      // A rejected reload is a 422 that carries the report.
      fill(outcome, error.body && error.body.result ? reloadReport(error.body) : banner("error", "Reload failed: ", errorText(error)));
    } finally {
      reload.disabled = !may("reload").ok;
      load();
    }
  }

  load();
}

/**
 * One bundle: a line that says what it is and whether it serves, its
 * problem when it has one, and its details folded (open when `open` has
 * its name; opening one puts it in the URL).
 */
function bundleCard(b, open, decided) {
  const tools = b.tools || [];
  const facts = [b.version ? `version ${b.version}` : null, b.tools ? count(tools.length, "tool") : null, b.model ? `model ${b.model.name}` : null].filter(Boolean).join(" · ");
  const more = h(
    "details",
    { class: "bundle-more", open: open.has(b.name), ontoggle: (e) => remember(b.name, e.target.open) },
    h("summary", {}, h("h2", {}, b.name), h("span", { class: `badge bundle-${b.status}` }, b.status), h("span", { class: "muted" }, facts), b.description ? h("span", { class: "muted bundle-description" }, b.description) : null),
    bundleDetails(b, tools),
  );
  return h(
    "section",
    { class: `card bundle status-${b.status}`, dataset: { bundle: b.name, status: b.status } },
    more,
    b.status === "degraded" ? banner("warn", `Its last edit is broken: version ${b.version} keeps serving.`) : null,
    b.candidate ? candidateBanner(b, decided) : null,
    b.errors && b.errors.length ? errorTable(b.errors) : null,
  );
}

/** A version the release gate holds: under evaluation, a canary, or rejected and why; and the operator's word on it. */
function candidateBanner(b, decided) {
  const c = b.candidate;
  // On a line of its own: inside the banner's sentence only its colour would tell it apart.
  const evalLink = c.eval_job ? h("p", { class: "candidate-eval" }, link(`/ui/jobs/${encodeURIComponent(c.eval_job)}`, "The eval that decided")) : null;
  if (c.state === "rejected") {
    return h(
      "div",
      { class: "candidate", dataset: { candidate: c.version, state: c.state } },
      banner("warn", `Version ${c.version} was rejected by ${c.by === "gate" ? "its evals" : c.by}: ${c.reason}${/[.!?]$/.test(c.reason || "") ? "" : "."} Version ${b.version} keeps serving.`),
      evalLink,
      releaseActions(b, decided),
    );
  }
  if (c.state === "canary") {
    return h(
      "div",
      { class: "candidate", dataset: { candidate: c.version, state: c.state } },
      banner("info", `Version ${c.version} passed its evals and is a canary: ${c.reason}${/[.!?]$/.test(c.reason || "") ? "" : "."} Version ${b.version} serves the other jobs.`),
      evalLink,
      releaseActions(b, decided),
    );
  }
  return h(
    "div",
    { class: "candidate", dataset: { candidate: c.version, state: c.state } },
    banner("info", `Version ${c.version} is held until its evals pass; version ${b.version} keeps serving.`),
    releaseActions(b, decided),
  );
}

/** `?open=NAME` follows the bundles whose details are open. */
function remember(name, isOpen) {
  const params = new URLSearchParams(location.search);
  const names = params.getAll("open").filter((n) => n !== name);
  params.delete("open");
  for (const n of isOpen ? [...names, name] : names) params.append("open", n);
  history.replaceState(null, "", `/ui/bundles${params.size ? `?${params}` : ""}`);
}

/** What a bundle's details hold: links, facts, tools, and the migrate, verify and evals panels. */
function bundleDetails(b, tools) {
  return h(
    "div",
    { class: "bundle-body" },
    b.status !== "invalid"
      ? h("p", { class: "links" }, link(`/ui/submit?bundle=${encodeURIComponent(b.name)}`, "Submit a job"), " ", link(`/ui/jobs?bundle=${encodeURIComponent(b.name)}`, "Its jobs"))
      : null,
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "directory"),
      h("dd", {}, h("code", {}, b.dir)),
      b.digest ? [h("dt", {}, "digest"), h("dd", {}, h("code", {}, b.digest))] : null,
      b.loaded_at ? [h("dt", {}, "loaded"), h("dd", { title: b.loaded_at }, ago(b.loaded_at))] : null,
      b.model ? [h("dt", {}, "model"), h("dd", {}, `${b.model.name} at ${b.model.endpoint} (${b.model.plugin})`)] : null,
    ),
    tools.length ? toolTable(tools) : null,
    b.status !== "invalid" && b.version ? migratePanel(b) : null,
    b.status !== "invalid" && b.version ? verifyPanel(b) : null,
    b.status !== "invalid" && b.version ? evalsPanel(b) : null,
  );
}

function toolTable(tools) {
  return h(
    "table",
    { class: "tools" },
    h("thead", {}, h("tr", {}, ["tool", "kind", "effect", "description"].map((t) => h("th", {}, t)))),
    h(
      "tbody",
      {},
      tools.map((t) =>
        h(
          "tr",
          {},
          h("td", { "data-label": "tool" }, h("details", { class: "fold" }, h("summary", {}, h("code", {}, t.name)), h("pre", {}, pretty(t.parameters)))),
          h("td", { "data-label": "kind" }, t.kind),
          h("td", { "data-label": "effect" }, t.effect ? h("span", { class: `badge effect-${t.effect}` }, t.effect.replaceAll("_", " ")) : ""),
          h("td", { "data-label": "description" }, t.description || ""),
        ),
      ),
    ),
  );
}

/** Errors as file, line, key and message. */
function errorTable(errors) {
  return h(
    "table",
    { class: "errors" },
    h("thead", {}, h("tr", {}, ["file", "line", "key", "error"].map((t) => h("th", {}, t)))),
    h(
      "tbody",
      {},
      errors.map((text) => {
        const e = locate(text);
        return h(
          "tr",
          { class: "error-row" },
          h("td", { "data-label": "file" }, e.file ? h("code", {}, e.file) : ""),
          h("td", { "data-label": "line" }, e.line || ""),
          h("td", { "data-label": "key" }, e.key ? h("code", {}, e.key) : ""),
          h("td", { "data-label": "error" }, e.message),
        );
      }),
    ),
  );
}

/** The typed outcome of `POST /v1/reload`. */
function reloadReport(r) {
  const kind = { applied: "ok", partial: "warn", rejected: "error" }[r.result] || "info";
  const names = (label, list) => (list && list.length ? [h("dt", {}, label), h("dd", {}, list.join(", "))] : null);
  const counts = r.bundles ? `${r.bundles.ok} ok, ${r.bundles.degraded} degraded, ${r.bundles.invalid} invalid` : "";
  return h(
    "div",
    { class: `card reload-report ${kind}`, dataset: { result: r.result } },
    h("h2", {}, `Reload ${r.result}`, h("span", { class: "muted" }, ` · generation ${r.generation} · ${r.trigger}`)),
    h(
      "p",
      {},
      {
        applied: "Everything read cleanly and is now served.",
        partial: "Some bundles failed; the rest applied. The failed ones keep their last good version, if they had one.",
        rejected: "Nothing changed: the last good state keeps serving.",
      }[r.result] || "",
    ),
    h("dl", { class: "facts" }, names("added", r.added), names("changed", r.changed), names("removed", r.removed), names("failed", r.failed), counts ? [h("dt", {}, "bundles"), h("dd", {}, counts)] : null),
    r.errors && r.errors.length ? errorTable(r.errors) : null,
  );
}
