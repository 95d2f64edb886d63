// A parked call, read the same whatever parked it: an approval request or
// an `unsafe` call of unknown outcome after a crash. The API's one shape
// (`kind`, `call_id`, `tool`, …) is read first; the older spellings
// (`call`, `tool_name`) only while a daemon still sends them.

/** The job's pending call as `{kind, callId, tool, arguments, effect, turn, scope, …}`, or null. */
export function pendingCall(job) {
  const p = job && job.pending_call;
  if (!p) return null;
  const kind = p.kind || (job.state === "awaiting_approval" || p.digest ? "approval" : "unknown_outcome");
  return {
    kind,
    callId: p.call_id ?? p.call ?? "",
    tool: p.tool ?? p.tool_name ?? "",
    arguments: p.arguments ?? null,
    effect: p.effect || "",
    turn: p.turn,
    scope: p.scope || "",
    // The bundle whose tool it is and the rule that asked, as the park
    // recorded them (absent on calls parked by an older daemon).
    bundle: p.bundle || null,
    rule: p.rule || null,
    digest: p.digest,
    parameters: p.parameters,
    timeoutMs: p.timeout_ms,
    approver: p.approver || "anyone",
    notBy: p.not_by || null,
    requestedAt: p.requested_at,
    expiresAt: p.expires_at,
  };
}

/**
 * The nested runs between a job's own run and the call's (its `scope`,
 * `turn:position/` a level), in words: "the agent call at turn 1, call 1".
 */
export function scopeText(scope) {
  return (scope || "")
    .split("/")
    .filter(Boolean)
    .map((level) => {
      const [turn, position] = level.split(":");
      const call = Number(position);
      return Number.isInteger(call) ? `the agent call at turn ${turn}, call ${call + 1}` : `the nested run ${level}`;
    })
    .join(", then ");
}

/** When an approval request is denied on its own (ms since the epoch), or NaN. */
export function autoDenyAt(call) {
  if (call.expiresAt) return Date.parse(call.expiresAt);
  if (call.timeoutMs && call.requestedAt) return Date.parse(call.requestedAt) + call.timeoutMs;
  return NaN;
}

/** One line for a parked call, the same for every kind: "ƒ charge (unsafe) · outcome unknown". */
export function parkedText(call) {
  const why = call.kind === "approval" ? "awaits approval"
    : call.kind === "caller_call" ? "awaits the client's output" : "outcome unknown";
  return `ƒ ${call.tool || "?"}${call.effect ? ` (${call.effect.replaceAll("_", " ")})` : ""} · ${why}`;
}
