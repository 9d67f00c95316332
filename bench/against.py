"""This checkout's figures beside an older commit's, in one run on one machine.

    python -m bench.against REV [--quick] [--rounds N] [--only ingest,latency,...]

REV's ``exporter/``, ``bench/`` and ``tests/`` are exported into a temporary folder and each
figure is run there with its own benchmark code (so a benchmark that measures an internal class
measures that commit's class), alternating with this checkout's: ours, REV, REV, ours, ...
so both see the same background load. Each side's value is the median over the rounds.
stdout: one JSON object per benchmark both sides report, with ``ratio`` = ours / REV and
``regression`` = how much worse ours is (0.12 = 12% worse; negative: better). Rates
("lines/s", "lines per CPU second") are better higher, every other unit lower. Never asserts.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import PYTHON, REPO, median, note
from bench.previous import export_tree

# The five figures issue 14 holds to "no more than 10% worse" (footprint: idle RSS and CPU).
DEFAULT = "ingest,latency,crash,scrape,footprint"


def export(rev: str, into: Path) -> Path:
    # tests/: the recorded logs some benchmarks replay (the crash launcher's incident).
    failed = export_tree(rev, ["exporter", "bench", "tests"], into)
    if failed is not None:
        raise SystemExit(f"bench.against: cannot export {rev}: {failed}")
    # Its benchmarks start the daemon as .venv/bin/sglang-sentinel: that commit's code.
    launcher = into / ".venv" / "bin" / "sglang-sentinel"
    launcher.parent.mkdir(parents=True)
    launcher.write_text(
        f'#!/bin/sh\nPYTHONPATH="{into}" exec "{PYTHON}" -c '
        '"import sys; from exporter.cli import main; sys.exit(main())" "$@"\n'
    )
    launcher.chmod(0o755)
    return into


def comparable(name: str) -> str:
    """A benchmark's name with its series count to one significant digit: the two commits
    build about the same number of series (503 here, 507 there) under one name."""

    def rounded(match: re.Match) -> str:
        count = int(match.group(1))
        return f"_{round(count, 1 - len(str(count)))}_series"

    return re.sub(r"_(\d+)_series", rounded, name)


def run_figure(tree: Path, figure: str, quick: bool) -> dict[str, dict]:
    """One figure's records from ``tree``'s own bench.main, by benchmark name."""
    command = [PYTHON, "-m", "bench.main", "--only", figure, *(["--quick"] if quick else [])]
    done = subprocess.run(command, cwd=tree, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        note(f"{figure} in {tree} failed:\n{done.stderr[-2000:]}")
    records = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            records[comparable(record["benchmark"])] = record
    return records


def regression(ours: float, theirs: float, unit: str) -> float | None:
    if theirs == 0 or ours == 0:
        return None
    rate = unit.endswith(("/s", " second"))  # lines/s, lines per CPU second
    return theirs / ours - 1 if rate else ours / theirs - 1


def compare(figure: str, rounds: int, old: Path, rev: str, quick: bool) -> None:
    values: dict[str, dict[str, list[float]]] = {"ours": {}, "old": {}}
    units: dict[str, str] = {}
    own_peer: dict[str, tuple[str, list[float]]] = {}  # ours vs its own peer (mtail, ...)
    for round_number in range(rounds):
        # Alternate who goes first: a drift in the machine's load hits both sides alike.
        order = [("ours", REPO), ("old", old)]
        for side, tree in order if round_number % 2 == 0 else reversed(order):
            for name, record in run_figure(tree, figure, quick).items():
                if isinstance(record.get("value"), (int, float)) and record["unit"]:
                    values[side].setdefault(name, []).append(float(record["value"]))
                    units[name] = record["unit"]
                if side == "ours" and record.get("peer") and record.get("ratio") is not None:
                    own_peer.setdefault(name, (record["peer"], []))[1].append(record["ratio"])
    for name in sorted(set(values["ours"]) & set(values["old"])):
        ours, theirs = median(values["ours"][name]), median(values["old"][name])
        worse = regression(ours, theirs, units[name])
        print(
            json.dumps(
                {
                    "benchmark": name,
                    "value": ours,
                    "unit": units[name],
                    "peer": rev,
                    "peer_value": theirs,
                    "ratio": round(ours / theirs, 3) if theirs else None,
                    "regression": None if worse is None else round(worse, 3),
                    "within_10_percent": worse is not None and worse <= 0.10,
                    # Every round's value: a median moved by one slow round shows here.
                    "rounds": values["ours"][name],
                    "peer_rounds": values["old"][name],
                    # The figure's own peer in the same runs, e.g. mtail for ingestion.
                    "ours_peer": own_peer[name][0] if name in own_peer else None,
                    "ours_peer_ratio": median(own_peer[name][1]) if name in own_peer else None,
                }
            ),
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.against", description=__doc__)
    parser.add_argument("rev", help="the older commit, e.g. 8ada096")
    parser.add_argument("--only", default=DEFAULT, help=f"figures (default {DEFAULT})")
    parser.add_argument("--rounds", type=int, default=2, help="runs per side per figure")
    parser.add_argument("--quick", action="store_true", help="each figure's --quick sizes")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sentinel-against-") as tmp:
        old = export(args.rev, Path(tmp))
        for figure in (name.strip() for name in args.only.split(",") if name.strip()):
            note(f"--- {figure}: ours vs {args.rev}, {args.rounds} rounds ---")
            compare(figure, args.rounds, old, args.rev, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
