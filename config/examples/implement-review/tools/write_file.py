#!/usr/bin/env python3
"""Writes a file in the demo repository (the workflow's commit step commits it).

JSON arguments on stdin: {path, content}; the repository is $DEMO_REPO.
Prints {"written": <path>}."""
import json
import os
import sys


def main() -> int:
    args = json.load(sys.stdin)
    repo = os.environ.get("DEMO_REPO", "")
    if not os.path.isdir(os.path.join(repo, ".git")):
        print(f"DEMO_REPO={repo!r} is not a git repository: run scripts/workflow-demo", file=sys.stderr)
        return 2
    path = os.path.normpath(os.path.join(repo, args["path"]))
    if not path.startswith(os.path.abspath(repo) + os.sep):
        print(f"path {args['path']!r} leaves the repository", file=sys.stderr)
        return 2
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(args["content"])
    json.dump({"written": args["path"]}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
