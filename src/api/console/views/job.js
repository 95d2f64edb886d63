// One job (`/ui/jobs/{id}`): the run header (outcome, why it ended, wait
// and run time, spend against the budget), what runs right now (live
// progress frames), what a person can do to it, its answer (a transcript
// for a group chat) or error, the workflow graph, each attempt's timeline,
// where the time went, and its journal.

import { h, fill, link, banner, field, pretty, errorText, ago, count } from "../dom.js";
import { api, follow, every, serverNow } from "../api.js";
import * as timeline from "./timeline.js";
import * as waterfall from "./waterfall.js";
import * as attempts from "./attempts.js";
import * as live from "./live.js";
import * as transcript from "./transcript.js";
import * as workflow from "./workflow.js";
import { drawHeader, tick, TERMINAL, JOB_POLL_MS } from "./header.js";
import { drawActions } from "./actions.js";
import { approvalCard } from "./approval.js";
import { pendingCall } from "./pending.js";
import { drawJournal } from "./journal.js";

const POLL_MS = JOB_POLL_MS;
const TICK_MS = 200;

export function render(root, { path: [id] }, signal) {
  const base = `/v1/jobs/${encodeURIComponent(id)}`;
  const model = { job: null, bundle: null, events: [], tokens: new Map(), effects: new Map(), artifacts: [], journal: null, journalResults: new Map(), open: new Set(), stream: "connecting", live: live.create(), bundles: new Map(), shownWhere: "null" };
  const view = {
    head: h("div", { class: "title-row left" }),
    header: h("div", { id: "header-place" }),
    now: h("div", { id: "in-progress" }),
    outcome: h("div", { id: "outcome" }),
    actions: h("div", { id: "actions" }),
    approvals: h("div", { id: "approvals-place" }),
    answer: h("section", { id: "answer" }),
    graph: h("section", { id: "workflow" }),
    facts: h("section", { class: "card", id: "facts" }),
    timeline: h("section", { id: "timeline" }),
    waterfall: h("section", { id: "waterfall" }),
    journal: h("section", { id: "journal" }),
  };
  fill(root, h("p", { class: "crumbs" }, link("/ui/jobs", "← Jobs")), view.head, view.header, view.now, view.outcome, view.actions, view.approvals, view.answer, view.graph, view.facts, h("h2", {}, "Attempts"), view.timeline, h("h2", {}, "Where the time went"), view.waterfall, h("h2", {}, "Journal"), view.journal);

  let scheduled = false;
  const redraw = () => {
    if (scheduled) return;
    scheduled = true;
    requestAnimationFrame(() => {
      scheduled = false;
      drawProgress(view, model);
    });
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
      // An outcome that said the job would stop at its next step is told
      // what happened once it has ended, not left saying it will.
      if (TERMINAL.includes(job.state) && view.outcome.dataset.pending === "cancel") {
        delete view.outcome.dataset.pending;
        fill(view.outcome, banner("ok", `The job stopped as asked: it is ${job.state}.`));
      }
      const changed = (j) => loadJob(j).catch(() => {});
      drawActions(view.actions, job, { outcome: view.outcome, changed });
      drawApproval(view, model, () => loadJob().catch(() => {}));
      if (first || TERMINAL.includes(job.state) || job.state === "needs_attention") loadJournal(view, model, base, signal);
    }
    redraw();
  };

  loadJob()
    .then(() => {
      api(`/v1/bundles/${encodeURIComponent(model.job.bundle)}`, { signal })
        .then((b) => {
          model.bundle = b;
          for (const t of b.tools || []) if (!model.effects.has(t.name)) model.effects.set(t.name, t.effect);
          drawJob(view, model);
          drawApproval(view, model, () => loadJob().catch(() => {}));
          redraw();
        })
        .catch(() => {});
      const ended = () => {
        loadJob().catch(() => {});
        loadJournal(view, model, base, signal);
      };
      const changed = () => loadJob().catch(() => {});
      followEvents(base, model, { signal, redraw, ended, changed });
      every(POLL_MS, async () => {
        if (model.job && !TERMINAL.includes(model.job.state)) await loadJob().catch(() => {});
      }, signal);
    })
    .catch((error) => {
      if (signal.aborted) return;
      fill(root, h("p", { class: "crumbs" }, link("/ui/jobs", "← Jobs")), banner("error", `Cannot show job ${id}: `, errorText(error)));
    });

  // The clocks of the header and of the calls in progress tick on their own.
  const clock = setInterval(() => {
    if (!model.job) return;
    tick(view.header, model.job);
    live.tick(view.now);
  }, TICK_MS);
  return () => clearInterval(clock);
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
        live.onStored(model.live, event, model.job.id);
        if (event.type === "JobState" || /approval/i.test(event.type)) changed(event);
      } else if (kind === "progress") {
        live.onProgress(model.live, JSON.parse(data));
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

/**
 * Where the call awaiting approval asks, for a call of a nested run (its
 * `scope`): the bundle whose rule it is and the path to it, once the
 * events of that run are in; null for the job's own run.
 */
function parkedWhere(model) {
  const call = pendingCall(model.job);
  if (model.job.state !== "awaiting_approval" || !call?.scope) return null;
  return timeline.parkedIn(model.events, model.job.id, call.scope);
}

/** The call awaiting approval, as a card to decide on (nothing for any other state). */
function drawApproval(view, model, changed) {
  view.approvalChanged = changed;
  const job = model.job;
  const call = pendingCall(job);
  if (job.state !== "awaiting_approval" || !call || call.kind !== "approval") {
    fill(view.approvals);
    return;
  }
  // A nested run's call asks by the rule of its own bundle, read once.
  const where = parkedWhere(model);
  model.shownWhere = JSON.stringify(where);
  if (where && !model.bundles.has(where.bundle)) {
    model.bundles.set(where.bundle, null);
    api(`/v1/bundles/${encodeURIComponent(where.bundle)}`)
      .then((b) => {
        model.bundles.set(where.bundle, b);
        drawApproval(view, model, changed);
      })
      .catch(() => {});
  }
  const bundle = where ? model.bundles.get(where.bundle) : model.bundle;
  // The rule the park recorded; an older park's, as the bundle says it now.
  const rule = call.rule || (bundle?.tools || []).find((t) => t.name === call.tool)?.approval || null;
  fill(view.approvals, h("section", { class: "card attention", id: "approvals" }, h("h2", {}, "Waiting for approval"), approvalCard(job, call, { rule, where, outcome: view.outcome, changed })));
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
    if (model.events.some((e) => e.type === "WorkflowStart")) model.artifacts = (await api(`${base}/artifacts`, { signal })).artifacts;
    drawJournal(view.journal, model);
    drawProgress(view, model);
  } catch (error) {
    if (!signal.aborted) fill(view.journal, banner("error", "Cannot read the journal: ", errorText(error)));
  }
}

