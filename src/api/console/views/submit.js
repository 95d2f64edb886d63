// Submit a job (`/ui/submit`, `?bundle=NAME` preselects one): a loaded
// bundle, the input, variables as a JSON object, and optionally the
// conversation it continues. The daemon's answer — the new job, or the
// refusal naming its field — is shown with a link to the job.

import { h, fill, link, banner, confirmAction, pretty, errorText } from "../dom.js";
import { api } from "../api.js";

export function render(root, { query }, signal) {
  const bundle = h("select", { id: "submit-bundle", name: "bundle", required: true });
  const about = h("p", { class: "muted", id: "bundle-about" });
  const input = h("textarea", { id: "submit-input", name: "input", rows: 4, required: true, placeholder: "What the job is asked" });
  const variables = h("textarea", { id: "submit-variables", name: "variables", rows: 3, spellcheck: "false" }, "{}");
  const conversation = h("input", { type: "text", id: "submit-conversation", name: "conversation_id", placeholder: "optional: continue a conversation" });
  const outcome = h("div", { id: "submit-outcome" });
  const known = new Map();

  const form = h(
    "form",
    { class: "card narrow", id: "submit-form", onsubmit: (e) => submit(e) },
    h("label", { for: "submit-bundle" }, "Bundle"),
    bundle,
    about,
    h("label", { for: "submit-input" }, "Input"),
    input,
    h("label", { for: "submit-variables" }, "Variables (a JSON object)"),
    variables,
    h("label", { for: "submit-conversation" }, "Conversation"),
    conversation,
    h("div", { class: "buttons" }, h("button", { type: "submit", class: "primary", id: "submit-job" }, "Submit job")),
  );
  fill(root, h("h1", {}, "Submit a job"), outcome, form);

  const describe = () => {
    const b = known.get(bundle.value);
    fill(about, b ? [b.description || "", b.version ? ` (version ${b.version})` : ""] : "");
  };
  bundle.addEventListener("change", describe);
  api("/v1/bundles", { signal })
    .then((answer) => {
      const loaded = answer.bundles.filter((b) => b.status !== "invalid");
      if (!loaded.length) fill(outcome, banner("warn", "No bundle is loaded: ", link("/ui/bundles", "see the bundles"), "."));
      for (const b of loaded) {
        known.set(b.name, b);
        bundle.append(h("option", { value: b.name }, b.name));
      }
      if (known.has(query.get("bundle"))) bundle.value = query.get("bundle");
      describe();
    })
    .catch((error) => fill(outcome, banner("error", "Cannot read the bundles: ", errorText(error))));

  async function submit(event) {
    event.preventDefault();
    let vars;
    try {
      vars = JSON.parse(variables.value.trim() || "{}");
      if (typeof vars !== "object" || vars === null || Array.isArray(vars)) throw new Error("it must be an object, like {\"style\": \"short\"}");
    } catch (error) {
      fill(outcome, banner("error", `Variables are not a JSON object: ${error.message}`));
      return;
    }
    const body = { bundle: bundle.value, input: input.value, variables: vars };
    if (conversation.value.trim()) body.conversation_id = conversation.value.trim();
    const ok = await confirmAction({
      title: "Submit the job",
      body: h("div", {}, `Bundle ${body.bundle} runs with:`, h("pre", {}, pretty(body))),
      confirm: "Submit",
    });
    if (!ok) return;
    try {
      const job = await api("/v1/jobs", { method: "POST", body });
      fill(outcome, banner("ok", `Job queued: `, link(`/ui/jobs/${encodeURIComponent(job.id)}`, h("code", { id: "submitted-id" }, job.id)), " · ", link("/ui/jobs", "all jobs")));
    } catch (error) {
      fill(outcome, banner("error", "The daemon refused the job: ", errorText(error)));
    }
  }
}
