// One eval run's report, as the Evals panel (evals.js) shows the run
// chosen in its list: the verdict, the scores, and each case — with
// `against`, the case-by-case diff of the two versions side by side (each
// side's pass and score, answer, tool calls and cost, and the graders that
// failed), regressions and improvements marked. The report is the eval
// job's `result` (`GET /v1/jobs/{id}`; docs/evals.md, "What a run stores").

import { h, banner, link, stateBadge } from "../dom.js";

/** The report of eval job `job`, or where the run stands. */
export function runReport(job) {
  const r = job.result;
  if (job.state !== "succeeded" || !r || !Array.isArray(r.cases)) {
    const ended = ["failed", "dead", "cancelled"].includes(job.state);
    return h(
      "div",
      { class: "evals-run", dataset: { run: job.id, state: job.state } },
      banner(ended ? "error" : "info", stateBadge(job.state), ` Eval ${job.id} of version ${job.bundle_version || "?"}`, ended ? `: ${job.error || "it ended without a report"}` : ": its cases are running; the report appears when it ends."),
      h("p", {}, link(`/ui/jobs/${encodeURIComponent(job.id)}`, "The eval job")),
    );
  }
  const money = (n) => `$${(n || 0).toFixed(4)}`;
  const compared = r.against ? `; version ${r.against} scored ${(r.against_score ?? 0).toFixed(3)}` : "";
  return h(
    "div",
    { class: "evals-run", dataset: { run: job.id, state: job.state, pass: String(r.pass) } },
    h("h4", {}, r.against ? `Version ${r.version} against version ${r.against}` : `Version ${r.version}`),
    banner(r.pass ? "ok" : "error", h("strong", { class: "evals-verdict" }, `${r.pass ? "Pass" : "Fail"}: ${r.verdict}`)),
    h("p", { class: "evals-figures" }, `Score ${r.score.toFixed(3)} (${r.passed} passed, ${r.failed} failed)${compared}; cost ${money(r.cost_usd)}.`),
    // Links on lines of their own: inside a sentence only their colour would tell them apart.
    h("p", {}, link(`/ui/jobs/${encodeURIComponent(job.id)}`, "The eval job")),
    r.regressions.length ? h("p", { class: "evals-regressions" }, h("strong", {}, "Regressed: "), r.regressions.join(", ")) : null,
    r.improvements.length ? h("p", { class: "evals-improvements" }, h("strong", {}, "Improved: "), r.improvements.join(", ")) : null,
    r.real_tools ? h("p", {}, "The real tools ran, side effects and all.") : r.stand_ins && r.stand_ins.length ? h("p", { class: "muted" }, `Stand-ins answered ${r.stand_ins.join(", ")}: nothing of theirs really ran.`) : null,
    r.against ? diffTable(r) : caseTable(r),
  );
}

const CHANGE = { regressed: "regressed", improved: "improved", same: "same" };

/** Each case on both versions, side by side. */
function diffTable(r) {
  return h(
    "table",
    { class: "evals-diff" },
    h("thead", {}, h("tr", {}, h("th", {}, "case"), h("th", {}, "change"), h("th", {}, `version ${r.version}`), h("th", {}, `version ${r.against}`))),
    h(
      "tbody",
      {},
      r.cases.map((c) =>
        h(
          "tr",
          { class: c.change && c.change !== "same" ? c.change : "", dataset: { case: c.case, change: c.change || "" } },
          h("td", { "data-label": "case" }, h("code", {}, c.case)),
          h("td", { "data-label": "change" }, c.change && c.change !== "same" ? h("span", { class: `badge change-${c.change}` }, CHANGE[c.change] || c.change) : "same"),
          h("td", { "data-label": `version ${r.version}`, class: "evals-side" }, side(c)),
          h("td", { "data-label": `version ${r.against}`, class: "evals-side" }, c.against ? side(c.against) : "—"),
        ),
      ),
    ),
  );
}

/** Each case on the one version. */
function caseTable(r) {
  return h(
    "table",
    { class: "evals-cases-run" },
    h("thead", {}, h("tr", {}, h("th", {}, "case"), h("th", {}, `version ${r.version}`))),
    h(
      "tbody",
      {},
      r.cases.map((c) =>
        h(
          "tr",
          { dataset: { case: c.case, pass: String(c.pass) } },
          h("td", { "data-label": "case" }, h("code", {}, c.case)),
          h("td", { "data-label": `version ${r.version}`, class: "evals-side" }, side(c)),
        ),
      ),
    ),
  );
}

/** One case on one version: pass and score, answer, tool calls, cost, what failed. */
function side(run) {
  const failed = (run.grades || []).filter((g) => !g.pass);
  const cost = (run.cost_usd || 0) + (run.judge_cost_usd || 0);
  return h(
    "div",
    { class: "evals-case-run" },
    h("p", {}, h("span", { class: `badge ${run.pass ? "state-succeeded" : "state-failed"}` }, run.pass ? "pass" : "fail"), ` score ${(run.score || 0).toFixed(2)} · $${cost.toFixed(4)}`),
    run.answer !== null && run.answer !== undefined ? h("pre", { class: "evals-answer" }, run.answer) : null,
    run.error ? h("p", { class: "evals-error" }, run.error) : null,
    h("p", { class: "evals-tools" }, run.tool_calls && run.tool_calls.length ? ["tools: ", run.tool_calls.map((t, i) => [i ? ", " : "", h("code", {}, t)])] : h("span", { class: "muted" }, "no tool call")),
    failed.length ? h("ul", { class: "plain evals-failed" }, failed.map((g) => h("li", {}, h("code", {}, g.grader), `: ${g.reason || "failed"}`))) : null,
    run.job_id ? h("p", {}, link(`/ui/jobs/${encodeURIComponent(run.job_id)}`, "Its job")) : null,
  );
}
