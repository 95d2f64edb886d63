"""Schemathesis checks of tests/agent_protocol.rs: the daemon's own
(tests/data/fuzz_api/checks.py: `error_shape`, `excepted_refusal`), with the
refusals excepted for the Agent Protocol's document in place of the daemon's;
and four of Schemathesis' built-in checks, which the test runs through the
wrappers below instead (`--exclude-checks`: this Schemathesis does not turn a
check off for one operation), each the built-in check on every case but those
excepted here, with the reason beside each (docs/langgraph.md#the-agent-protocol)."""

import importlib.util
import pathlib

import jsonschema
import schemathesis
from schemathesis.core import NOT_SET
from schemathesis.specs.openapi.checks import (
    allow_header_conformance,
    negative_data_rejection,
    response_schema_conformance,
    unsupported_method,
)

_shared_path = pathlib.Path(__file__).resolve().parent.parent / "fuzz_api" / "checks.py"
_spec = importlib.util.spec_from_file_location("sa_shared_checks", _shared_path)
shared = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shared)

# The refusals schemathesis.toml excepts here: (operation, status) -> the
# error codes (with the field each names) that status may carry for a request
# the protocol's document calls valid; each with its reason in the toml.
_RUN = {
    ("invalid_request", "assistant_id"),
    ("invalid_request", "input"),
    ("invalid_request", "messages"),
    ("invalid_request", "webhook"),
    ("invalid_request", "stream_mode"),
    ("invalid_request", "on_disconnect"),
}
_ITEM = {("invalid_request", "namespace"), ("invalid_request", "key")}
shared.EXCEPTED.clear()
shared.EXCEPTED.update(
    {
        ("POST /runs", 422): _RUN,
        ("POST /runs/wait", 422): _RUN,
        ("POST /runs/stream", 422): _RUN,
        ("GET /store/items", 422): _ITEM,
        ("DELETE /store/items", 422): _ITEM,
        ("PUT /store/items", 422): _ITEM | {("invalid_request", "ttl")},
        ("POST /store/items/search", 422): {
            ("invalid_request", "namespace_prefix"),
            ("invalid_request", "limit"),
            ("invalid_request", "offset"),
        },
        ("POST /store/namespaces", 422): {
            ("invalid_request", "prefix"),
            ("invalid_request", "suffix"),
            ("invalid_request", "max_depth"),
            ("invalid_request", "limit"),
            ("invalid_request", "offset"),
        },
        ("GET /threads/{thread_id}/history", 422): {("invalid_request", "limit")},
        ("PATCH /threads/{thread_id}", 422): {
            ("invalid_request", "values"),
            ("invalid_request", "messages"),
        },
        ("POST /threads/search", 422): {
            ("invalid_request", "values"),
            ("invalid_request", "limit"),
            ("invalid_request", "offset"),
        },
    }
)

def _label(case):
    return f"{case.method.upper()} {case.operation.path}"


# A request without a body is the empty object, as on every route of the
# daemon (docs/api.md); the document requires a body on these. (And an
# optional field sent as `null` is one not sent, on every operation.)
BODILESS = {
    "PATCH /threads/{thread_id}",
    "POST /agents/search",
    "POST /runs/search",
    "POST /threads",
    "POST /threads/search",
    "POST /store/items/search",
    "POST /store/namespaces",
}


def _inlined(schema, document, depth=0):
    """`schema` with the document's local `$ref`s put in place (the
    protocol's schemas do not refer to themselves)."""
    if depth > 20:
        return schema
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/"):
            target = document
            for part in ref[2:].split("/"):
                target = target[part]
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            return _inlined({**target, **rest}, document, depth + 1)
        return {k: _inlined(v, document, depth + 1) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_inlined(v, document, depth + 1) for v in schema]
    return schema


def _without_nulls(value):
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _valid_once_nulls_go(case):
    """Whether the body is one the document calls valid once its `null`
    fields are taken out: the daemon reads an optional field sent as `null`
    as one not sent, on every route (docs/api.md)."""
    body = case.body
    if not isinstance(body, dict) or body == _without_nulls(body):
        return False
    raw = case.operation.definition.raw
    media = raw.get("requestBody", {}).get("content", {}).get("application/json", {})
    schema = media.get("schema")
    if schema is None:
        return False
    document = case.operation.schema.raw_schema
    return jsonschema.Draft202012Validator(_inlined(schema, document)).is_valid(
        _without_nulls(body)
    )


def _only_not_a_uuid(case):
    """Whether what makes the case invalid is an id that is not a UUID: the
    daemon's thread and checkpoint ids are its own (a thread's any id of 1 to
    128 letters, digits, `-`, `_`, `.` or `:`; a checkpoint's
    `<run id>:<step>`), where the document says `format: uuid`."""
    phase = case.meta.phase if case.meta is not None else None
    description = getattr(getattr(phase, "data", None), "description", None) or ""
    return "'uuid' format" in description


@schemathesis.check
def negative_data_rejection_but_bodiless(ctx, response, case):
    if _label(case) in BODILESS and case.body is NOT_SET:
        return None
    if _valid_once_nulls_go(case) or _only_not_a_uuid(case):
        return None
    return negative_data_rejection(ctx, response, case)


# Where LangGraph's SDKs read another shape than the document's, they win:
# `POST /runs/wait` answers the run's values (`{"messages": […]}`, which
# `runs.wait(None, …)` returns), not `RunWaitResponse` (which
# `GET /runs/{run_id}/wait` answers); `POST /store/namespaces` answers
# `{"namespaces": […]}`, not the bare array.
OTHER_SHAPE = {"POST /runs/wait", "POST /store/namespaces"}


@schemathesis.check
def response_schema_conformance_but_langgraphs(ctx, response, case):
    if _label(case) in OTHER_SHAPE:
        return None
    return response_schema_conformance(ctx, response, case)


# LangGraph's SDKs read a thread's history with `POST` (its filters in the
# body): the document names only `GET`, so `POST` is served, and `Allow`
# (an `OPTIONS` answer) names it.
SERVED_BESIDE = {"/threads/{thread_id}/history"}


@schemathesis.check
def unsupported_method_but_langgraphs(ctx, response, case):
    if case.operation.path in SERVED_BESIDE:
        return None
    return unsupported_method(ctx, response, case)


@schemathesis.check
def allow_header_conformance_but_langgraphs(ctx, response, case):
    if case.operation.path in SERVED_BESIDE:
        return None
    return allow_header_conformance(ctx, response, case)
