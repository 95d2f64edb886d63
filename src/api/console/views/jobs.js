// The jobs: counts by state, then one table — the jobs that wait for a
// person first, then the others in the order asked (newest or oldest
// first: the daemon sorts, not this page) — filtered by
// state, "ended in an error", bundle, conversation, the key that submitted
// them, a creation time range and a search of id, bundle and input (the
// API's filters, across conversations). The filters are the URL's query
// (`/ui/jobs?state=failed&q=refund`), so a filtered list can be linked; the
// list refreshes every two seconds while the tab is visible by asking only
// for the jobs changed since (jobfeed.js), keeping the focus where it was.
// Rows can be selected for bulk actions (bulk.js).

import { h, fill, link, stateBadge, banner, ago, duration, millis, compact, navigate, errorText } from "../dom.js";
import { api, query, every, serverNow } from "../api.js";
import { pendingCall, parkedText } from "./pending.js";
import { times, PARKED } from "./header.js";
import { jobFeed } from "./jobfeed.js";
import { bulkActions } from "./bulk.js";

const PAGE = 50;
const REFRESH_MS = 2000;

/**
 * The list's orders, as the API's `order` names them: those the store reads
 * by an index (not "last updated first": no index on it, ARCHITECTURE.md).
 */
const ORDER_LABELS = { created: "newest first", created_asc: "oldest first" };

/** The URL's query → the API's filters (a time as the daemon reads it, RFC 3339). */
function filtersOf(params) {
  const time = (text) => (text && !Number.isNaN(Date.parse(text)) ? new Date(text).toISOString() : "");
  return {
    state: params.get("state") || "",
    error: params.get("error") === "true" ? "true" : "",
    bundle: params.get("bundle") || "",
    conversation_id: params.get("conversation") || "",
    owner: params.get("owner") || "",
    created_from: time(params.get("from")),
    created_to: time(params.get("to")),
    q: params.get("q") || "",
  };
}

export function render(root, { query: params }, signal) {
  const filters = filtersOf(params);
  const local = { from: params.get("from") || "", to: params.get("to") || "" };
  const asked = params.get("order");
  let order = Object.hasOwn(ORDER_LABELS, asked ?? "") ? asked : "created";
  let shown = PAGE;
  const feed = jobFeed();
  const counts = h("div", { class: "counts", id: "counts" });
  const status = h("div", { class: "list-status" });
  const table = h("section", { id: "job-list" });
  const more = h("button", { type: "button", class: "secondary", id: "show-more", hidden: true, onclick: () => ((shown += PAGE), refresh()) }, "Show more");
  const bulk = bulkActions({ changed: () => refresh() });
  const url = () =>
    "/ui/jobs" +
    query({ state: filters.state, error: filters.error, bundle: filters.bundle, conversation: filters.conversation_id, owner: filters.owner, from: local.from, to: local.to, q: filters.q, order: order === "created" ? "" : order });
  /** Changes the list without redrawing the view (the URL follows). */
  const update = (change) => {
    Object.assign(filters, change);
    history.replaceState(null, "", url());
    refresh();
  };
  const controls = filterControls(filters, local, {
    apply: (change) => (Object.assign(filters, change), navigate(url(), { replace: true })),
    update,
    order: () => order,
    setOrder: (value) => ((order = value), update({})),
    setTime: (which, value) => {
      local[which] = value;
      update({ [which === "from" ? "created_from" : "created_to"]: value ? new Date(value).toISOString() : "" });
    },
  });
  fill(root, h("div", { class: "title-row" }, h("h1", {}, "Jobs"), link("/ui/submit", "New job")), counts, h("div", { class: "filters" }, controls.fields, status), table, h("div", { class: "bulk-dock" }, bulk.bar, bulk.outcome), more);
  loadBundles(controls.bundleSelect, filters.bundle, signal);

  async function refresh() {
    try {
      const [countAnswer, parkedJobs, page] = await Promise.all([
        api("/v1/jobs/counts", { signal }),
        filters.state || filters.error ? [] : loadParked(filters, signal),
        feed.read(filters, order, shown, signal),
      ]);
      drawCounts(counts, controls.stateSelect, countAnswer, filters);
      const parkedIds = new Set(parkedJobs.map((j) => j.id));
      const rest = page.jobs.filter((j) => !parkedIds.has(j.id));
      const focus = rememberFocus(root);
      drawTable(table, parkedJobs, rest, filters, bulk);
      focus();
      more.hidden = !page.more;
      fill(status, h("span", { class: "live-dot" }), `updated ${new Date().toLocaleTimeString()}`);
    } catch (error) {
      if (signal.aborted) return;
      fill(status, banner("error", "Cannot read the jobs: ", errorText(error)));
    }
  }
  every(REFRESH_MS, refresh, signal);
}

