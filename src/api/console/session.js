// Who this tab is signed in as: the key the daemon sees (`GET /v1/whoami`),
// its name and scopes for the header, and for every action whether the key
// may take it — the daemon's own answer from its authorization policy, so
// the page holds no copy of the scope rules. An action the key may not take
// is drawn disabled with the scope it needs beside it, never offered only
// to end in a 403.

import { h } from "./dom.js";
import { api, token } from "./api.js";

/** The daemon's answer for the token it was read with, or null. */
let me = null;
let readWith;

/**
 * Reads the key once per token. A 401 rejects (the app asks for a token);
 * any other failure leaves `me` null: every action is offered and the
 * daemon decides, as before the page knew its key.
 */
export async function ready() {
  if (readWith === token() && me) return me;
  try {
    me = await api("/v1/whoami");
    readWith = token();
  } catch (error) {
    me = null;
    if (error.status === 401) throw error;
  }
  return me;
}

/** Forgets the key (a new token, or a change of the keys). */
export function forget() {
  me = null;
  readWith = undefined;
}

export function current() {
  return me;
}

/** Whether the key may take `action` where only its scope counts: the daemon, a bundle, its own objects. */
export function may(action) {
  const grant = me?.actions?.[action];
  if (!grant || grant.own) return { ok: true };
  return { ok: false, needs: grant.own_needs };
}

/**
 * Whether the key may take `action` on an object of key `owner` (a job, a
 * schedule; null: of no key, such as a bundle's own schedule): the
 * daemon's answer for its own objects, or for other keys'.
 */
export function mayOn(action, owner) {
  const grant = me?.actions?.[action];
  if (!grant) return { ok: true };
  if (owner === me.name) return may(action);
  if (grant.others) return { ok: true };
  return { ok: false, needs: grant.others_needs, whose: owner || "no key" };
}

/** The reason of a refused verdict, as nodes: "needs the `approve` scope". */
export function reason(verdict, kind = "object") {
  const whose = verdict.whose ? `it is ${verdict.whose === "no key" ? "no key's own" : `key ${verdict.whose}'s`} ${kind}: ` : "";
  const names = verdict.needs.flatMap((scope, i) => [i ? " and " : "", h("code", {}, scope)]);
  return [whose, "needs the ", names, verdict.needs.length > 1 ? " scopes" : " scope"];
}

let reasons = 0;

/**
 * `button` as the key may press it: as it is, or disabled with the reason
 * beside it (and read with it by a screen reader).
 */
export function gate(button, verdict, kind) {
  if (verdict.ok) return button;
  const id = `why-not-${++reasons}`;
  button.disabled = true;
  button.setAttribute("aria-describedby", id);
  button.dataset.needs = verdict.needs.join(" ");
  return h("span", { class: "gated" }, button, h("span", { class: "why-not", id }, reason(verdict, kind)));
}

/**
 * Whether this key may decide on `call` (pending.js's shape) for the
 * reason scopes do not say: the daemon names the key that may not
 * (`not_by`: the submitter, when the tool wants four eyes), so the page
 * holds no copy of that rule either.
 */
export function mayDecideOn(call) {
  if (!me || !call.notBy || call.notBy !== me.name) return { ok: true };
  return { ok: false, why: `four eyes (approval.by: others): key ${me.name} submitted this job, so another key with the approve scope decides` };
}

/**
 * Every button in `nodes` as the key may press it: as they are, or
 * disabled with the reason (`verdict.why`) once beside them.
 */
export function gateAll(nodes, verdict) {
  if (verdict.ok) return nodes;
  const id = `why-not-${++reasons}`;
  const holder = h("div", { class: "gated-all" }, nodes, h("p", { class: "why-not", id }, `Deciding on it: ${verdict.why}.`));
  for (const button of holder.querySelectorAll("button")) {
    button.disabled = true;
    button.setAttribute("aria-describedby", id);
  }
  return holder;
}

/** A note in place of actions the key may not take: "Deciding: needs the `approve` scope." */
export function refusal(what, verdict, kind) {
  return h("p", { class: "why-not", dataset: { needs: verdict.needs.join(" ") } }, `${what}: `, reason(verdict, kind), ".");
}

/** "signed in as ops (admin)" — or, with no key configured, that every request is `local`. */
export function signedIn() {
  if (!me) return null;
  const scopes = me.scopes.join(", ");
  const open = me.open ? " · no keys configured" : "";
  const bundles = me.bundles ? ` · bundles ${me.bundles.join(", ")}` : "";
  return h("span", { class: "signed-in", id: "signed-in", dataset: { key: me.name } }, "signed in as ", h("b", {}, me.name), ` (${scopes})${bundles}${open}`);
}
