"""Schemathesis checks of the daemon's own contract, loaded by tests/fuzz_api.rs
through SCHEMATHESIS_HOOKS.

`error_shape`: every 4xx answer is JSON shaped `{"error": {"code", "message", ...}}`
(src/api/error.rs; `/v1/chat/completions` answers in OpenAI's shape, which
has both keys too), with a non-empty message and a string code. `/mcp` may
instead answer a JSON-RPC 2.0 error, whose `code` is an integer (the MCP
transport's own shape for a malformed or misrouted message).
"""

import json

import schemathesis


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
