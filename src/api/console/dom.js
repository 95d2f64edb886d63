// Small DOM and formatting helpers shared by the views. Text always goes in
// as text nodes (never as HTML), so nothing a job or a model wrote can run.

/** An element: h("a", {href: "/ui"}, "text", child, [more children]). */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key === "value") el.value = value;
    else if (key === "checked") el.checked = value;
    else el.setAttribute(key, value === true ? "" : value);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
}

/** Replaces everything inside `el`. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** A link to a console view (handled by the router without reloading). */
export function link(href, ...children) {
  return h("a", { href }, ...children);
}

/** Goes to a console URL without reloading the page (the shell redraws on popstate). */
export function navigate(url, { replace = false } = {}) {
  if (replace) history.replaceState(null, "", url);
  else history.pushState(null, "", url);
  // A new place takes the focus to its view; a replaced URL (a filter
  // redrawing the list it is part of) leaves the focus where it is.
  window.dispatchEvent(new PopStateEvent("popstate", { state: { focusView: !replace } }));
}

/** JSON as people read it. */
export function pretty(value) {
  if (typeof value === "string") return value;
  return JSON.stringify(value, null, 2);
}

/** JSON on one line, cut to `max` characters. */
export function compact(value, max = 160) {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return text.length > max ? text.slice(0, max) + "…" : text;
}

/** 1 → "1 tool call", 2 → "2 tool calls": no count reads "1 tools". */
export function count(n, one, many = `${one}s`) {
  return `${n} ${n === 1 ? one : many}`;
}

/** 1234 → "1.23 s", 72000 → "1 min 12 s". */
export function duration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
  const minutes = Math.floor(ms / 60000);
  if (minutes < 60) return `${minutes} min ${Math.round((ms % 60000) / 1000)} s`;
  return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

/** An RFC 3339 time as milliseconds since the epoch (NaN when absent). */
export function millis(time) {
  return time ? Date.parse(time) : NaN;
}

/** "5 s ago", "3 min ago", or the date for older times. */
export function ago(time) {
  const then = millis(time);
  if (Number.isNaN(then)) return "";
  const seconds = Math.round((Date.now() - then) / 1000);
  if (seconds < 5) return "just now";
  if (seconds < 60) return `${seconds} s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return new Date(then).toLocaleString();
}

/** A job's state as a coloured badge. */
export function stateBadge(state) {
  return h("span", { class: `badge state-${state}`, dataset: { state } }, state.replaceAll("_", " "));
}

/** A status line: kind is "ok", "error", "info" or "warn". */
export function banner(kind, ...children) {
  return h("div", { class: `banner ${kind}`, role: kind === "error" ? "alert" : "status" }, ...children);
}

/** A labelled value of a key/value list. */
export function field(label, ...value) {
  return [h("dt", {}, label), h("dd", {}, ...value)];
}

/**
 * Asks before an action: a modal dialog with what will happen. Resolves to
 * true when the person confirms. Being modal it keeps the keyboard inside
 * (the page behind is inert); it opens on Cancel, the safe answer; Escape
 * cancels; and the focus goes back to what had it (or to the view, when
 * the action redrew that away).
 */
export function confirmAction({ title, body, confirm = "Confirm", danger = false }) {
  return new Promise((resolve) => {
    const dialog = h("dialog", { class: "confirm", "aria-label": title });
    const before = document.activeElement;
    const done = (answer) => {
      dialog.close();
      dialog.remove();
      returnFocus(before);
      resolve(answer);
    };
    fill(
      dialog,
      h("h2", {}, title),
      h("div", { class: "confirm-body" }, body),
      h(
        "div",
        { class: "buttons" },
        h("button", { type: "button", class: "secondary", "data-action": "cancel", autofocus: true, onclick: () => done(false) }, "Cancel"),
        h(
          "button",
          { type: "button", class: danger ? "danger" : "primary", "data-action": "confirm", onclick: () => done(true) },
          confirm,
        ),
      ),
    );
    dialog.addEventListener("cancel", () => done(false));
    document.body.append(dialog);
    dialog.showModal();
  });
}

/** Gives the focus back to `element`, or to the view when it is gone. */
export function returnFocus(element) {
  const target = element && element.isConnected && element !== document.body ? element : document.getElementById("view");
  target?.focus();
}

/** The message of an API failure or any other error, for people. */
export function errorText(error) {
  if (error && error.status) {
    const where = error.field ? ` (${error.field})` : "";
    return `${error.status} ${error.code || ""}${where}: ${error.message}`;
  }
  return String(error && error.message ? error.message : error);
}
