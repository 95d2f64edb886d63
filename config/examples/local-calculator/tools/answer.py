#!/usr/bin/env python3
"""Termination tool: echoes the model's final answer as the run's result."""
import json
import sys

args = json.load(sys.stdin)
json.dump({"answer": args.get("answer")}, sys.stdout)
