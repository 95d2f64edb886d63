// The operator's word on a version the release gate holds, under the
// candidate banner of the bundles page: Promote (serve it now, its eval
// overruled) and Reject (keep it held, the version before it serving), each
// after a confirmation, through `POST /v1/bundles/{name}/promote` and
// `…/reject` (scope `operate`; a key without it gets the reason instead of
// the buttons). A refusal shows the API's error beside them; a decision
// redraws the bundles, so the card says what serves now, and says so above.

import { h, fill, banner, confirmAction, errorText } from "../dom.js";
import { api } from "../api.js";
import { may, refusal } from "../session.js";

/** The buttons for bundle `b`'s candidate; `decided(note)` redraws the page with the note. */
export function releaseActions(b, decided) {
  const c = b.candidate;
  const verdict = may("release_bundle");
  if (!verdict.ok) return refusal("Promoting or rejecting it", verdict);
  const outcome = h("div", { class: "release-outcome", "aria-live": "polite" });
  const path = (word) => `/v1/bundles/${encodeURIComponent(b.name)}/${word}`;

  async function decide(word, button) {
    const promote = word === "promote";
    const ok = await confirmAction({
      title: `${promote ? "Promote" : "Reject"} ${b.name} version ${c.version}?`,
      body: promote
        ? `Version ${c.version} serves from now on, in place of version ${b.version}, whatever its eval says. New jobs run on it; running jobs keep their version.`
        : `Version ${c.version} stays held and is not evaluated again; version ${b.version} keeps serving until another version is dropped in.`,
      confirm: promote ? "Promote" : "Reject",
      danger: promote,
    });
    if (!ok) return;
    button.disabled = true;
    try {
      const answer = await api(path(word), { method: "POST", body: { version: c.version } });
      decided(banner("ok", `${b.name} version ${answer.version} ${answer.verdict}; serving version ${answer.serving ?? "none"}.`));
    } catch (error) {
      fill(outcome, banner("error", `The daemon refused to ${word} version ${c.version}: `, errorText(error)));
      button.disabled = false;
    }
  }

  const promote = h("button", { type: "button", class: "primary release-promote", onclick: (e) => decide("promote", e.currentTarget) }, "Promote");
  const reject = h("button", { type: "button", class: "danger release-reject", onclick: (e) => decide("reject", e.currentTarget) }, "Reject");
  return h("div", { class: "release-actions" }, h("div", { class: "buttons" }, promote, c.state === "rejected" ? null : reject), outcome);
}
