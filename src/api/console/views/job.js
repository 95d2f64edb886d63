// One job (`/ui/jobs/{id}`): what it is, what a person can do to it, its
// answer or error, and how it got there — the timeline of its event stream
// (followed live, the model's tokens as they stream), a waterfall of where
// the time went, its journal and, for workflows, its artifacts.

import { h, fill, link, stateBadge, banner, field, pretty, compact, ago, errorText } from "../dom.js";
import { api, follow, every } from "../api.js";
import * as timeline from "./timeline.js";
import * as waterfall from "./waterfall.js";
import { drawActions, drawApprovals } from "./actions.js";
import { took } from "./jobs.js";

const TERMINAL = ["succeeded", "failed", "cancelled", "dead"];
const POLL_MS = 3000;

export function render(root, { path: [id] }, signal) {
  const base = `/v1/jobs/${encodeURIComponent(id)}`;
  const model = { job: null, events: [], tokens: new Map(), effects: new Map(), artifacts: [], journal: null, journalResults: new Map(), open: new Set(), stream: "connecting" };
  const view = {
    head: h("div", { class: "title-row left" }),
    outcome: h("div", { id: "outcome" }),
    actions: h("div", { id: "actions" }),
    approvals: h("div", { id: "approvals-place" }),
    answer: h("section", { id: "answer" }),
    facts: h("section", { class: "card", id: "facts" }),
    timeline: h("section", { id: "timeline" }),
    waterfall: h("section", { id: "waterfall" }),
    journal: h("section", { id: "journal" }),
  };
  fill(
    root,
    h("p", { class: "crumbs" }, link("/ui/jobs", "← Jobs")),
    view.head,
    view.outcome,
    view.actions,
    view.approvals,
    view.answer,
    view.facts,
    h("h2", {}, "Timeline"),
    view.timeline,
    h("h2", {}, "Where the time went"),
    view.waterfall,
    h("h2", {}, "Journal"),
    view.journal,
  );

  let scheduled = false;
  const redraw = () => {
    if (scheduled) return;
    scheduled = true;
    requestAnimationFrame(() => {
      scheduled = false;
      drawProgress(view, model);
    });
  };

  // The approvals panel reads its own route: after a decision or an
  // approval event, it is read again even when the job's state is unchanged.
  const refreshApprovals = () => {
    if (model.job.state === "awaiting_approval" || hasApprovals(model.events)) {
      const changed = () => {
        loadJob().catch(() => {});
        refreshApprovals();
      };
      drawApprovals(view.approvals, model.job, { outcome: view.outcome, changed, signal });
    } else fill(view.approvals);
  };

  let shownState = null;
  const loadJob = async (fresh) => {
    const job = fresh && fresh.id ? fresh : await api(base, { signal });
    const key = `${job.state}|${job.cancel_requested}|${JSON.stringify(job.pending_call)}`;
    model.job = job;
    drawJob(view, model);
    if (key !== shownState) {
      const first = shownState === null;
      shownState = key;
      drawActions(view.actions, job, { outcome: view.outcome, changed: (j) => loadJob(j).catch(() => {}) });
      refreshApprovals();
      if (first || TERMINAL.includes(job.state) || job.state === "needs_attention") loadJournal(view, model, base, signal);
    }
    redraw();
  };

  loadJob()
    .then(() => {
      const job = model.job;
      api(`/v1/bundles/${encodeURIComponent(job.bundle)}`, { signal })
        .then((b) => {
          for (const t of b.tools || []) if (!model.effects.has(t.name)) model.effects.set(t.name, t.effect);
          redraw();
        })
        .catch(() => {});
      const ended = () => {
        loadJob().catch(() => {});
        loadJournal(view, model, base, signal);
      };
      const changed = (event) => {
        loadJob().catch(() => {});
        if (/approval/i.test(event.type)) refreshApprovals();
      };
      followEvents(base, model, { signal, redraw, ended, changed });
      every(
        POLL_MS,
        async () => {
          if (model.job && !TERMINAL.includes(model.job.state)) await loadJob().catch(() => {});
        },
        signal,
      );
    })
    .catch((error) => {
      if (signal.aborted) return;
      fill(root, h("p", { class: "crumbs" }, link("/ui/jobs", "← Jobs")), banner("error", `Cannot show job ${id}: `, errorText(error)));
    });
}

function hasApprovals(events) {
  return events.some((e) => /^(ApprovalRequested|approval_requested)$/.test(e.type));
}

