"""Put an attempt's lines in the order they happened, without a collector's noise.

Cloud-log exports arrive newest first; some Kubernetes exports follow every record with a
line of their own (``2026-09-06 15:46:07  <pod name>``) that says nothing of the server. A
multi-node report pastes each node's log after the other's: the second starts back at the
group's start, and its failure may be the first of all.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Sequence
from datetime import datetime

from exporter.logs.lines import LogLine
from exporter.logs.tracebacks import TRACEBACK_START

_COLLECTOR_LINE = re.compile(r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?Z?\s+[\w.-]+$")


# SGLang's clock going back by more than this starts another process's log pasted after the
# first's (its processes' lines interleave out of order by a second or so, never a minute).
SECTION_GAP_S = 60.0
_BEFORE_ANY_STAMP = float("-inf")


def in_time_order(lines: Sequence[LogLine]) -> list[LogLine]:
    kept = [line for line in lines if not _COLLECTOR_LINE.match(line.message)]
    return kept[::-1] if _is_reversed(kept) else _sections_merged(kept)


def _sections_merged(lines: list[LogLine]) -> list[LogLine]:
    """Logs of processes that ran at the same time (the nodes of one group), pasted one
    after another, merged by SGLang's clock; each line keeps the time of the last stamped
    line above it, so a traceback stays whole. A log pasted after another that ran at
    another time (last week's startup) stays where it is, as does a single log."""
    sections: list[list[tuple[float, LogLine]]] = [[]]
    latest = now = _BEFORE_ANY_STAMP
    stamp = None
    for line in lines:
        if line.timestamp is not None and line.timestamp != stamp:
            stamp, now = line.timestamp, _seconds(line.timestamp)
            if now < latest - SECTION_GAP_S:
                sections.append([])
                latest = now
            latest = max(latest, now)
        sections[-1].append((now, line))
    if len(sections) == 1 or not _at_the_same_time(sections):
        return lines
    return [line for _, line in heapq.merge(*sections, key=lambda timed: timed[0])]


def _at_the_same_time(sections: list[list[tuple[float, LogLine]]]) -> bool:
    """Whether each section ran while the first did (by the times of its stamped lines; the
    lines before the first stamp have none)."""
    first = [time for time, _ in sections[0] if time != _BEFORE_ANY_STAMP]
    start, end = min(first), max(first)
    return all(
        min(times) < end and max(times) > start
        for times in ([time for time, _ in section] for section in sections[1:])
    )


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def _is_reversed(lines: Sequence[LogLine]) -> bool:
    """Newest-first exports: timestamps run backwards, or tracebacks read bottom-up."""
    score = 0
    previous = None
    for line in lines:
        stamp = line.foreign_timestamp or line.timestamp
        if stamp is not None:
            if previous is not None and stamp != previous:
                score += 1 if stamp < previous else -1
            previous = stamp
    for i, line in enumerate(lines):
        if line.message.endswith(TRACEBACK_START):
            after = lines[i + 1].message if i + 1 < len(lines) else ""
            before = lines[i - 1].message if i > 0 else ""
            score += (before.startswith('File "') and not after.startswith('File "')) * 2
            score -= after.startswith('File "') * 2
    return score > 0
