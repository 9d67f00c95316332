#!/usr/bin/env python3
"""Sanity check for the heldout5 blind set.

* every label's root_cause_line occurs verbatim as a whole physical line of its log
* every failure_class is one of the corpus taxonomy classes
* every .log has exactly one label and vice versa
Prints the class composition. Exit status 0 on success, 1 on any problem.
Standalone: uses only the standard library and does not import the project.
"""

import collections
import json
import os
import sys

TAXONOMY = [
    "pool_init_oom",
    "weights_oom",
    "cuda_graph_oom",
    "runtime_oom",
    "mamba_cache_exhausted",
    "kv_pool_exhausted",
    "distributed_init",
    "port_in_use",
    "invalid_argument",
    "model_load_error",
    "unsupported_model",
    "kernel_error",
    "cuda_error",
    "hang_timeout",
    "killed_by_signal",
    "dependency_error",
    "other",
]
REQUIRED = ["file", "failure_class", "root_cause_line", "phase", "sglang_version", "notes"]

here = os.path.dirname(os.path.abspath(__file__))


def main() -> int:
    problems = []
    labels = []
    with open(os.path.join(here, "labels.jsonl"), encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            if raw.strip():
                try:
                    labels.append(json.loads(raw))
                except json.JSONDecodeError as e:
                    problems.append(f"labels.jsonl:{n}: bad JSON ({e})")
    seen = set()
    for lab in labels:
        missing = [k for k in REQUIRED if k not in lab]
        if missing:
            problems.append(f"{lab.get('file')}: missing fields {missing}")
            continue
        fn = lab["file"]
        if fn in seen:
            problems.append(f"{fn}: labelled twice")
        seen.add(fn)
        if lab["failure_class"] not in TAXONOMY:
            problems.append(f"{fn}: class {lab['failure_class']!r} is not a taxonomy class")
        if lab["phase"] not in ("startup", "runtime"):
            problems.append(f"{fn}: phase {lab['phase']!r} is not startup/runtime")
        path = os.path.join(here, fn)
        if not os.path.exists(path):
            problems.append(f"{fn}: log file missing")
            continue
        with open(path, encoding="utf-8", newline="") as f:
            lines = f.read().split("\n")
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]
        rc = lab["root_cause_line"]
        if not rc.strip():
            problems.append(f"{fn}: empty root_cause_line")
        elif rc not in lines:
            problems.append(f"{fn}: root_cause_line is not a whole line of the log: {rc[:100]!r}")
    logs = sorted(x for x in os.listdir(here) if x.endswith(".log"))
    for fn in logs:
        if fn not in seen:
            problems.append(f"{fn}: no label")
    counts = collections.Counter(label.get("failure_class") for label in labels)
    print(f"{len(labels)} labels, {len(logs)} logs")
    for cls in TAXONOMY:
        print(f"  {cls:24s} {counts.get(cls, 0)}")
    phases = collections.Counter(label.get("phase") for label in labels)
    print("  phases:", dict(phases))
    if problems:
        print("PROBLEMS:")
        for p in problems:
            print("  " + p)
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
