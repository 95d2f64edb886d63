// A job's journal: each step recorded durably before the run acted on it,
// which a resumed attempt replays instead of calling again; and, for
// workflows, the artifacts its stages wrote. Each turn of the job's own run
// (its model reply) offers "Fork from here": a new job that replays the
// turns before it and runs live from it (to a key that may fork; another
// is told the scope it needs, once), and the prompt that turn sent the
// model (prompt.js).

import { h, fill, pretty, compact } from "../dom.js";
import { forkFromHere } from "./actions.js";
import { may, refusal } from "../session.js";
import { promptButton } from "./prompt.js";

export function drawJournal(root, model) {
  if (!model.journal || !model.journal.length) {
    fill(root, h("p", { class: "muted" }, "Nothing journaled yet."));
    return;
  }
  const outcome = h("div", { id: "fork-outcome" });
  const prompt = h("div", { id: "prompt-place" });
  const forking = may("fork_job");
  fill(
    root,
    outcome,
    forking.ok ? null : refusal("Forking from a turn", forking),
    h("p", { class: "muted" }, "Each step recorded durably before the run acted on it; a resumed attempt replays these instead of calling the model or the tool again."),
    h(
      "table",
      { class: "journal" },
      h("thead", {}, h("tr", {}, ["scope", "turn", "step", "what"].map((t) => h("th", {}, t)))),
      h(
        "tbody",
        {},
        model.journal.map((s) =>
          h(
            "tr",
            {},
            h("td", { "data-label": "scope" }, h("code", {}, s.scope || "job")),
            h("td", { "data-label": "turn" }, String(s.turn)),
            h("td", { "data-label": "step" }, h("code", {}, s.step)),
            h(
              "td",
              { "data-label": "what" },
              h("details", { class: "fold" }, h("summary", {}, journalSummary(s)), h("pre", { tabindex: "0" }, pretty(s.body))),
              s.scope === "" && s.step === "reply" && model.job
                ? h(
                    "div",
                    { class: "buttons" },
                    promptButton(model.job, s.turn, prompt),
                    forking.ok ? h("button", { type: "button", class: "fork-here", dataset: { turn: String(s.turn) }, onclick: () => forkFromHere(model.job, s.turn, outcome) }, "Fork from here") : null,
                  )
                : null,
            ),
          ),
        ),
      ),
    ),
    prompt,
    model.artifacts.length ? [h("h3", {}, "Artifacts"), model.artifacts.map((a) => h("details", { class: "fold", dataset: { artifact: a.name } }, h("summary", {}, a.name), h("pre", {}, pretty(a.body))))] : null,
  );
}

function journalSummary(step) {
  const b = step.body || {};
  if (b.tool_name) return `${b.tool_name} ${b.effect || ""}`;
  if (b.assistant) {
    const calls = (b.assistant.tool_calls || []).map((c) => c.function?.name || c.name).filter(Boolean);
    return calls.length ? `model called ${calls.join(", ")}` : compact(b.assistant.content || "reply", 100);
  }
  if (b.result) return compact(b.result.output ?? b.result, 100);
  return compact(b, 100);
}
