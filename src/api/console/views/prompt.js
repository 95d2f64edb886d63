// What one turn sent the model: the messages (the rendered input, then each
// earlier turn's reply and its calls' results) and the tools offered, as
// `GET /v1/jobs/{id}/turns/{turn}/prompt` rebuilds them from the journal
// and the bundle version the job is pinned to. Offered on each turn of the
// journal (journal.js); the prompt opens below the journal and takes the
// focus, so a keyboard user lands on it; a long message scrolls inside
// its box, which takes the focus so the keyboard can scroll it too.

import { h, fill, banner, errorText, pretty, count } from "../dom.js";
import { api } from "../api.js";

/** The "Prompt" button of turn `turn`, drawing into `place`. */
export function promptButton(job, turn, place) {
  return h("button", { type: "button", class: "prompt-view", dataset: { turn: String(turn) }, onclick: () => show(job, turn, place) }, `Prompt of turn ${turn}`);
}

async function show(job, turn, place) {
  fill(place, banner("info", `Reading turn ${turn}'s prompt…`));
  try {
    const prompt = await api(`/v1/jobs/${encodeURIComponent(job.id)}/turns/${turn}/prompt`);
    fill(place, drawPrompt(prompt));
  } catch (error) {
    fill(place, banner("error", `Cannot read turn ${turn}'s prompt: `, errorText(error)));
  }
  place.querySelector("h3")?.focus();
}

function drawPrompt(prompt) {
  const tools = prompt.tools.length
    ? h("ul", { class: "prompt-tools" }, prompt.tools.map((t) => h("li", { dataset: { tool: t.name } }, h("code", {}, t.name), t.description ? ` — ${t.description}` : "", h("details", { class: "fold" }, h("summary", {}, "parameters"), h("pre", { tabindex: "0" }, pretty(t.parameters))))))
    : h("p", { class: "muted" }, "No tools were offered.");
  return h(
    "section",
    { class: "card prompt", dataset: { turn: String(prompt.turn) } },
    h("h3", { tabindex: "-1" }, `What turn ${prompt.turn} sent the model`),
    h("p", { class: "muted prompt-summary" }, `${count(prompt.messages.length, "message")} and ${count(prompt.tools.length, "tool")}, rebuilt from the journal${prompt.pinned ? " and the version the job ran" : "; the tools are the current version's (the job's own version cannot be had)"}. ${historyText(prompt)}`),
    h("ol", { class: "prompt-messages" }, prompt.messages.map(message)),
    h("h4", {}, "Tools offered"),
    tools,
  );
}

/** How the messages shown were chosen from the conversation. */
function historyText(prompt) {
  const all = prompt.conversation_messages ?? prompt.messages.length;
  const left = all - prompt.messages.length;
  if (prompt.history === "plugin") return `A history plugin chose which of these ${all} it sent; its choice is not recorded, so all are shown.`;
  if (left > 0) return `The sliding history window left out ${count(left, "older message")} of ${all}: the first and the newest were sent.`;
  return "Every message of the conversation was sent.";
}

/** One message: its role (and the call it answers), its text, the calls it makes. */
function message(m) {
  const calls = (m.tool_calls || []).map((c) => h("li", {}, h("code", {}, c.function?.name || c.name || "?"), " ", h("code", { class: "muted" }, c.id || ""), h("pre", { tabindex: "0" }, pretty(c.function?.arguments ?? c.arguments ?? {}))));
  return h(
    "li",
    { class: "prompt-message", dataset: { role: m.role } },
    h("b", {}, m.role), m.name ? ` · ${m.name}` : "", m.tool_call_id ? h("span", { class: "muted" }, ` · answers ${m.tool_call_id}`) : "",
    m.content ? h("pre", { class: "args", tabindex: "0" }, m.content) : null,
    calls.length ? h("ul", { class: "prompt-calls" }, calls) : null,
  );
}
