// The API keys (`/ui/keys`, `admin` only): every key of the keys file with
// its scopes, bundles and limits, never a token; a form that makes a key
// (`POST /v1/keys`, as `structured-agents keys new` does) and shows its
// token once; and a revoke per key (`DELETE /v1/keys/{name}`). The daemon
// reloads with each change, so it applies at once.

import { h, fill, banner, confirmAction, errorText, count, ago } from "../dom.js";
import { api } from "../api.js";
import { current } from "../session.js";

export function render(root, _params, signal) {
  const outcome = h("div", { id: "keys-outcome", "aria-live": "polite" });
  const status = h("p", { class: "muted list-status", id: "keys-status" });
  const body = h("tbody", {});
  const table = h(
    "table",
    { id: "keys" },
    h("thead", {}, h("tr", {}, ...["Key", "Scopes", "Bundles", "Limits", "Made", ""].map((t) => h("th", { scope: "col" }, t)))),
    body,
  );
  const form = h("div", { id: "new-key-place" });
  fill(root, h("h1", {}, "API keys"), h("p", { class: "muted" }, "Who may call this daemon. A token is shown once, when its key is made; the daemon keeps only its SHA-256."), outcome, status, table, form);

  async function load() {
    try {
      const list = await api("/v1/keys", { signal });
      fill(status, `${count(list.keys.length, "key")} in `, h("code", {}, list.file));
      fill(body, ...list.keys.map((k) => row(k, revoke)));
      if (!form.firstChild) fill(form, newKeyForm(list.scopes, create));
    } catch (error) {
      if (!signal.aborted) fill(status, banner("error", "Cannot read the keys: ", errorText(error)));
    }
  }

  async function create(key) {
    const limits = describeLimits(key);
    const body = h("div", {}, `A key named ${key.name} with ${key.scopes.join(", ")}${key.bundles ? ` on bundles ${key.bundles.join(", ")}` : " on every bundle"}${limits.length ? `; ${limits.join(" · ")}` : ""}${key.webhook ? `; webhook ${key.webhook}` : ""}. The daemon reloads to take it.`);
    if (!(await confirmAction({ title: "Make the key", body, confirm: "Make the key" }))) return false;
    try {
      const made = await api("/v1/keys", { method: "POST", body: key });
      fill(outcome, tokenShown(made));
      await load();
      return true;
    } catch (error) {
      fill(outcome, banner("error", "The daemon refused the key: ", errorText(error)));
      return false;
    }
  }

  async function revoke(key) {
    const mine = current()?.name === key.name;
    const warning = mine ? " It is the key this tab signs in with: the console will ask for another token." : "";
    const body = `Requests with the token of ${key.name} are refused from now on; its open event streams end.${warning}`;
    if (!(await confirmAction({ title: `Revoke ${key.name}`, body, confirm: "Revoke", danger: true }))) return;
    try {
      await api(`/v1/keys/${encodeURIComponent(key.name)}`, { method: "DELETE" });
      fill(outcome, banner("ok", `Revoked ${key.name}: its token is refused.`));
      await load();
    } catch (error) {
      fill(outcome, banner("error", `Cannot revoke ${key.name}: `, errorText(error)));
    }
  }

  load();
}

/** A key's limits and share, as its row and the confirmation say them. */
function describeLimits(key) {
  return [
    key.rate_per_minute ? `${key.rate_per_minute}/min` : null,
    key.max_in_flight ? `≤ ${key.max_in_flight} in flight` : null,
    key.max_priority !== null && key.max_priority !== undefined ? `priority ≤ ${key.max_priority}` : null,
    key.weight ? `weight ${key.weight}` : null,
    key.per_day?.tokens ? `${key.per_day.tokens} tokens/day` : null,
    key.per_day?.cost ? `$${key.per_day.cost}/day` : null,
  ].filter(Boolean);
}

