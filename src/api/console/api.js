// The daemon's API as the console speaks it: same-origin fetch, JSON bodies
// with `Content-Type: application/json` (the front door refuses anything
// else), and the bearer token, when one is needed, in `Authorization`, as
// every client sends it. The token lives in sessionStorage: it is gone when
// the tab closes.

const TOKEN_KEY = "structured-agents.token";

/** Called when the daemon answers 401; the app asks for a token. */
let onUnauthorized = () => {};

export function whenUnauthorized(callback) {
  onUnauthorized = callback;
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/**
 * The daemon's clock minus this browser's, from each answer's `Date`
 * header (to the second: its middle is taken). Times the daemon wrote
 * (`updated_at`, `lease_expires_at`, `run_at`) are compared with
 * `serverNow()`, never with a browser clock that may be minutes off.
 */
let clockOffset = 0;

/** Now on the daemon's clock, in ms since the epoch. */
export function serverNow() {
  return Date.now() + clockOffset;
}

/** An answer of the API that was not a success: status, code, message, field, body. */
export class ApiFailure extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    super(error.message || `the daemon answered ${status}`);
    this.status = status;
    this.code = error.code;
    this.field = error.field;
    this.body = body;
  }
}

function headers(extra) {
  const all = { Accept: "application/json", ...extra };
  const bearer = token();
  if (bearer) all.Authorization = `Bearer ${bearer}`;
  return all;
}

/**
 * Calls the API: `api("/v1/jobs")`, `api("/v1/jobs", {method: "POST", body})`.
 * Resolves to the parsed JSON; rejects with an ApiFailure (the body of a
 * refusal is on it, e.g. a rejected reload's report).
 */
export async function api(path, { method = "GET", body, signal } = {}) {
  const init = { method, signal, headers: headers(), credentials: "same-origin" };
  if (method !== "GET") {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body === undefined ? {} : body);
  }
  const response = await fetch(path, init);
  const said = Date.parse(response.headers.get("Date") || "");
  if (!Number.isNaN(said)) clockOffset = said + 500 - Date.now();
  const text = await response.text();
  let parsed = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = { error: { message: text.slice(0, 500) } };
  }
  if (!response.ok) {
    const failure = new ApiFailure(response.status, parsed);
    if (response.status === 401) onUnauthorized(failure);
    throw failure;
  }
  return parsed;
}

/** `{a: 1, b: undefined}` → "?a=1". */
export function query(params) {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") search.set(key, value);
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}

/**
 * Follows a job's event stream (Server-Sent Events read with fetch, since
 * EventSource cannot send the token). Calls `onEvent(kind, data, id)` for
 * each event; after a dropped connection it reconnects with `Last-Event-ID`,
 * so no stored event is missed or repeated. Stops at the `end` event or
 * when `signal` aborts. `onStatus` hears "live", "reconnecting" or "ended".
 */
export async function follow(path, { onEvent, onStatus = () => {}, signal }) {
  let lastId = null;
  while (!signal.aborted) {
    try {
      const extra = { Accept: "text/event-stream" };
      if (lastId !== null) extra["Last-Event-ID"] = String(lastId);
      const response = await fetch(path, { headers: headers(extra), signal, credentials: "same-origin" });
      if (!response.ok) {
        const body = await response.json().catch(() => null);
        const failure = new ApiFailure(response.status, body);
        if (response.status === 401) onUnauthorized(failure);
        throw failure;
      }
      onStatus("live");
      const ended = await readEvents(response.body, signal, (event) => {
        if (event.id !== undefined) lastId = event.id;
        onEvent(event.event || "message", event.data, event.id);
        return event.event === "end";
      });
      if (ended) {
        onStatus("ended");
        return;
      }
    } catch (error) {
      if (signal.aborted) return;
      if (error instanceof ApiFailure && error.status < 500) throw error;
    }
    onStatus("reconnecting");
    await sleep(1000, signal);
  }
}

/** Parses an SSE body; `handle` returns true to stop. Resolves to whether it stopped. */
async function readEvents(body, signal, handle) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let event = {};
  try {
    while (!signal.aborted) {
      const { value, done } = await reader.read();
      if (done) return false;
      buffer += value;
      let newline;
      while ((newline = buffer.search(/\r?\n/)) >= 0) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(buffer[newline] === "\r" ? newline + 2 : newline + 1);
        if (line === "") {
          if (event.data !== undefined && handle(event)) return true;
          event = {};
        } else if (!line.startsWith(":")) {
          const colon = line.indexOf(":");
          const name = colon < 0 ? line : line.slice(0, colon);
          const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (name === "data") event.data = event.data === undefined ? text : `${event.data}\n${text}`;
          else if (name === "event") event.event = text;
          else if (name === "id") event.id = Number(text);
        }
      }
    }
    return false;
  } finally {
    reader.cancel().catch(() => {});
  }
}

export function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

/**
 * Runs `task` now and every `ms` while the page is visible, until `signal`
 * aborts: the live lists' refresh.
 */
export function every(ms, task, signal) {
  let running = false;
  const tick = async () => {
    if (running || signal.aborted || document.visibilityState === "hidden") return;
    running = true;
    try {
      await task();
    } finally {
      running = false;
    }
  };
  tick();
  const timer = setInterval(tick, ms);
  const visible = () => tick();
  document.addEventListener("visibilitychange", visible);
  signal.addEventListener("abort", () => {
    clearInterval(timer);
    document.removeEventListener("visibilitychange", visible);
  });
}