/** The filter fields, each labelled; `bundleSelect` and `stateSelect` are filled as the daemon answers. */
/**
 * A time of the URL (`?to=2026-05-01T00:00:00Z`, or what the field wrote)
 * as a `datetime-local` field shows it — this browser's local time to the
 * minute — so the field says which range is applied (it showed nothing for
 * a time with a zone).
 */
function inputTime(text) {
  const at = Date.parse(text);
  if (Number.isNaN(at)) return "";
  return new Date(at - new Date(at).getTimezoneOffset() * 60000).toISOString().slice(0, 16);
}

function filterControls(filters, local, { apply, update, order, setOrder, setTime }) {
  const bundleSelect = h("select", { name: "bundle", id: "filter-bundle", onchange: (e) => apply({ bundle: e.target.value }) }, h("option", { value: "" }, "all bundles"));
  const stateSelect = h(
    "select",
    { name: "state", id: "filter-state", onchange: (e) => apply(e.target.value === "error" ? { state: "", error: "true" } : { state: e.target.value, error: "" }) },
    h("option", { value: "" }, "all states"),
    h("option", { value: "error" }, "ended in an error (failed, dead)"),
  );
  const text = (id, name, placeholder, key) =>
    h("input", { type: "search", name, id, placeholder, value: filters[key], onchange: (e) => apply({ [key]: e.target.value.trim() }) });
  const time = (which, id) => h("input", { type: "datetime-local", name: which, id, value: inputTime(local[which]), onchange: (e) => setTime(which, e.target.value) });
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
    { name: "order", id: "sort-jobs", onchange: (e) => setOrder(e.target.value) },
    Object.entries(ORDER_LABELS).map(([value, label]) => h("option", { value }, label)),
  );
  sortSelect.value = order();
  const labelled = (id, label, control, shown = false) => [h("label", { for: id, class: shown ? "filter-label" : "visually-hidden" }, label), control];
  const fields = [
    labelled("filter-search", "Search", search),
    labelled("filter-state", "State", stateSelect),
    labelled("filter-bundle", "Bundle", bundleSelect),
    labelled("filter-conversation", "Conversation", text("filter-conversation", "conversation", "conversation id", "conversation_id")),
    labelled("filter-owner", "Submitted by key", text("filter-owner", "owner", "submitted by key", "owner")),
    h("span", { class: "time-range" }, labelled("filter-from", "created from", time("from", "filter-from"), true), labelled("filter-to", "to", time("to", "filter-to"), true)),
    labelled("sort-jobs", "Sort", sortSelect),
  ];
  return { fields, bundleSelect, stateSelect };
}

function loadBundles(bundleSelect, current, signal) {
  api("/v1/bundles", { signal })
    .then((answer) => {
      for (const b of answer.bundles) bundleSelect.append(h("option", { value: b.name }, b.name));
      if (current && !answer.bundles.some((b) => b.name === current)) {
        bundleSelect.append(h("option", { value: current }, current));
      }
      bundleSelect.value = current;
    })
    .catch(() => {});
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
    // The other filters stay; the state replaces the state (or the error filter).
    const params = new URLSearchParams(location.search);
    params.delete("error");
    if (state) params.set("state", state);
    else params.delete("state");
    const current = !filters.error && (filters.state || "") === state;
    return h(
      "a",
      { href: `/ui/jobs${params.size ? `?${params}` : ""}`, class: `chip${current ? " current" : ""}${PARKED.includes(state) && n > 0 ? " attention" : ""}`, dataset: { state: state || "all" } },
      state ? state.replaceAll("_", " ") : "all",
      h("b", {}, String(n)),
    );
  };
  fill(counts, chip("", total), states.map((s) => chip(s, scope[s] || 0)));
  if (stateSelect.options.length === 2) {
    for (const s of states) stateSelect.append(h("option", { value: s }, s.replaceAll("_", " ")));
    stateSelect.value = filters.error ? "error" : filters.state;
  }
}

