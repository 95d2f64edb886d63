// "Crash matrix", on each served bundle of the bundles page: `POST
// /v1/bundles/{name}/verify` runs the loaded bundle against a reply script,
// crashes it at every journal write, resumes it, and says for every crash
// point and tool call whether the call ran once, twice or never — judged
// against the tool's declared effect. A bundle bound to a model server
// needs the replies (the mock server's reply-script format) in the field.
// Before it runs, the person confirms the list of tools that would really
// run, many times each — the read-only ones always, those with a side
// effect only when "Run the real tools" is ticked (stand-ins answer them
// otherwise) — as the daemon states them (`verify_stand_ins` of
// `GET /v1/bundles/{name}`, the rule verify itself applies).

import { h, fill, banner, errorText, confirmAction, count } from "../dom.js";
import { api } from "../api.js";
import { may, gate } from "../session.js";

/** The panel for bundle `b` (an `h3` section inside its card). */
export function verifyPanel(b) {
  const id = `verify-${b.name}`;
  const result = h("div", { class: "verify-result", id: `${id}-result`, "aria-live": "polite" });
  const exchange = h("textarea", { id: `${id}-exchange`, class: "verify-exchange", rows: 5, spellcheck: "false" });
  const real = h("input", { type: "checkbox", id: `${id}-real`, class: "verify-real" });
  const run = h("button", { type: "button", class: "verify-run", "aria-describedby": `${id}-help`, onclick: () => doVerify() }, "Verify");
  const path = `/v1/bundles/${encodeURIComponent(b.name)}/verify`;
  const standIns = b.verify_stand_ins || [];

  async function doVerify() {
    if (!(await confirmAction(confirmation(b, standIns, real.checked)))) return;
    run.disabled = true;
    fill(result, banner("info", "Verifying: every crash point is a job of its own; this takes a while…"));
    const body = exchange.value.trim() ? { exchange: exchange.value } : {};
    if (real.checked) body.real_tools = true;
    try {
      fill(result, matrix(await api(path, { method: "POST", body })));
    } catch (error) {
      fill(result, banner("error", `Cannot verify ${b.name}: `, errorText(error)));
    } finally {
      run.disabled = false;
    }
  }

  return h(
    "section",
    { class: "verify", id, "aria-labelledby": `${id}-title` },
    h("h3", { id: `${id}-title` }, "Crash matrix"),
    h(
      "p",
      { class: "muted", id: `${id}-help` },
      `Runs version ${b.version || "current"} against a reply script, crashes it at every journal write and resumes it: does each tool call run once, twice or never? Read-only tools run, in a copy of the bundle; tools with a side effect are answered by stand-ins unless you ask for the real ones.`,
    ),
    h(
      "details",
      { class: "fold" },
      h("summary", {}, "Reply script (needed when the bundle calls a model server)"),
      h("label", { for: `${id}-exchange` }, "Replies, in the mock server's format (YAML or JSON)"),
      exchange,
    ),
    h(
      "p",
      { class: "verify-real-choice" },
      real,
      h("label", { for: `${id}-real` }, standIns.length ? ` Run the real tools (${standIns.join(", ")})` : " Run the real tools"),
    ),
    h("div", { class: "buttons" }, gate(run, may("verify_bundle"))),
    result,
  );
}

/**
 * What a verify of `b` really runs, for the person to confirm: the tools
 * that run in either mode, and the stand-ins' tools — really run when
 * `real` is ticked, else answered by stand-ins.
 */
