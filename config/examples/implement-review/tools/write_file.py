#!/usr/bin/env python3
"""Writes a file in the demo repository, records the status and commits.

JSON arguments on stdin: {path, content, status, message}; the repository is
$DEMO_REPO. Prints {"committed": <sha>}."""
import json
import os
import subprocess
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
    with open(path, "w") as f:
        f.write(args["content"])
    with open(os.path.join(repo, "STATUS.md"), "w") as f:
        f.write(args["status"] + "\n")
    git = ["git", "-C", repo]
    subprocess.run(git + ["add", "-A"], check=True, capture_output=True)
    subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", args["message"]], check=True, capture_output=True)
    sha = subprocess.run(git + ["rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    json.dump({"committed": sha}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
