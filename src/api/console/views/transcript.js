// A group chat as a transcript: who said what, in order. From the result's
// `transcript` ({speaker, text}) when the daemon records one, else its
// `agent_responses`, else the replies' nested runs in the event stream
// (speaker: the bundle that replied; text: its last answer).

import { h } from "../dom.js";

/** `[{speaker, text}]` of a group chat job, or null when there is none to show. */
export function lines(result, root) {
  if (Array.isArray(result?.transcript)) return result.transcript.map((l) => ({ speaker: l.speaker, text: l.text }));
  if (Array.isArray(result?.agent_responses)) return result.agent_responses.map((r) => ({ speaker: r.agent_name || r.agent_id, text: r.response }));
  if (!root) return null;
  const out = [];
  const visit = (run) => {
    for (const item of run.items) {
      if (item.kind !== "turn") continue;
      for (const c of item.calls) {
        for (const child of c.runs) {
          const last = child.items.filter((i) => i.kind === "turn" && i.response).pop();
          const text = last ? last.response.parsed_content ?? last.response.content : null;
          if (text) out.push({ speaker: child.bundle, text });
        }
      }
    }
    for (const child of run.loose) {
      const last = child.items.filter((i) => i.kind === "turn" && i.response).pop();
      if (last) out.push({ speaker: child.bundle, text: last.response.parsed_content ?? last.response.content });
    }
  };
  visit(root);
  return out.length ? out : null;
}

export function draw(list) {
  return h(
    "ol",
    { class: "transcript" },
    list.map((l) => h("li", { class: "line" }, h("b", { class: "speaker" }, l.speaker || "?"), h("div", { class: "said" }, l.text || ""))),
  );
}
