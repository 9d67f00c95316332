"""Where ingestion time goes: per-stage cost per line and a cProfile of the read path.

    .venv/bin/python -m bench.profile_ingest [LINES]

Generates a log like figure 1's (bench/loggen.py), then times each stage of the daemon's
read path on its own (read+split, parse_line, tracebacks, parse_event by line kind, the
excerpt, AttemptProgress.apply), the whole path as the daemon runs it (``AttemptLog.feed``)
and prints cProfile's top functions for that path, run in one thread in LogTailer's batch
size. Not part of bench/run: a tool for the next optimisation.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

from bench.loggen import write_log
from exporter.attempt.attempt_log import AttemptLog
from exporter.attempt.progress import AttemptProgress
from exporter.logs.excerpt import Excerpt
from exporter.logs.grammar import grammar_for, parse_event
from exporter.logs.lines import parse_line
from exporter.logs.tailer import TAILER_BATCH_BYTES, FileFollower
from exporter.logs.tracebacks import TracebackAssembler


def batches(path: Path):
    follower = FileFollower(
        path, read_chunk_bytes=TAILER_BATCH_BYTES, max_bytes_per_poll=TAILER_BATCH_BYTES
    )
    while True:
        lines = follower.poll()
        if lines:
            yield lines
        if not follower.more_pending:
            break
    follower.close()


def read_path(path: Path) -> float:
    """The daemon's path from the tailer's batches on (AttemptLog.feed); its seconds."""
    log, spent = AttemptLog("0.5.9"), 0.0
    for lines in batches(path):
        started = time.perf_counter()
        log.feed(lines)
        spent += time.perf_counter() - started
    log.close()
    return spent


def per_line_us(function, items) -> float:
    started = time.perf_counter()
    for item in items:
        function(item)
    return (time.perf_counter() - started) / max(1, len(items)) * 1e6


def stages(path: Path) -> None:
    patterns = grammar_for("0.5.9")
    totals = {
        "read+split": 0.0,
        "parse_line": 0.0,
        "tracebacks": 0.0,
        "parse_event": 0.0,
        "excerpt": 0.0,
        "progress": 0.0,
    }
    kinds: dict[str, list[float]] = {}
    tracebacks, excerpt, progress = TracebackAssembler(), Excerpt(), AttemptProgress()
    count = 0
    started = time.perf_counter()
    for lines in batches(path):  # batch by batch, as the tailer hands them over
        totals["read+split"] += time.perf_counter() - started
        count += len(lines)
        t = time.perf_counter()
        parsed = [parse_line(i, raw) for i, raw in enumerate(lines)]
        totals["parse_line"] += time.perf_counter() - t
        t = time.perf_counter()
        ended = [tracebacks.feed(line) for line in parsed]
        totals["tracebacks"] += time.perf_counter() - t
        read = []
        for line in parsed:
            t = time.perf_counter()
            event = parse_event(line, patterns)
            spent = time.perf_counter() - t
            totals["parse_event"] += spent
            kinds.setdefault(event.kind.value if event else "(no event)", []).append(spent)
            read.append(event)
        t = time.perf_counter()
        for line, event, finished in zip(parsed, read, ended, strict=True):
            excerpt.add(line, event, finished)
        totals["excerpt"] += time.perf_counter() - t
        events = [event for event in read if event is not None]
        t = time.perf_counter()
        progress.apply(events)
        totals["progress"] += time.perf_counter() - t
        started = time.perf_counter()
    print(f"{count:,} lines; microseconds per line (timer overhead included):")
    for stage, seconds in totals.items():
        print(f"  {stage:12s} {seconds / count * 1e6:6.2f}")
    print("parse_event by line kind (share of lines, us per line):")
    for kind, spent in sorted(kinds.items(), key=lambda item: -len(item[1]))[:8]:
        print(f"  {kind:20s} {len(spent) / count:6.1%} {sum(spent) / len(spent) * 1e6:6.2f}")


def main(argv: list[str]) -> int:
    lines = int(argv[0]) if argv else 200_000
    with tempfile.TemporaryDirectory(prefix="sentinel-bench-profile-") as tmp:
        path = Path(tmp) / "sglang.log"
        write_log(path, lines)
        stages(path)
        spent = min(read_path(path) for _ in range(3))
        print(f"AttemptLog.feed, the whole path (best of 3): {spent / lines * 1e6:.2f} us per line")
        profile = cProfile.Profile()
        profile.runcall(read_path, path)
        pstats.Stats(profile).sort_stats("tottime").print_stats(15)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