/** One key as a row, with its revoke button. */
function row(key, revoke) {
  const limits = describeLimits(key);
  return h(
    "tr",
    { dataset: { key: key.name } },
    h("td", { "data-label": "key" }, h("b", {}, key.name)),
    h("td", { "data-label": "scopes" }, key.scopes.join(", ")),
    h("td", { "data-label": "bundles" }, key.bundles ? key.bundles.join(", ") : "every bundle"),
    h("td", { "data-label": "limits" }, limits.join(" · ") || "none", key.webhook ? h("div", { class: "muted" }, "webhook ", h("code", {}, key.webhook)) : null),
    h("td", { "data-label": "made", title: key.created_at || "" }, key.created_at ? ago(key.created_at) : "—"),
    h("td", {}, h("button", { type: "button", class: "danger revoke", onclick: () => revoke(key) }, "Revoke")),
  );
}

/** The new key's token, once: the page never shows it again. */
function tokenShown(made) {
  return banner(
    "ok",
    h("p", {}, `Made key ${made.key.name}. Its token, shown only now — give it to whoever uses the key:`),
    h("pre", { id: "new-token", class: "token" }, made.token),
  );
}

/** The form that makes a key: its name, scopes, bundle globs, limits, share and webhook — what `keys new` takes. */
function newKeyForm(scopes, create) {
  const name = h("input", { type: "text", id: "key-name", name: "name", required: true, autocomplete: "off", pattern: "[A-Za-z0-9_.\\-]{1,64}" });
  const boxes = scopes.map((s) => h("input", { type: "checkbox", id: `key-scope-${s}`, name: "scopes", value: s }));
  const bundles = h("input", { type: "text", id: "key-bundles", name: "bundles", placeholder: "every bundle; or globs: refunds, support-*" });
  const number = (id, name, attrs = {}) => h("input", { type: "number", id, name, min: 1, ...attrs });
  const limits = {
    rate_per_minute: [number("key-rate", "rate_per_minute"), "Submissions a minute (empty: no limit)"],
    max_in_flight: [number("key-in-flight", "max_in_flight"), "Jobs unfinished at once (empty: no limit)"],
    max_priority: [number("key-max-priority", "max_priority", { min: null, step: 1 }), "Highest priority its jobs may ask for (empty: any)"],
    weight: [number("key-weight", "weight", { max: 1000 }), "Its share of the workers while other keys' jobs wait too, 1 to 1000 (empty: 1)"],
  };
  const dayTokens = number("key-day-tokens", "per_day_tokens");
  const dayCost = number("key-day-cost", "per_day_cost", { min: 0, step: "any" });
  const webhook = h("input", { type: "url", id: "key-webhook", name: "webhook", placeholder: "https://ops.example/hooks/jobs", spellcheck: "false" });
  const labelled = ([control, label]) => [h("label", { for: control.id }, label), control];
  const form = h(
    "form",
    { class: "card narrow", id: "new-key", onsubmit: (e) => submit(e) },
    h("h2", {}, "Make a key"),
    h("label", { for: "key-name" }, "Name (in job owners, decisions and logs)"),
    name,
    h("fieldset", { class: "scopes" }, h("legend", {}, "Scopes"), boxes.map((box) => h("label", { class: "inline", for: box.id }, box, ` ${box.value}`))),
    h("label", { for: "key-bundles" }, "Bundles it may use"),
    bundles,
    Object.values(limits).map(labelled),
    h(
      "fieldset",
      { class: "per-day" },
      h("legend", {}, "Spend of its jobs in the last 24 hours (empty: no limit)"),
      labelled([dayTokens, "Tokens"]),
      labelled([dayCost, "Cost"]),
    ),
    labelled([webhook, "Webhook: where its jobs' state changes are POSTed, unless a job names its own (empty: none)"]),
    h("div", { class: "buttons" }, h("button", { type: "submit", class: "primary", id: "make-key" }, "Make the key")),
  );

  async function submit(event) {
    event.preventDefault();
    const key = { name: name.value.trim(), scopes: boxes.filter((b) => b.checked).map((b) => b.value) };
    const globs = bundles.value.split(",").map((g) => g.trim()).filter(Boolean);
    if (globs.length) key.bundles = globs;
    for (const [field, [control]] of Object.entries(limits)) if (control.value) key[field] = Number(control.value);
    const perDay = {};
    if (dayTokens.value) perDay.tokens = Number(dayTokens.value);
    if (dayCost.value) perDay.cost = Number(dayCost.value);
    if (Object.keys(perDay).length) key.per_day = perDay;
    if (webhook.value.trim()) key.webhook = webhook.value.trim();
    if (await create(key)) form.reset();
  }
  return form;
}
