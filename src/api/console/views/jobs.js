// The jobs: counts by state, the jobs that wait for a person first, then
// the newest jobs, filtered by state, bundle, conversation and a search of
// id, bundle and input (the API's `q`), sorted as the person asks. The
// filters are the URL's query (`/ui/jobs?state=failed&q=refund`), so a
// filtered list can be linked; the list refreshes itself every two seconds
// while the tab is visible, keeping the focus where it was.

import { h, fill, link, stateBadge, banner, ago, duration, millis, compact, navigate, errorText } from "../dom.js";
import { api, query, every } from "../api.js";
import { pendingCall, parkedText } from "./pending.js";
import { times, PARKED } from "./header.js";

const PAGE = 50;
const REFRESH_MS = 2000;

export function render(root, { query: params }, signal) {
  const filters = {
    state: params.get("state") || "",
    bundle: params.get("bundle") || "",
    conversation_id: params.get("conversation") || "",
    q: params.get("q") || "",
  };
  let sort = params.get("sort") || "newest";
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

  let typing = null;
  const search = h("input", {
    type: "search",
    name: "q",
    id: "filter-search",
    placeholder: "search id, bundle, input",
    value: filters.q,
    // Typing filters in place (the view is not redrawn, so the field keeps its focus).
    oninput: (e) => {
      clearTimeout(typing);
      typing = setTimeout(() => update({ q: e.target.value.trim() }), 250);
    },
    // A cleared field (its ✕, or a script) may say so only by `change` or `search`.
    onchange: (e) => e.target.value.trim() !== filters.q && update({ q: e.target.value.trim() }),
    onsearch: (e) => e.target.value.trim() !== filters.q && update({ q: e.target.value.trim() }),
  });
  const sortSelect = h(
    "select",
    { name: "sort", id: "sort-jobs", onchange: (e) => ((sort = e.target.value), update({})) },
    Object.entries(SORTS).map(([value, s]) => h("option", { value }, s.label)),
  );
  sortSelect.value = SORTS[sort] ? sort : "newest";
  const labelled = (id, text, control) => [h("label", { for: id, class: "visually-hidden" }, text), control];
  fill(
    root,
    h("div", { class: "title-row" }, h("h1", {}, "Jobs"), link("/ui/submit", "New job")),
    counts,
    h(
      "div",
      { class: "filters" },
      labelled("filter-search", "Search", search),
      labelled("filter-state", "State", stateSelect),
      labelled("filter-bundle", "Bundle", bundleSelect),
      labelled("filter-conversation", "Conversation", conversation),
      labelled("sort-jobs", "Sort", sortSelect),
      status,
    ),
    parked,
    list,
    more,
  );

  function url() {
    return "/ui/jobs" + query({ state: filters.state, bundle: filters.bundle, conversation: filters.conversation_id, q: filters.q, sort: sort === "newest" ? "" : sort });
  }
  function apply(change) {
    Object.assign(filters, change);
    navigate(url(), { replace: true });
  }
  /** Changes the list without redrawing the view (the URL follows). */
  function update(change) {
    Object.assign(filters, change);
    history.replaceState(null, "", url());
    refresh();
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
      const focus = rememberFocus(root);
      drawParked(parked, parkedJobs);
      const parkedIds = new Set(parkedJobs.map((j) => j.id));
      drawList(list, SORTS[sort].order(page.jobs.filter((j) => !parkedIds.has(j.id))), filters, parkedJobs.length > 0);
      focus();
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
    const url = "/ui/jobs" + query({ state, bundle: filters.bundle, conversation: filters.conversation_id, q: filters.q });
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
    jobTable(jobs, (job) => {
      const call = pendingCall(job);
      return call ? h("span", { class: "parked-call" }, parkedText(call)) : job.state === "awaiting_approval" ? "a tool call awaits approval" : compact(job.error || "", 120);
    }),
  );
}

function drawList(section, jobs, filters, parkedShown) {
  if (!jobs.length && parkedShown) {
    fill(section);
    return;
  }
  if (!jobs.length) {
    const filtered = filters.state || filters.bundle || filters.conversation_id || filters.q;
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
          h("td", { "data-label": "bundle" }, h("span", {}, job.bundle, job.bundle_version ? h("span", { class: "muted" }, ` v${job.bundle_version}`) : null)),
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

/** How long the job ran (until it finished, until it parked, or so far), or how long it has waited to start. */
export function took(job) {
  const t = times(job);
  const at = millis(job.run_at);
  // A job scheduled ahead has not waited yet: it says when it starts.
  if (job.state === "queued" && at > Date.now()) return `scheduled in ${duration(at - Date.now())}`;
  if (Number.isNaN(t.run)) return Number.isNaN(t.wait) ? "" : `waiting ${duration(t.wait)}`;
  return duration(t.run) + (t.ticking ? " so far" : "");
}

/** Sort orders of the list (within the page the API gave, newest first). */
const SORTS = {
  newest: { label: "newest first", order: (jobs) => jobs },
  oldest: { label: "oldest first", order: (jobs) => [...jobs].reverse() },
  longest: { label: "longest run first", order: (jobs) => [...jobs].sort((a, b) => (times(b).run || 0) - (times(a).run || 0)) },
  state: { label: "by state", order: (jobs) => [...jobs].sort((a, b) => rank(a.state) - rank(b.state)) },
  bundle: { label: "by bundle", order: (jobs) => [...jobs].sort((a, b) => a.bundle.localeCompare(b.bundle)) },
};

/**
 * What has the focus under `root` (a job's link, by its job id, or a
 * field, with its selection), as a function that gives it back after a
 * redraw replaced the element.
 */
function rememberFocus(root) {
  const el = document.activeElement;
  if (!el || !root.contains(el)) return () => {};
  const row = el.closest("tr[data-job]");
  const section = el.closest("section[id]");
  const selection = "selectionStart" in el && el.selectionStart !== null ? [el.selectionStart, el.selectionEnd] : null;
  return () => {
    if (document.activeElement === el && root.contains(el)) return;
    const again = row && section ? section.querySelector(`tr[data-job="${CSS.escape(row.dataset.job)}"] a`) : el.id ? document.getElementById(el.id) : null;
    if (!again) return;
    again.focus({ preventScroll: true });
    if (selection && "setSelectionRange" in again) again.setSelectionRange(...selection);
  };
}
