"""Schemathesis checks of the daemon's own contract, loaded by tests/fuzz_api.rs
through SCHEMATHESIS_HOOKS.

`excepted_refusal`: `schemathesis.toml` widens a check's expected statuses for
some operations (a valid-looking request refused for a reason no schema can
state: an unknown bundle, a cron expression); this holds each widened status
to the one error it is excepted for, so the exception hides nothing else.

`json_rpc_error`: a JSON-RPC interface (A2A) answers a body it cannot take
with a JSON-RPC error in a 200 (the transport worked); such a 200 must be one.

`error_shape`: every 4xx answer is JSON shaped `{"error": {"code", "message", ...}}`
(src/api/error.rs; `/v1/chat/completions` answers in OpenAI's shape, which
has both keys too), with a non-empty message and a string code. `/mcp` may
instead answer a JSON-RPC 2.0 error, whose `code` is an integer (the MCP
transport's own shape for a malformed or misrouted message).

`before_call`: a thread's event stream (the Agent Protocol's thread streaming,
and LangGraph's join of a thread) stays open for the thread's runs to come until
its client goes, and Schemathesis reads a whole answer: the stream of a thread
that exists (the stateful phase links `POST /threads` to it) would never end. It is checked on a thread no key
has (its 404 and its 422s); tests/agent_protocol_stream.rs reads real ones.
"""

import json
import uuid

import schemathesis

THREAD_STREAMS = {
    "POST /threads/{thread_id}/stream",
    "POST /threads/{thread_id}/stream/events",
    "GET /threads/{thread_id}/stream",
}


@schemathesis.hook
def before_call(ctx, case, kwargs):
    if f"{case.method.upper()} {case.path}" in THREAD_STREAMS:
        case.path_parameters = {**(case.path_parameters or {}), "thread_id": str(uuid.uuid4())}


@schemathesis.check
def error_shape(ctx, response, case):
    if not 400 <= response.status_code < 500:
        return None
    where = f"{case.method} {case.path} answered {response.status_code}"
    content_type = response.headers.get("content-type", [""])
    if isinstance(content_type, list):
        content_type = content_type[0] if content_type else ""
    if not content_type.startswith("application/json"):
        raise AssertionError(
            f"{where} with Content-Type {content_type!r}, not application/json: {response.text[:300]!r}"
        )
    try:
        body = json.loads(response.content)
    except ValueError as e:
        raise AssertionError(f"{where} with a body that is not JSON ({e}): {response.text[:300]!r}")
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        raise AssertionError(f'{where} without an "error" object: {response.text[:300]!r}')
    json_rpc = case.path == "/mcp" and body.get("jsonrpc") == "2.0" and type(error.get("code")) is int
    if not json_rpc and (not isinstance(error.get("code"), str) or not error["code"]):
        raise AssertionError(f'{where}: "error.code" is not a non-empty string: {response.text[:300]!r}')
    if not isinstance(error.get("message"), str) or not error["message"]:
        raise AssertionError(f'{where}: "error.message" is not a non-empty string: {response.text[:300]!r}')
    return None