function drawJob(view, model) {
  const { job, stream } = model;
  fill(view.head, h("h1", {}, "Job ", h("code", { class: "job-id" }, job.id)), h("span", { class: "muted stream", id: "stream-status" }, streamText(stream)));
  const own = model.events.filter((e) => e.run_id === job.id && e.type === "KernelEnd").pop();
  const turns = new Set(model.events.filter((e) => e.run_id === job.id && e.type === "ModelRequest").map((e) => e.turn)).size;
  // What the job's budget counts: every answered tool call and every model
  // call of all its runs (a call its cancel cut short is not one).
  const replies = model.events.filter((e) => e.type === "ModelResponse");
  const calls = {
    tools: model.events.filter((e) => e.type === "ToolResult" && e.error_type !== "interrupted").length,
    models: replies.length,
    // Each kind of token its own budget counts (`prompt_tokens`,
    // `completion_tokens`), from the replies' usage.
    prompt: replies.reduce((n, e) => n + (e.usage?.prompt_tokens || 0), 0),
    completion: replies.reduce((n, e) => n + (e.usage?.completion_tokens || 0), 0),
  };
  drawHeader(view.header, job, { bundle: model.bundle, kernelEnd: own, turns, calls });
  const failed = ["failed", "dead"].includes(job.state);
  const retrying = ["queued", "running"].includes(job.state);
  fill(
    view.answer,
    job.state === "succeeded" ? answerCard(job, model) : null,
    job.error && failed ? h("div", { class: "card failure" }, h("h2", {}, "Error"), h("pre", {}, job.error)) : null,
    // A cancel is what someone asked for, not a failure: no red Error card.
    job.state === "cancelled" ? h("div", { class: "card ended-card" }, h("h2", {}, "Cancelled"), h("p", {}, job.error || "The job was cancelled.")) : null,
    job.error && retrying ? h("div", { class: "card warn-card" }, h("h2", {}, "The last attempt's error"), h("pre", {}, job.error)) : null,
  );
  fill(
    view.facts,
    h(
      "dl",
      { class: "facts" },
      field("bundle", link(`/ui/jobs?bundle=${encodeURIComponent(job.bundle)}`, job.bundle), job.bundle_version ? ` v${job.bundle_version}` : ""),
      job.bundle_digest ? field("digest", h("code", {}, job.bundle_digest)) : null,
      job.conversation_id ? field("conversation", link(`/ui/jobs?conversation=${encodeURIComponent(job.conversation_id)}`, job.conversation_id)) : null,
      field("created", h("span", { title: job.created_at }, ago(job.created_at))),
      field("input", h("div", { class: "input-text" }, job.input)),
      Object.keys(job.variables || {}).length ? field("variables", h("details", { class: "fold" }, h("summary", {}, `${Object.keys(job.variables).length} variables`), h("pre", {}, pretty(job.variables)))) : null,
      job.kind?.type === "stage" ? field("stage", h("code", {}, job.kind.stage), " alone") : null,
      Object.keys(job.controls || {}).length ? field("controls", h("pre", {}, pretty(job.controls))) : null,
    ),
  );
}

