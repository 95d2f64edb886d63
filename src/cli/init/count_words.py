#!/usr/bin/env python3
"""A process tool: JSON arguments on stdin, one JSON value on stdout.
A non-zero exit (with a message on stderr) is an error the model sees."""
import json
import sys


def main() -> int:
    args = json.load(sys.stdin)
    text = args.get("text")
    if not isinstance(text, str):
        print("need a string `text`", file=sys.stderr)
        return 2
    json.dump({"words": len(text.split())}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
