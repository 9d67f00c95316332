"""What one attempt's log has said so far, fed line batches by its tailer.

The daemon and the line-to-metric benchmark both follow a log through this one class, so
the benchmark measures the daemon's own path.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

from exporter.attempt.progress import AttemptProgress
from exporter.logs.events import EventKind
from exporter.logs.excerpt import Excerpt
from exporter.logs.reader import LogReader

# Lines after which an attempt cannot recover: 0.5.9 logs a failed bind of its HTTP port
# and then waits forever (0.5.23 after a 120 s warmup timeout). Act on the line itself.
DOOMED_BY = frozenset({EventKind.BIND_FAILED})
# Lines only a working scheduler prints. Not any line: uvicorn logs every request, the
# daemon's own probes included, so a stuck server's log never falls silent.
BATCHES = frozenset({EventKind.DECODE_BATCH, EventKind.PREFILL_BATCH})


class Fed(NamedTuple):
    matched: int  # lines the grammar knew
    unknown: int  # lines it did not
    turned: bool  # the log just said ready, or just said the attempt cannot recover


class AttemptLog:
    """The reader's state, the progress it made, the excerpt of the log that the attempt's
    classification reads when it ends (bounded, however long it ran), the first line after
    which the attempt cannot recover, when the log last grew, last moved the startup on, last
    showed a batch and said ready. Not locked itself: its owner feeds and reads it under one
    lock."""

    def __init__(self, version: str | None, clock: Callable[[], float] = time.time) -> None:
        self.excerpt = Excerpt()
        self.reader = LogReader(version, keep_lines=False, excerpt=self.excerpt)
        self.progress = AttemptProgress()
        self.doomed_by: str | None = None
        self.last_line_at: float | None = None
        self.last_batch_at: float | None = None
        self.last_progress_at: float | None = None  # a line that moved the startup forward
        self.ready_at: float | None = None  # when the log said "ready to roll"
        self._clock = clock

    def feed(self, lines: Sequence[str]) -> Fed:
        stats = self.reader.stats
        matched, unknown = stats.matched, stats.unknown
        events = self.reader.feed(lines)
        advances = self.progress.advances
        self.progress.apply(events)
        turned = False
        doom = next((e for e in events if e.kind in DOOMED_BY), None)
        if doom is not None and self.doomed_by is None:
            self.doomed_by = doom.line.raw.strip()
            turned = True
        self.last_line_at = self._clock()
        if self.progress.advances != advances:
            self.last_progress_at = self.last_line_at
        if any(event.kind in BATCHES for event in events):
            self.last_batch_at = self.last_line_at
        turned |= self._note_ready(self.last_line_at)
        return Fed(stats.matched - matched, stats.unknown - unknown, turned)

    def close(self) -> None:
        """The log ended: what the reader still held (a traceback left open) counts."""
        self.progress.apply(self.reader.close())

    def _note_ready(self, at: float) -> bool:
        """Keep when the log first said ready; True the first time."""
        if self.progress.ready and self.ready_at is None:
            self.ready_at = at
            return True
        return False
