#!/usr/bin/env python3
"""Arithmetic tool for the example bundle: JSON arguments on stdin, one JSON value on stdout."""
import json
import sys


def main() -> int:
    op = sys.argv[1] if len(sys.argv) > 1 else ""
    args = json.load(sys.stdin)
    try:
        a, b = float(args["a"]), float(args["b"])
    except (KeyError, TypeError, ValueError) as exc:
        print(f"need numeric a and b: {exc}", file=sys.stderr)
        return 2
    if op == "add":
        result = a + b
    elif op == "multiply":
        result = a * b
    else:
        print(f"unknown operation {op!r}", file=sys.stderr)
        return 2
    if result == int(result):
        result = int(result)
    json.dump({"result": result}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
