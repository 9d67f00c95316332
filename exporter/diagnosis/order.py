"""Put an attempt's lines in the order they happened, without a collector's noise.

Cloud-log exports arrive newest first; some Kubernetes exports follow every record with a
line of their own (``2026-09-06 15:46:07  <pod name>``) that says nothing of the server.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from exporter.logs.lines import LogLine
from exporter.logs.tracebacks import TRACEBACK_START

_COLLECTOR_LINE = re.compile(r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?Z?\s+[\w.-]+$")


def in_time_order(lines: Sequence[LogLine]) -> list[LogLine]:
    kept = [line for line in lines if not _COLLECTOR_LINE.match(line.message)]
    return kept[::-1] if _is_reversed(kept) else kept


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
