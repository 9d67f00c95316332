"""The crash figure's tail, side by side with an older commit: every crash of both sides pooled.

    python -m bench.crash_pooled REV [--alternations 10] [--runs 30]

``bench.against --only crash`` compares the medians of each round's p99 over 30 crashes: one
slow crash in a round moves that round's p99, so its tail figure swings by tens of percent
between runs. Here each alternation runs one daemon of ``--runs`` crashes with this checkout
and one with REV (bench/crash.py's ``run``, in a process of its own with that tree's code),
alternating who goes first, and the percentiles are taken over all crashes of a side. Beside
them, for each step of an end, how many crashes spent over 2 ms in it: where a tail comes
from. stdout: one JSON object per figure, as bench.against prints them. Never asserts.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from bench.against import export, regression
from bench.common import PYTHON, REPO, note, percentile

SLOW_STEP_S = 0.002
_ONE_DAEMON = (
    "import json, sys; from bench.crash import run; "
    "latencies, steps, _ = run(int(sys.argv[1])); "
    "print(json.dumps({'latencies': latencies, 'steps': steps}))"
)


def one_daemon(tree: Path, runs: int) -> dict:
    command = [PYTHON, "-c", _ONE_DAEMON, str(runs)]
    done = subprocess.run(
        command, cwd=tree, capture_output=True, text=True, check=False, timeout=runs * 60
    )
    if done.returncode != 0 or not done.stdout.strip():
        raise SystemExit(f"bench.crash_pooled: the crash run in {tree} failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def pooled(trees: dict[str, Path], alternations: int, runs: int) -> dict[str, dict]:
    """Per side: every crash's latency (s) and, per step, every crash's duration (s)."""
    sides: dict[str, dict] = {side: {"latencies": [], "steps": defaultdict(list)} for side in trees}
    order = list(trees)
    for number in range(alternations):
        for side in order if number % 2 == 0 else reversed(order):
            got = one_daemon(trees[side], runs)
            sides[side]["latencies"] += got["latencies"]
            for step, values in got["steps"].items():
                sides[side]["steps"][step] += values
        note(f"alternation {number + 1}/{alternations} done")
    return sides


def figures(side: dict) -> dict[str, float]:
    ms = [value * 1000 for value in side["latencies"]]
    values = {f"crash_to_decision_pooled_p{q}": percentile(ms, q) for q in (50, 90, 99)}
    for step, durations in side["steps"].items():
        slow = sum(duration > SLOW_STEP_S for duration in durations)
        values[f"crashes_over_2ms_in {step}"] = float(slow)
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.crash_pooled", description=__doc__)
    parser.add_argument("rev", help="the older commit, e.g. 8ada096")
    parser.add_argument("--alternations", type=int, default=10)
    parser.add_argument("--runs", type=int, default=30, help="crashes per daemon")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sentinel-pooled-") as tmp:
        trees = {"ours": REPO, "old": export(args.rev, Path(tmp))}
        sides = pooled(trees, args.alternations, args.runs)
    ours, theirs = figures(sides["ours"]), figures(sides["old"])
    crashes = len(sides["ours"]["latencies"]), len(sides["old"]["latencies"])
    for name in sorted(set(ours) & set(theirs)):
        count = name.startswith("crashes_")
        worse = None if count else regression(ours[name], theirs[name], "ms")
        record = {
            "benchmark": name,
            "value": round(ours[name], 3),
            "unit": f"of {crashes[0]} crashes" if count else "ms",
            "peer": args.rev,
            "peer_value": round(theirs[name], 3),
            "peer_unit": f"of {crashes[1]} crashes" if count else "ms",
            "regression": None if worse is None else round(worse, 3),
        }
        print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
