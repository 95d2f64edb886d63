// The jobs: counts by state, the jobs that wait for a person first, then
// the newest jobs, filtered by state, bundle and conversation. The filters
// are the URL's query (`/ui/jobs?state=failed&bundle=arithmetic`), so a
// filtered list can be linked; the list refreshes itself every two seconds
// while the tab is visible.

import { h, fill, link, stateBadge, banner, ago, duration, millis, compact, navigate, errorText } from "../dom.js";
import { api, query, every } from "../api.js";

/** States in which a job waits for a person: listed first. */
export const PARKED = ["needs_attention", "awaiting_approval"];
const PAGE = 50;
const REFRESH_MS = 2000;

export function render(root, { query: params }, signal) {
  const filters = {
    state: params.get("state") || "",
    bundle: params.get("bundle") || "",
    conversation_id: params.get("conversation") || "",
  };
  let shown = PAGE;
  const counts = h("div", { class: "counts", id: "counts" });
  const status = h("div", { class: "list-status" });
  const parked = h("section", { id: "parked" });
  const list = h("section", { id: "jobs" });
  const more = h("button", { type: "button", class: "secondary", hidden: true, onclick: () => ((shown += PAGE), refresh()) }, "Show more");
  const bundleSelect = h("select", { name: "bundle", id: "filter-bundle", onchange: (e) => apply({ bundle: e.target.value }) }, h("option", { value: "" }, "all bundles"));
  const stateSelect = h("select", { name: "state", id: "filter-state", onchange: (e) => apply({ state: e.target.value }) }, h("option", { value: "" }, "all states"));
  const conversation = h("input", {
    type: "search",
    name: "conversation",
    id: "filter-conversation",
    placeholder: "conversation id",
    value: filters.conversation_id,
    onchange: (e) => apply({ conversation_id: e.target.value.trim() }),
  });

  fill(
    root,
    h("div", { class: "title-row" }, h("h1", {}, "Jobs"), link("/ui/submit", "New job")),
    counts,
    h("div", { class: "filters" }, stateSelect, bundleSelect, conversation, status),
    parked,
    list,
    more,
  );

  function apply(change) {
    Object.assign(filters, change);
    const url = "/ui/jobs" + query({ state: filters.state, bundle: filters.bundle, conversation: filters.conversation_id });
    navigate(url, { replace: true });
  }

  api("/v1/bundles", { signal })
    .then((answer) => {
      for (const b of answer.bundles) bundleSelect.append(h("option", { value: b.name }, b.name));
      if (filters.bundle && !answer.bundles.some((b) => b.name === filters.bundle)) {
        bundleSelect.append(h("option", { value: filters.bundle }, filters.bundle));
      }
      bundleSelect.value = filters.bundle;
    })
    .catch(() => {});

  async function refresh() {
    try {
      const [countAnswer, parkedJobs, page] = await Promise.all([
        api("/v1/jobs/counts", { signal }),
        filters.state ? [] : loadParked(filters, signal),
        api("/v1/jobs" + query({ ...filters, limit: shown }), { signal }),
      ]);
      drawCounts(counts, stateSelect, countAnswer, filters);
      drawParked(parked, parkedJobs);
      const parkedIds = new Set(parkedJobs.map((j) => j.id));
      drawList(list, page.jobs.filter((j) => !parkedIds.has(j.id)), filters, parkedJobs.length > 0);
      more.hidden = !page.next_cursor;
      fill(status, h("span", { class: "live-dot" }), `updated ${new Date().toLocaleTimeString()}`);
    } catch (error) {
      if (signal.aborted) return;
      fill(status, banner("error", "Cannot read the jobs: ", errorText(error)));
    }
  }
  every(REFRESH_MS, refresh, signal);
}

/** The parked jobs (every parked state this daemon has) matching the filters. */
async function loadParked(filters, signal) {
  const lists = await Promise.all(
    PARKED.map((state) =>
      api("/v1/jobs" + query({ ...filters, state, limit: 200 }), { signal })
        .then((a) => a.jobs)
        // A daemon without approvals does not know that state (422).
        .catch((error) => (error.status === 422 ? [] : Promise.reject(error))),
    ),
  );
  return lists.flat().sort((a, b) => (a.updated_at < b.updated_at ? 1 : -1));
}

