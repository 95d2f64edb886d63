#!/usr/bin/env python3
"""Compile grammars in the real XGrammar engine and test strings against them, without PyTorch.

xgrammar's wheel imports torch and transformers at import time only for bitmask/tokenizer helpers;
the grammar compiler and string matcher are C++. We hand it inert stand-ins for those two modules.
Install: scripts/python-env (pip install --no-deps xgrammar==0.2.8, then apache-tvm-ffi pydantic numpy).

Usage: xgr_check.py CASES.json|-   where CASES = [{"name": str (optional),
        "kind": "ebnf"|"structural_tag"|"json_schema", "grammar": str|object,
        "accept": [str...], "reject": [str...]}]
Prints one line per failure, then a summary line; exits 1 on any failure, 2 when xgrammar is missing.
"""
import json
import sys
import types

try:
    import tvm_ffi  # noqa: F401  (imported before the stand-ins so its optional torch hooks stay off)
except ImportError as e:  # pragma: no cover
    print(f"xgrammar's dependency tvm_ffi is missing ({e}); run scripts/python-env", file=sys.stderr)
    sys.exit(2)


def _stub(name, **attrs):
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    m.__getattr__ = lambda n: type(n, (), {})
    sys.modules[name] = m
    return m


if "torch" not in sys.modules:
    _stub("torch", int32="int32", Tensor=type("Tensor", (), {}), tensor=lambda *a, **k: None)
if "transformers" not in sys.modules:
    _stub("transformers")

try:
    import xgrammar as xgr  # noqa: E402
    from xgrammar.testing import _is_grammar_accept_string as accepts  # noqa: E402
except ImportError as e:  # pragma: no cover
    print(f"xgrammar is missing ({e}); run scripts/python-env", file=sys.stderr)
    sys.exit(2)


def compile_(kind, text):
    as_text = text if isinstance(text, str) else json.dumps(text)
    if kind == "ebnf":
        return xgr.Grammar.from_ebnf(as_text)
    if kind == "structural_tag":
        return xgr.Grammar.from_structural_tag(as_text)
    if kind == "json_schema":
        return xgr.Grammar.from_json_schema(as_text)
    raise ValueError(f"unknown kind {kind!r}")


def main():
    src = sys.stdin if sys.argv[1:] in ([], ["-"]) else open(sys.argv[1])
    cases = json.load(src)
    bad = 0
    checked = 0
    for i, c in enumerate(cases):
        label = c.get("name", f"case {i}")
        try:
            g = compile_(c["kind"], c["grammar"])
        except Exception as e:  # noqa: BLE001  (report every compile failure, whatever its type)
            print(f"{label}: does not compile: {e}".replace("\n", " ")[:400])
            bad += 1
            continue
        for s in c.get("accept", []):
            checked += 1
            if not accepts(g, s):
                print(f"{label}: rejects a valid output: {s[:200]!r}")
                bad += 1
        for s in c.get("reject", []):
            checked += 1
            if accepts(g, s):
                print(f"{label}: accepts an invalid output: {s[:200]!r}")
                bad += 1
    print(f"{len(cases)} grammars checked, {checked} strings, {bad} failures")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
