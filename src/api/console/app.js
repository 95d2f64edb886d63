// The console's shell: a router from the URL to a view, links that change
// the view without reloading, and the token prompt when the daemon wants
// one. Each view is a module with `render(root, route)`, which draws into
// `root` and may return a function that stops what it started (streams,
// refresh timers) when the view is left. Before a view is drawn the page
// learns its key (session.js); a view whose action the key may not take
// says which scope it needs instead of failing with a 403. Each view names
// the tab (`document.title`), and the skip link before the header moves
// the keyboard's focus to the view, as does a link that changes the view.

import { h, fill, link, navigate } from "./dom.js";
import { token, setToken, whenUnauthorized } from "./api.js";
import * as session from "./session.js";
import * as jobs from "./views/jobs.js";
import * as job from "./views/job.js";
import * as submit from "./views/submit.js";
import * as bundles from "./views/bundles.js";
import * as tokenView from "./views/token.js";
import * as approvals from "./views/approvals.js";
import * as schedules from "./views/schedules.js";
import * as deliveries from "./views/deliveries.js";
import * as keys from "./views/keys.js";
import { shortId } from "./views/jobs.js";

/** URL patterns under /ui → view, the nav entry it lights up, the action it reads with, and the tab's title. */
const ROUTES = [
  { pattern: /^\/ui\/?$/, view: jobs, nav: "jobs", needs: "list_jobs", title: () => "Jobs" },
  { pattern: /^\/ui\/jobs\/?$/, view: jobs, nav: "jobs", needs: "list_jobs", title: () => "Jobs" },
  { pattern: /^\/ui\/jobs\/([^/]+)\/?$/, view: job, nav: "jobs", needs: "read_job", title: (id) => `Job ${shortId(id)}` },
  { pattern: /^\/ui\/approvals\/?$/, view: approvals, nav: "approvals", needs: "list_jobs", title: () => "Approvals" },
  { pattern: /^\/ui\/submit\/?$/, view: submit, nav: "submit", needs: "submit_job", title: () => "Submit a job" },
  { pattern: /^\/ui\/bundles\/?$/, view: bundles, nav: "bundles", needs: "read_bundle", title: () => "Bundles" },
  { pattern: /^\/ui\/schedules\/?$/, view: schedules, nav: "schedules", needs: "read_schedule", title: () => "Schedules" },
  { pattern: /^\/ui\/deliveries\/?$/, view: deliveries, nav: "deliveries", needs: "read_deliveries", title: () => "Deliveries" },
  { pattern: /^\/ui\/keys\/?$/, view: keys, nav: "keys", needs: "manage_keys", title: () => "API keys" },
];

/** Names the tab after what it shows: "Schedules · structured-agents". */
function title(what) {
  document.title = `${what} · structured-agents`;
}

let stopView = null;
let asking = false;
/** Counts the routings, so a slower one never draws over a newer one. */
let routing = 0;

/**
 * Draws the view the URL names; `focusView`: the view takes the focus once
 * drawn (a link or Back moved to it: without a page load the focus would
 * stay on a link that is gone, and a reader would not learn the view
 * changed). The first draw leaves the focus at the page's start.
 */
async function route({ focusView = false } = {}) {
  const turn = ++routing;
  const view = document.getElementById("view");
  if (stopView) stopView();
  stopView = null;
  try {
    await session.ready();
  } catch {
    drawAuth(); // a 401: nobody is signed in, and the token prompt is drawn
    return;
  }
  if (turn !== routing) return;
  const path = location.pathname;
  const match = ROUTES.map((r) => ({ r, m: r.pattern.exec(path) })).find((x) => x.m);
  for (const a of document.querySelectorAll("[data-nav]")) {
    a.classList.toggle("current", match?.r.nav === a.dataset.nav);
  }
  drawAuth();
  if (!match) {
    title("Not found");
    // The link on a line of its own: inside the sentence only its colour would tell it apart.
    fill(view, h("h1", {}, "Not found"), h("p", {}, "No console view at ", h("code", {}, path), "."), h("p", {}, link("/ui/jobs", "See the jobs")));
    return;
  }
  const allowed = session.may(match.r.needs);
  if (!allowed.ok) {
    title("Not for this key");
    fill(view, h("h1", {}, "Not for this key"), session.refusal("This view", allowed));
    return;
  }
  drawView(view, match);
  if (focusView) view.focus();
}

function drawView(view, match) {
  const params = { path: match.m.slice(1).map(decodeURIComponent), query: new URLSearchParams(location.search) };
  title(match.r.title(...params.path));
  fill(view);
  const controller = new AbortController();
  const stop = match.r.view.render(view, params, controller.signal);
  stopView = () => {
    controller.abort();
    if (typeof stop === "function") stop();
  };
}

/** Who is signed in, and the button that forgets the token. */
function drawAuth() {
  const place = document.getElementById("auth");
  const forget = h(
    "button",
    {
      type: "button",
      class: "link",
      title: "Forget the token this tab keeps",
      onclick: () => {
        setToken(null);
        session.forget();
        route();
      },
    },
    "Forget token",
  );
  // A view the key may not use is not offered (its URL says why).
  for (const a of document.querySelectorAll("[data-nav-needs]")) a.hidden = !session.may(a.dataset.navNeeds).ok;
  fill(place, session.signedIn(), token() ? forget : null);
}

/** The daemon wants a token: ask, then draw the view again. */
function askForToken(failure) {
  if (asking) return;
  asking = true;
  if (stopView) stopView();
  stopView = null;
  const view = document.getElementById("view");
  title("Sign in");
  fill(view);
  tokenView.render(view, {
    rejected: Boolean(token()),
    message: failure.message,
    done: (value) => {
      asking = false;
      setToken(value);
      session.forget();
      route();
    },
  });
}

document.addEventListener("click", (event) => {
  const a = event.target.closest("a");
  if (!a || event.defaultPrevented || event.button !== 0) return;
  if (a.classList.contains("skip-link")) return skipToContent(event);
  if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey || a.target) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || !url.pathname.startsWith("/ui") || url.pathname.startsWith("/ui/assets/")) return;
  event.preventDefault();
  navigate(url.pathname + url.search);
});

/**
 * The skip link: the focus moves to the view itself (it takes the focus
 * but is no Tab stop), so the next Tab is the view's first control, and
 * the URL keeps no `#view`.
 */
function skipToContent(event) {
  event.preventDefault();
  document.getElementById("view").focus();
}

// Back and Forward carry no state of ours: they move, so the view takes
// the focus; `navigate` says whether it moved.
window.addEventListener("popstate", (event) => route({ focusView: event.state?.focusView ?? true }));
whenUnauthorized(askForToken);
route();