function followEvents(path, model, { signal, redraw, ended, changed }) {
  follow(`${path}/events`, {
    signal,
    onStatus: (status) => {
      model.stream = status;
      redraw();
    },
    onEvent: (kind, data) => {
      if (kind === "event") {
        const event = JSON.parse(data);
        model.events.push(event);
        if (event.type === "JobState" || /approval/i.test(event.type)) changed(event);
      } else if (kind === "token") {
        const token = JSON.parse(data);
        const key = `${token.run_id}|${token.turn}`;
        model.tokens.set(key, (model.tokens.get(key) || "") + token.text);
      } else if (kind === "end") {
        ended();
      }
      redraw();
    },
  }).catch((error) => {
    model.stream = `stream refused: ${errorText(error)}`;
    redraw();
  });
}

async function loadJournal(view, model, base, signal) {
  try {
    const journal = await api(`${base}/journal`, { signal });
    model.journal = journal.steps;
    for (const step of journal.steps) {
      const body = step.body || {};
      if (step.step.startsWith("start") && body.tool_name && body.effect) model.effects.set(body.tool_name, body.effect);
      if (step.step.startsWith("result") && body.result) model.journalResults.set(`${step.scope}|${step.turn}|${body.result.call_id}`, body.result);
    }
    if (model.events.some((e) => e.type === "WorkflowStart")) {
      model.artifacts = (await api(`${base}/artifacts`, { signal })).artifacts;
    }
    drawJournal(view.journal, model);
    drawProgress(view, model);
  } catch (error) {
    if (!signal.aborted) fill(view.journal, banner("error", "Cannot read the journal: ", errorText(error)));
  }
}

function drawJob(view, { job, stream }) {
  fill(view.head, h("h1", {}, "Job ", h("code", { class: "job-id" }, job.id)), stateBadge(job.state), h("span", { class: "muted stream", id: "stream-status" }, streamText(stream)));
  fill(
    view.answer,
    job.state === "succeeded" ? h("div", { class: "card answer" }, h("h2", {}, "Answer"), answerOf(job.result || {})) : null,
    job.error && job.state !== "needs_attention" ? h("div", { class: "card failure" }, h("h2", {}, job.state === "failed" || job.state === "dead" ? "Error" : "Last error"), h("pre", {}, job.error)) : null,
  );
  const ran = took(job);
  fill(
    view.facts,
    h(
      "dl",
      { class: "facts" },
      field("bundle", link(`/ui/jobs?bundle=${encodeURIComponent(job.bundle)}`, job.bundle), job.bundle_version ? ` v${job.bundle_version}` : ""),
      job.bundle_digest ? field("digest", h("code", {}, job.bundle_digest)) : null,
      field("attempts", `${job.attempts} of ${job.max_attempts}`, job.crash_resumes ? ` · ${job.crash_resumes} resumed after a crash` : ""),
      job.conversation_id ? field("conversation", link(`/ui/jobs?conversation=${encodeURIComponent(job.conversation_id)}`, job.conversation_id)) : null,
      field("created", h("span", { title: job.created_at }, ago(job.created_at))),
      ran ? field("took", ran) : null,
      field("input", h("div", { class: "input-text" }, job.input)),
      Object.keys(job.variables || {}).length ? field("variables", h("pre", {}, pretty(job.variables))) : null,
    ),
  );
}

function drawProgress(view, model) {
  if (!model.job) return;
  const status = document.getElementById("stream-status");
  if (status) status.textContent = streamText(model.stream);
  const root = timeline.build(model.events);
  const ctx = {
    jobId: model.job.id,
    tokens: model.tokens,
    effects: model.effects,
    journalResults: model.journalResults,
    stageArtifacts: timeline.assignArtifacts(root, model.artifacts),
    open: model.open,
    groupChat: Boolean(model.job.variables?.group_chat),
  };
  fill(view.timeline, timeline.draw(root, ctx));
  fill(view.waterfall, waterfall.draw(root, TERMINAL.includes(model.job.state) || model.job.state === "needs_attention"));
}

/** A run's text answer as it is; a structured one (a workflow's outcome) summed up, in full when opened. */
function answerOf(result) {
  if (typeof result.output === "string") return h("div", { class: "reply final" }, result.output || "(empty)");
  const summary = result.outcome ? `Workflow ${result.workflow || ""} reached ${result.outcome} after ${result.steps} steps (iteration ${result.iteration})` : "A structured result";
  return h("details", { class: "fold" }, h("summary", {}, summary), h("pre", {}, pretty(result.output ?? result)));
}

function streamText(stream) {
  return { live: "● live", ended: "", connecting: "connecting…", reconnecting: "reconnecting…" }[stream] ?? stream;
}

function drawJournal(root, model) {
  if (!model.journal || !model.journal.length) {
    fill(root, h("p", { class: "muted" }, "Nothing journaled yet."));
    return;
  }
  fill(
    root,
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
            h("td", { "data-label": "what" }, h("details", { class: "fold" }, h("summary", {}, journalSummary(s)), h("pre", {}, pretty(s.body)))),
          ),
        ),
      ),
    ),
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
