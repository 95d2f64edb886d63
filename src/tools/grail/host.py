"""The grail host: runs Grail `.pym` scripts for the structured-agents daemon.

The daemon starts this file with the Python that has Grail installed
(`python3 -u -c <this source>`) and keeps a pool of such hosts. It speaks
one JSON object per line: requests on stdin, answers on stdout (the real
stdout; anything a script or library prints goes to stderr, which the
daemon keeps for error messages).

    host   -> daemon  {"op": "ready", "grail": "<version>"}
                      {"op": "fatal", "error": "..."}   (grail not importable)
    daemon -> host    {"op": "run", "id": N, "script": PATH, "digest": HEX,
                       "inputs": {...}, "limits": {...}, "externals": [NAME...]}
    host   -> daemon  {"op": "external", "id": N, "call": K, "name": NAME,
                       "arguments": {...}}        (zero or more, one at a time)
    daemon -> host    {"op": "external_result", "call": K, "ok": true, "value": V}
                      {"op": "external_result", "call": K, "ok": false, "error": "..."}
    host   -> daemon  {"op": "result", "id": N, "ok": true, "value": V}
                      {"op": "result", "id": N, "ok": false,
                       "error": {"type": "LimitError", "limit_type": "memory",
                                 "message": "..."}}

Grail's API as used here: `grail.load(path, grail_dir=None)` returns a
`GrailScript` (cached per path and content digest); its `externals` maps
each `@external` name to a spec with `is_async` and `parameters` (each with
a `name`); `await script.run(inputs=..., externals=..., limits=
grail.Limits(...))` returns the script's value or raises a `grail.GrailError`
(`LimitError` with `limit_type`, `InputError`, `ExternalError`,
`ExecutionError`, `ParseError`, `CheckError`, `OutputError`).
"""

import asyncio
import dataclasses
import json
import os
import sys
import traceback


def main():
    # The protocol owns the real stdout; a script's or library's prints go
    # to stderr so they can never corrupt it.
    proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    requests = sys.stdin.buffer

    def send(message):
        proto.write(json.dumps(message, default=_jsonable) + "\n")
        proto.flush()

    try:
        import grail
    except Exception as exc:  # any import failure is the same answer
        send({"op": "fatal", "error": f"{type(exc).__name__}: {exc}"})
        return 3
    send({"op": "ready", "grail": getattr(grail, "__version__", None)})

    cache = {}
    while True:
        line = requests.readline()
        if not line:
            return 0
        request = json.loads(line)
        if request.get("op") != "run":
            send({"op": "result", "id": request.get("id"), "ok": False,
                  "error": {"type": "ProtocolError",
                            "message": f"unknown op {request.get('op')!r}"}})
            continue
        send(_run(grail, cache, request, requests, send))


def _run(grail, cache, request, requests, send):
    run_id = request["id"]
    try:
        key = (request["script"], request.get("digest"))
        script = cache.get(key)
        if script is None:
            script = grail.load(request["script"], grail_dir=None)
            cache[key] = script
        limits = request.get("limits") or None
        if limits is not None:
            limits = grail.Limits(**limits)
        wanted = set(request.get("externals") or [])
        declared = getattr(script, "externals", {}) or {}
        asked = _Asker(run_id, requests, send)
        externals = {
            name: asked.external(name, spec)
            for name, spec in declared.items()
            if name in wanted
        }
        value = asyncio.run(
            script.run(inputs=request.get("inputs") or {}, externals=externals,
                       limits=limits)
        )
        return {"op": "result", "id": run_id, "ok": True, "value": value}
    except Exception as exc:
        error = {"type": type(exc).__name__, "message": str(exc)}
        limit_type = getattr(exc, "limit_type", None)
        if limit_type is not None:
            error["limit_type"] = str(limit_type)
        if not isinstance(exc, getattr(grail, "GrailError", ())):
            error["traceback"] = traceback.format_exc(limit=5)
        return {"op": "result", "id": run_id, "ok": False, "error": error}


class _Asker:
    """Answers a script's `@external` calls by asking the daemon."""

    def __init__(self, run_id, requests, send):
        self.run_id = run_id
        self.requests = requests
        self.send = send
        self.calls = 0

    def ask(self, name, arguments):
        self.calls += 1
        call = self.calls
        self.send({"op": "external", "id": self.run_id, "call": call,
                   "name": name, "arguments": arguments})
        line = self.requests.readline()
        if not line:
            raise SystemExit(0)  # the daemon went away
        reply = json.loads(line)
        if reply.get("call") != call:
            raise RuntimeError(f"external {name}: answer to call {reply.get('call')}, expected {call}")
        if not reply.get("ok"):
            raise RuntimeError(f"external {name} failed: {reply.get('error')}")
        return reply.get("value")

    def external(self, name, spec):
        params = [p.name for p in getattr(spec, "parameters", []) or []]

        def call(*args, **kwargs):
            arguments = dict(zip(params, args))
            arguments.update(kwargs)
            return self.ask(name, arguments)

        if getattr(spec, "is_async", False):
            async def call_async(*args, **kwargs):
                return call(*args, **kwargs)

            return call_async
        return call


def _jsonable(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if hasattr(value, "model_dump"):
        return value.model_dump()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return repr(value)


if __name__ == "__main__":
    sys.exit(main())
