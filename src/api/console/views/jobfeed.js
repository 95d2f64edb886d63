// The jobs list's rows, kept live by asking only for what changed: the
// first read (and one after the filters, the order or the page size
// change) is a page of `GET /v1/jobs`; each refresh after it asks for the
// jobs updated since that read (`order=updated&updated_since=`, the page's
// `changes_since`) and merges them by id, so an unchanged list costs an
// empty answer, not every row again (docs/api.md, Listing jobs).
//
// The state and error filters are left out of the question for changes: a
// job that changed so that it no longer matches them must leave the list,
// and the answer holds it only without them. The filters that cannot
// change over a job's life (bundle, conversation, owner, creation time,
// text) stay in it.

import { api, query } from "../api.js";
import { ERRORED } from "./header.js";

/** Changes in one answer at most; more, and the list is read afresh. */
const CHANGES = 1000;

/** How a page runs, as the API's `order`: how two jobs compare (negative: `a` first). */
const ORDERS = {
  created: (a, b) => cmp(b.id, a.id),
  created_asc: (a, b) => cmp(a.id, b.id),
  updated: (a, b) => Date.parse(b.updated_at) - Date.parse(a.updated_at) || cmp(b.id, a.id),
};

function cmp(a, b) {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Whether `job` still matches the filters a job can leave by changing. */
function matches(job, filters) {
  if (filters.state && job.state !== filters.state) return false;
  return !filters.error || ERRORED.includes(job.state);
}

/**
 * A live page of jobs. `read(filters, order, limit, signal)` resolves to
 * `{ jobs, more }`: the rows in order, and whether a next page follows.
 */
export function jobFeed() {
  let asked = null;
  let rows = [];
  let more = false;
  let since = null;

  async function full(filters, order, limit, signal) {
    const page = await api("/v1/jobs" + query({ ...filters, order, limit }), { signal });
    rows = page.jobs;
    more = page.next_cursor !== null;
    since = page.changes_since;
  }

  /** Merges the jobs changed since the last read; false when there were too many to merge. */
  async function changes(filters, order, signal) {
    const { state, error, ...lasting } = filters;
    const page = await api("/v1/jobs" + query({ ...lasting, order: "updated", updated_since: since, limit: CHANGES }), { signal });
    if (page.next_cursor !== null) return false;
    since = page.changes_since;
    if (!page.jobs.length) return true;
    const compare = ORDERS[order];
    const last = rows[rows.length - 1];
    const byId = new Map(rows.map((job) => [job.id, job]));
    for (const job of page.jobs) {
      // A job the shown page does not reach stays for a later page.
      const reached = byId.has(job.id) || !more || !last || compare(job, last) <= 0;
      if (matches(job, filters) && reached) byId.set(job.id, job);
      else byId.delete(job.id);
    }
    rows = [...byId.values()].sort(compare);
    return true;
  }

  return {
    async read(filters, order, limit, signal) {
      const question = JSON.stringify([filters, order, limit]);
      const merged = question === asked && since !== null && (await changes(filters, order, signal));
      // Jobs that left the page leave room for the next page's first ones.
      if (!merged || (more && rows.length < limit)) {
        await full(filters, order, limit, signal);
        asked = question;
      }
      return { jobs: rows, more };
    },
  };
}