/** The answer: a transcript with speakers for a group chat, the text of a run, or a workflow's outcome. */
function answerCard(job, model) {
  const result = job.result || {};
  const chat = job.kind?.type === "group_chat" || result.agent_responses || result.transcript;
  const said = chat ? transcript.lines(result, timeline.build(model.events)) : null;
  if (said) return h("div", { class: "card answer", id: "transcript" }, h("h2", {}, "Transcript"), transcript.draw(said));
  return h("div", { class: "card answer" }, h("h2", {}, "Answer"), answerOf(result));
}

function drawProgress(view, model) {
  if (!model.job) return;
  const job = model.job;
  // A nested park's place is known once its run's events are in.
  if (view.approvalChanged && JSON.stringify(parkedWhere(model)) !== model.shownWhere) drawApproval(view, model, view.approvalChanged);
  const status = document.getElementById("stream-status");
  if (status) status.textContent = streamText(model.stream);
  live.draw(view.now, model.live, job.id);
  const graph = workflow.graph(model.events);
  fill(view.graph, graph ? [h("h2", {}, "Workflow"), workflow.draw(graph)] : null);
  const finished = TERMINAL.includes(job.state);
  const parts = withAhead(attempts.partition(model.events, job.id), live.ahead(model.live, model.events, job.id), job);
  const last = parts.length - 1;
  const built = parts.map((a, i) => ({ ...a, tree: timeline.build(a.events), over: Boolean(a.end || a.crashed || (i === last && finished)) }));
  const decisions = timeline.decisions(model.events);
  const ctxOf = (a, i) => ({
    jobId: job.id,
    // The live tokens belong to the attempt running now: the last one, or
    // the first before any of its events was stored (its first reply
    // streams before the events of its turn are written).
    tokens: i === Math.max(last, 0) ? model.tokens : new Map(),
    effects: model.effects,
    journalResults: model.journalResults,
    stageArtifacts: timeline.assignArtifacts(a.tree, model.artifacts),
    decisions,
    open: model.open,
    groupChat: job.kind?.type === "group_chat",
    finished: a.over,
  });
  fill(
    view.timeline,
    built.length
      ? built.map((a, i) => h("section", { class: "attempt", dataset: { attempt: a.attempt } }, attempts.drawAttemptHead(a, built[i - 1], job.max_attempts), timeline.draw(a.tree, ctxOf(a, i))))
      : timeline.draw(null, ctxOf({ tree: null, over: finished }, 0)),
  );
  const now = finished ? Math.max(...model.events.map((e) => Date.parse(e.timestamp)), 0) : serverNow();
  fill(view.waterfall, waterfall.draw(waterfall.rows(job, built, [...model.live.waits.values()], now), finished, now));
}

/**
 * The attempts with the steps that live frames announced ahead of the store
 * added to the one running now (the last), so the timeline is never a step
 * behind: a finished call shows its result while the next turn runs.
 */
function withAhead(parts, ahead, job) {
  if (!ahead.length || TERMINAL.includes(job.state)) return parts;
  if (!parts.length) return [{ attempt: job.attempts || 1, events: ahead, start: ahead[0].timestamp, last: ahead[0].timestamp, end: null, crashed: false }];
  const running = parts[parts.length - 1];
  return [...parts.slice(0, -1), { ...running, events: [...running.events, ...ahead] }];
}

/** A run's text answer as it is; a structured one (a workflow's outcome) summed up, in full when opened. */
function answerOf(result) {
  if (typeof result.output === "string") return h("div", { class: "reply final" }, result.output || "(empty)");
  const summary = result.outcome ? `Workflow ${result.workflow || ""} reached ${result.outcome} after ${count(result.steps, "step")} (iteration ${result.iteration})` : "A structured result";
  return h("details", { class: "fold" }, h("summary", {}, summary), h("pre", {}, pretty(result.output ?? result)));
}

function streamText(stream) {
  return { live: "● live", ended: "", connecting: "connecting…", reconnecting: "reconnecting…" }[stream] ?? stream;
}