/** Chips in the order a person scans them: what needs them, what runs, how jobs ended. */
const ORDER = [...PARKED, "queued", "running", "succeeded", "failed", "dead", "cancelled"];
function rank(state) {
  const i = ORDER.indexOf(state);
  return i < 0 ? ORDER.length : i;
}

const COLUMNS = [
  ["state", ""],
  ["job", ""],
  ["bundle", "wide"],
  ["input", "wide"],
  ["created", ""],
  ["took", "wide"],
];

/**
 * One table of the jobs shown: the parked ones first under their own
 * heading row (what each waits for in place of the input), then the rest.
 * Its columns line up across both; on a phone the wide ones are left out.
 */
function drawTable(section, parked, rest, filters, bulk) {
  const all = [...parked, ...rest];
  bulk.shown(all);
  if (!all.length) {
    const filtered = Object.values(filters).some(Boolean);
    fill(section, h("p", { class: "empty", id: "jobs" }, filtered ? "No job matches these filters." : "No jobs yet. ", filtered ? null : link("/ui/submit", "Submit one.")));
    return;
  }
  const span = COLUMNS.length + 1;
  const group = (id, title, jobs, detail) =>
    h(
      "tbody",
      { id },
      title ? h("tr", { class: "group" }, h("td", { colspan: span }, h("h2", { class: id === "parked" ? "attention-title" : "" }, title))) : null,
      jobs.map((job) => jobRow(job, detail, bulk, id === "parked")),
    );
  fill(
    section,
    h(
      "table",
      { class: "jobs" },
      h("caption", { class: "visually-hidden" }, "Jobs"),
      h(
        "thead",
        {},
        h("tr", {}, h("th", { scope: "col", class: "pick-cell" }, bulk.allBox(all)), COLUMNS.map(([name, wide]) => h("th", { scope: "col", class: wide }, name))),
      ),
      parked.length ? group("parked", `Waiting for a person (${parked.length})`, parked, parkedDetail) : null,
      group("jobs", parked.length && rest.length ? "The others" : null, rest, (job) => compact(job.input, 120)),
    ),
  );
}

/** What a parked job waits for. */
function parkedDetail(job) {
  const call = pendingCall(job);
  return call ? h("span", { class: "parked-call" }, parkedText(call)) : job.state === "awaiting_approval" ? "a tool call awaits approval" : compact(job.error || "", 120);
}

/** A job's row; a parked one says what it waits for also under its id, where a phone (without the wide columns) shows it. */
function jobRow(job, detail, bulk, parked) {
  return h(
    "tr",
    { dataset: { job: job.id, state: job.state } },
    h("td", { class: "pick-cell" }, bulk.box(job)),
    h("td", {}, stateBadge(job.state)),
    h("td", {}, link(`/ui/jobs/${encodeURIComponent(job.id)}`, h("code", {}, shortId(job.id))), parked ? h("div", { class: "narrow-only" }, detail(job)) : null),
    h("td", { class: "wide" }, h("span", {}, job.bundle, job.bundle_version ? h("span", { class: "muted" }, ` v${job.bundle_version}`) : null)),
    h("td", { class: "input wide" }, detail(job)),
    h("td", { title: job.created_at }, ago(job.created_at)),
    h("td", { class: "wide" }, took(job)),
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
  if (job.state === "queued" && at > serverNow()) return `scheduled in ${duration(at - serverNow())}`;
  if (Number.isNaN(t.run)) return Number.isNaN(t.wait) ? "" : `waiting ${duration(t.wait)}`;
  return duration(t.run) + (t.ticking ? " so far" : "");
}

/**
 * What has the focus under `root` (a job's link, by its job id, or a
 * field, with its selection), as a function that gives it back after a
 * redraw replaced the element.
 */
function rememberFocus(root) {
  const el = document.activeElement;
  if (!el || !root.contains(el)) return () => {};
  const row = el.closest("tr[data-job]");
  const section = el.closest("tbody[id]");
  const part = el.matches("input.pick") ? "input.pick" : "a";
  const selection = "selectionStart" in el && el.selectionStart !== null ? [el.selectionStart, el.selectionEnd] : null;
  return () => {
    if (document.activeElement === el && root.contains(el)) return;
    const again = row && section ? document.querySelector(`#${section.id} tr[data-job="${CSS.escape(row.dataset.job)}"] ${part}`) : el.id ? document.getElementById(el.id) : null;
    if (!again) return;
    again.focus({ preventScroll: true });
    if (selection && "setSelectionRange" in again) again.setSelectionRange(...selection);
  };
}
