#!/usr/bin/env python3
"""Check the heldout4 labels: every root_cause_line is a whole physical line of its log,
every failure_class is a corpus taxonomy class, every log has exactly one label. Prints class counts."""

import collections
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# The 17 classes of the corpus taxonomy (/work/shared/corpus/README.md, "The failure taxonomy").
CLASSES = {
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
}
PHASES = {"startup", "runtime"}
REQUIRED = ("file", "failure_class", "root_cause_line", "phase", "notes")


def main() -> int:
    errors = []
    labels = []
    with open(os.path.join(HERE, "labels.jsonl"), encoding="utf-8") as fh:
        for n, raw in enumerate(fh, 1):
            if raw.strip():
                labels.append((n, json.loads(raw)))
    seen = set()
    for n, lab in labels:
        for key in REQUIRED:
            if key not in lab:
                errors.append(f"labels.jsonl:{n}: missing key {key}")
        f = lab.get("file")
        if f in seen:
            errors.append(f"labels.jsonl:{n}: duplicate label for {f}")
        seen.add(f)
        if lab.get("failure_class") not in CLASSES:
            errors.append(f"{f}: unknown failure_class {lab.get('failure_class')!r}")
        if lab.get("phase") not in PHASES:
            errors.append(f"{f}: unknown phase {lab.get('phase')!r}")
        path = os.path.join(HERE, f or "")
        if not os.path.isfile(path):
            errors.append(f"{f}: log file missing")
            continue
        with open(path, encoding="utf-8", newline="") as fh:
            lines = re.split(r"\r\n|\n|\r", fh.read())
        root = lab.get("root_cause_line") or ""
        if not root.strip():
            errors.append(f"{f}: empty root_cause_line")
        elif root not in lines:
            errors.append(
                f"{f}: root_cause_line is not a whole physical line of the log: {root[:100]!r}"
            )
    logs = {x for x in os.listdir(HERE) if x.endswith(".log")}
    for missing in sorted(logs - seen):
        errors.append(f"{missing}: no label")
    counts = collections.Counter(lab["failure_class"] for _, lab in labels)
    phases = collections.Counter(lab["phase"] for _, lab in labels)
    print(f"{len(labels)} labels, {len(logs)} logs")
    for cls in sorted(CLASSES, key=lambda c: (-counts[c], c)):
        print(f"  {cls:24s} {counts[cls]}")
    print("  phases:", dict(phases))
    if errors:
        print("\nERRORS:")
        for e in errors:
            print("  " + e)
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