function confirmation(b, standIns, real) {
  const effects = new Map((b.tools || []).map((t) => [t.name, (t.effect || "").replaceAll("_", " ")]));
  const tools = [...effects.keys()];
  const running = real ? tools : tools.filter((t) => !standIns.includes(t));
  // A tool with a side effect that really runs does so side effects and all.
  const item = (t, runs) => h("li", { dataset: { tool: t } }, h("code", {}, t), ` (${effects.get(t)}${runs && standIns.includes(t) ? ": side effects and all" : ""})`);
  const list = (names, cls, runs) => h("ul", { class: cls }, names.map((t) => item(t, runs)));
  return {
    title: real && standIns.length ? `Run ${b.name}'s real tools?` : `Verify ${b.name}?`,
    body: h(
      "div",
      {},
      h("p", {}, `Version ${b.version || "current"} runs about twice per journal write, crashed and resumed each time.`),
      running.length ? [h("p", {}, "These tools would really run, once or more at every crash point:"), list(running, "verify-real-tools", true)] : h("p", {}, "No tool would really run."),
      !real && standIns.length ? [h("p", {}, "Stand-ins answer these; nothing of theirs runs:"), list(standIns, "verify-stand-ins", false)] : null,
    ),
    confirm: real && standIns.length ? "Run the real tools" : "Verify",
    danger: real && standIns.length > 0,
  };
}

const RAN = { once: "once", twice: "twice", never: "never", not_reached: "not reached" };

/** The report: the verdict, per crash point and call what ran, per call the summary. */
function matrix(r) {
  const broken = r.violations > 0;
  const verdict = broken
    ? `${r.violations} broken: fix the tool's effect in bundle.yaml, or make the tool honour SA_IDEMPOTENCY_KEY.`
    : `Every call keeps its declared effect at all ${r.crash_points.length} crash points.`;
  const rows = r.crash_points.flatMap((p) => {
    const at = `${p.moment} write ${p.write} (${p.step})`;
    if (!p.calls.length) return [row(at, null, p)];
    return p.calls.map((c) => row(at, c, p));
  });
  return h(
    "div",
    { class: "verify-report", dataset: { violations: String(r.violations) } },
    banner(broken ? "error" : "ok", h("strong", { class: "verify-verdict" }, verdict)),
    r.real_tools
      ? h("p", { class: "verify-mode" }, "The real tools ran, side effects and all.")
      : r.stand_ins && r.stand_ins.length
        ? h("p", { class: "verify-mode muted" }, `Stand-ins answered ${r.stand_ins.join(", ")}: nothing of theirs really ran.`)
        : null,
    h(
      "p",
      { class: "muted" },
      `Version ${r.version}: the reference run made ${count(r.writes.length, "journal write")} and ${count(r.calls.length, "tool call")}, and ended ${r.reference}.`,
    ),
    h(
      "table",
      { class: "verify-matrix" },
      h("thead", {}, h("tr", {}, ["crash point", "tool", "call", "effect", "ran", "resumed job"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows),
    ),
    h("h4", {}, "Per call"),
    h(
      "ul",
      { class: "plain verify-tools" },
      r.tools.map((t) =>
        h(
          "li",
          { dataset: { tool: t.tool } },
          h("code", {}, t.tool),
          ` (${t.effect}, turn ${t.turn} #${t.position}): once at ${t.once}, twice at ${t.twice}, never at ${t.never} (${t.never_parked} parked), not reached at ${t.not_reached} — `,
          t.violations ? h("strong", {}, `${t.violations} broken`) : "as declared",
        ),
      ),
    ),
  );
}

function row(at, call, point) {
  const cell = (label, ...content) => h("td", { "data-label": label }, ...content);
  if (!call) {
    return h("tr", { class: point.failed ? "broken" : "" }, cell("crash point", at), cell("tool", ""), cell("call", ""), cell("effect", ""), cell("ran", ""), cell("resumed job", point.outcome));
  }
  let ran = RAN[call.ran] || call.ran;
  if (call.ran === "never" && call.parked) ran = "never, parks";
  if (call.ran === "twice") ran = `twice (${call.runs}×)`;
  return h(
    "tr",
    { class: call.violation ? "broken" : "", dataset: { tool: call.tool, ran: call.ran } },
    cell("crash point", at),
    cell("tool", h("code", {}, call.tool)),
    cell("call", `turn ${call.turn} #${call.position}`),
    cell("effect", call.effect),
    cell("ran", ran, call.violation ? h("span", { class: "verify-violation" }, ` ✗ ${call.violation}`) : null),
    cell("resumed job", point.outcome),
  );
}