function drawCounts(counts, stateSelect, answer, filters) {
  const scope = filters.bundle ? answer.bundles[filters.bundle] || {} : answer.states;
  const states = Object.keys(answer.states).sort((a, b) => rank(a) - rank(b));
  const total = states.reduce((sum, s) => sum + (scope[s] || 0), 0);
  const chip = (state, n) => {
    const url = "/ui/jobs" + query({ state, bundle: filters.bundle, conversation: filters.conversation_id });
    const current = (filters.state || "") === state;
    return h(
      "a",
      { href: url, class: `chip${current ? " current" : ""}${PARKED.includes(state) && n > 0 ? " attention" : ""}`, dataset: { state: state || "all" } },
      state ? state.replaceAll("_", " ") : "all",
      h("b", {}, String(n)),
    );
  };
  fill(counts, chip("", total), states.map((s) => chip(s, scope[s] || 0)));
  if (stateSelect.options.length === 1) {
    for (const s of states) stateSelect.append(h("option", { value: s }, s.replaceAll("_", " ")));
    stateSelect.value = filters.state;
  }
}

/** Chips in the order a person scans them: what needs them, what runs, how jobs ended. */
const ORDER = [...PARKED, "queued", "running", "succeeded", "failed", "dead", "cancelled"];
function rank(state) {
  const i = ORDER.indexOf(state);
  return i < 0 ? ORDER.length : i;
}

function drawParked(section, jobs) {
  if (!jobs.length) {
    fill(section);
    return;
  }
  fill(
    section,
    h("h2", { class: "attention-title" }, `Waiting for a person (${jobs.length})`),
    jobTable(jobs, (job) =>
      job.pending_call
        ? h("span", {}, "parked on ", h("code", {}, job.pending_call.tool_name), ` (${job.pending_call.effect})`)
        : job.state === "awaiting_approval"
          ? "a tool call awaits approval"
          : compact(job.error || "", 120),
    ),
  );
}

function drawList(section, jobs, filters, parkedShown) {
  if (!jobs.length && parkedShown) {
    fill(section);
    return;
  }
  if (!jobs.length) {
    const filtered = filters.state || filters.bundle || filters.conversation_id;
    fill(section, h("p", { class: "empty" }, filtered ? "No job matches these filters." : "No jobs yet. ", filtered ? null : link("/ui/submit", "Submit one.")));
    return;
  }
  fill(section, jobTable(jobs, (job) => compact(job.input, 120)));
}

/** A table of jobs; `detail` says what the last column shows for a job. */
function jobTable(jobs, detail) {
  return h(
    "table",
    { class: "jobs" },
    h("thead", {}, h("tr", {}, ["state", "job", "bundle", "input", "created", "took"].map((t) => h("th", {}, t)))),
    h(
      "tbody",
      {},
      jobs.map((job) =>
        h(
          "tr",
          { dataset: { job: job.id, state: job.state } },
          h("td", { "data-label": "state" }, stateBadge(job.state)),
          h("td", { "data-label": "job" }, link(`/ui/jobs/${encodeURIComponent(job.id)}`, h("code", {}, shortId(job.id)))),
          h("td", { "data-label": "bundle" }, job.bundle, job.bundle_version ? h("span", { class: "muted" }, ` v${job.bundle_version}`) : null),
          h("td", { "data-label": "input", class: "input" }, detail(job)),
          h("td", { "data-label": "created", title: job.created_at }, ago(job.created_at)),
          h("td", { "data-label": "took" }, took(job)),
        ),
      ),
    ),
  );
}

/** The last 8 characters of a UUIDv7 (its random part) identify it to a person. */
export function shortId(id) {
  return id.length > 12 ? "…" + id.slice(-8) : id;
}

/** How long the job ran: until it finished, until it parked, or so far. */
export function took(job) {
  const start = millis(job.started_at);
  if (Number.isNaN(start)) return "";
  const running = !job.finished_at && !PARKED.includes(job.state);
  const end = job.finished_at ? millis(job.finished_at) : running ? Date.now() : millis(job.updated_at);
  return duration(end - start) + (running ? " so far" : "");
}