# The refusals `schemathesis.toml` excepts: (operation, status) -> the error
# codes (with the field each names) that status may carry for a request the
# document calls valid.
EXCEPTED = {
    ("GET /threads/{thread_id}/stream", 422): {
        ("invalid_request", "upgrade"),
        ("invalid_request", "stream_modes"),
    },
    ("GET /threads/{thread_id}/stream/events", 422): {("invalid_request", "upgrade")},
    ("POST /v1/jobs", 422): {("unknown_bundle", "bundle"), ("invalid_request", "webhook")},
    ("POST /v1/jobs/batch", 422): {("unknown_bundle", None), ("invalid_request", "webhook")},
    ("GET /v1/jobs", 422): {("invalid_request", "cursor")},
    ("POST /v1/schedules", 422): {
        ("unknown_bundle", "bundle"),
        ("invalid_request", "cron"),
        ("invalid_request", "until"),
        ("invalid_request", "webhook"),
    },
    ("POST /api/group-chat", 422): {("invalid_request", "max_iterations")},
    ("POST /v1/jobs/{id}/fork", 422): {("invalid_request", "at_turn")},
    ("POST /v1/bundles/{name}/verify", 422): {("invalid_request", "exchange")},
    ("POST /v1/bundles/{name}/evals", 422): {
        ("invalid_request", "name"),
        ("invalid_request", "version"),
        ("invalid_request", "against"),
        ("invalid_request", "no_regressions"),
        ("invalid_request", "limits"),
        ("invalid_request", "real_tools"),
    },
    ("POST /v1/keys", 422): {("invalid_request", "bundles")},
    ("POST /mcp", 400): {("invalid_request", None), ("json-rpc", None)},
    ("POST /threads/{thread_id}/state", 422): {("invalid_request", "values")},
    ("POST /assistants", 422): {("invalid_request", "config"), ("invalid_request", "context")},
    ("PATCH /assistants/{assistant_id}", 422): {
        ("invalid_request", "config"),
        ("invalid_request", "context"),
    },
    **{
        (f"POST {route}", 422): {
            ("invalid_request", "input"),
            ("invalid_request", "messages"),
            ("invalid_request", "webhook"),
            ("invalid_request", "thread_id"),
            ("invalid_request", "stream_mode"),
            ("invalid_request", "on_disconnect"),
            ("invalid_request", "command"),
            ("invalid_request", "resume"),
            ("invalid_request", "decisions"),
            ("invalid_request", "goto"),
            ("invalid_request", "update"),
            ("invalid_request", "graph"),
            ("invalid_request", "batch"),
        }
        for route in [
            "/threads/{thread_id}/runs",
            "/threads/{thread_id}/runs/wait",
            "/threads/{thread_id}/runs/stream",
            "/runs",
            "/runs/wait",
            "/runs/stream",
            "/runs/batch",
        ]
    },
    ("PATCH /threads/{thread_id}/state", 422): {("invalid_request", "values")},
    **{
        (route, 422): {
            ("invalid_request", "input"),
            ("invalid_request", "messages"),
            ("invalid_request", "webhook"),
            ("invalid_request", "thread_id"),
            ("invalid_request", "stream_mode"),
            ("invalid_request", "on_disconnect"),
            ("invalid_request", "command"),
            ("invalid_request", "after_seconds"),
            ("invalid_request", "cron"),
            ("invalid_request", "timezone"),
            ("invalid_request", "until"),
            ("invalid_request", "body"),
        }
        for route in [
            "POST /runs/crons",
            "POST /threads/{thread_id}/runs/crons",
            "PATCH /runs/crons/{cron_id}",
        ]
    },
}


def _error(response):
    try:
        body = json.loads(response.content)
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) else None


@schemathesis.check
def excepted_refusal(ctx, response, case):
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive:
        return None
    label = f"{case.method.upper()} {case.operation.path}"
    allowed = EXCEPTED.get((label, response.status_code))
    if allowed is None:
        return None
    error = _error(response) or {}
    code, field = error.get("code"), error.get("field")
    # MCP's transport answers a message that does not fit in JSON-RPC's
    # own error shape (an integer code).
    if ("json-rpc", None) in allowed and type(code) is int:
        return None
    # A batch names the job's index (`jobs[3].webhook`): the excepted field
    # is its last part; `None` takes any field.
    name = (field or "").rsplit(".", 1)[-1]
    if any(code == c and (f is None or name == f) for c, f in allowed):
        return None
    raise AssertionError(
        f"{label} answered {response.status_code} to a valid request with "
        f"{code!r} (field {field!r}); the exception in schemathesis.toml covers only "
        f"{sorted(allowed, key=str)}: {response.text[:300]!r}"
    )


@schemathesis.check
def json_rpc_error(ctx, response, case):
    meta = case.meta
    if meta is None or response.status_code != 200 or not case.operation.path.startswith("/a2a"):
        return None
    from schemathesis.core.parameters import ParameterLocation

    if not meta.is_negative_at(ParameterLocation.BODY):
        return None
    if response.headers.get("content-type", [""])[0].startswith("text/event-stream"):
        return None
    try:
        body = json.loads(response.content)
    except ValueError as e:
        raise AssertionError(f"POST {case.operation.path} answered 200 that is not JSON ({e})")
    error = body.get("error") if isinstance(body, dict) else None
    if body.get("jsonrpc") != "2.0" or not isinstance(error, dict) or type(error.get("code")) is not int:
        raise AssertionError(
            f"POST {case.operation.path} took a body the document calls invalid and answered "
            f"200 without a JSON-RPC error: {response.text[:300]!r}"
        )
    return None
