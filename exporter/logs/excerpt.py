"""What classification needs of a log, kept in bounded memory as the log is read.

A classifier reads a whole log, but what it can use is near the failure: the lines that
look like errors and what surrounds them, the startup, the end, and the lifecycle events
with their line numbers. :class:`Excerpt` is fed every line (with the events read from
it) and keeps only that, however long the server ran:

- the first ``HEAD_LINES`` lines (where the version and the startup are);
- the last ``CONTEXT_LINES`` lines (how the log ended);
- every error-shaped line (:func:`error_shaped`) with the ``CONTEXT_LINES`` lines before
  and after it; overlapping windows make one region, cut at ``REGION_LINES`` lines or
  ``REGION_BYTES`` bytes (each piece carries its own window before it). The regions kept
  are the first ones, up to ``FIRST_READ`` lines other than batch lines and ``FIRST_BYTES``
  bytes in all, and the last ones, up to ``LAST_READ`` and ``LAST_BYTES``: classifying a
  line costs tens of microseconds unless it is a batch line (the classifier skips those),
  so these budgets bound the time a decision takes; the root cause is the earliest
  decisive line and a failure ends the log, so when an attempt logs more errors than fit
  (an error storm, a line repeated forever, garbage) the middle goes;
- per event kind the first ``FIRST_PER_KIND`` events and the last one, and, when a region
  opens, the last event of each kind before it (the state the server was in); batch lines
  are events too, so days of them cost a few.

The window is as wide as the furthest a classifier looks from a line (the frames of a
traceback, up to 400 lines before its exception): inside it the excerpt is the log itself,
line for line, so classifying the excerpt gives what classifying the whole log gives.
Lines keep their numbers in the log. Nothing here knows the classifier's rules: the shape
test is deliberately broad, and a test checks that every signature line is error-shaped.
"""

from __future__ import annotations

import re
from collections import deque

from exporter.logs.events import Event, EventKind
from exporter.logs.lines import LogLine
from exporter.logs.literals import KILLED_TRANSLATED, any_of
from exporter.logs.tracebacks import EXCEPTION_LINE

HEAD_LINES = 200
CONTEXT_LINES = 400
REGION_LINES = 1000
REGION_BYTES = 512 << 10
FIRST_READ = 150
LAST_READ = 300
FIRST_BYTES = LAST_BYTES = 1 << 20
FIRST_PER_KIND = 64
# Kinds whose lines are never error-shaped: the shape test is skipped for them (most of a
# serving log is batch lines, and the test is the costly part of keeping an excerpt).
ROUTINE = frozenset({EventKind.DECODE_BATCH, EventKind.PREFILL_BATCH})

# Lower-case fragments of error-shaped text: failure words, what Python, PyTorch, CUDA,
# NCCL and the kernel print when something breaks, traceback and stack-dump lines, and
# SGLang's teardown. Broad on purpose: a line kept for nothing costs a little memory, a
# line missed may be the root cause.
# fmt: off
VOCABULARY = (
    # failure words
    "error", "exception", "fail", "fatal", "critical", "abort", "panic", "crash", "died",
    "dead", "kill", "lost", "missing", "wrong", "invalid", "illegal", "corrupt", "violat",
    "warn", "deprecat", "ignore", "assert", "must", "require", "mismatch", "not match",
    "unknown", "unrecogni", "unsupported", "not supported", "not implemented", "not found",
    "no such", "not a ", "does not", "doesn't", "cannot", "can't", "could not",
    "couldn't", "unable", "denied", "refused", "unreachable", "unavailable",
    "not available", "is available", "busy", "in use", "already", "disconnect", "by peer",
    "timed out", "timeout", "hang", "stuck", "deadlock", "interrupt", "terminat",
    # resources
    "out of memory", "out of resource", "oom", "not enough", "enought", "insufficient",
    "exceed", "exhaust", "overflow", "too small", "too large", "too many", "leak",
    "retract", "divisible", "/dev/shm", "shared memory",
    # Python, the kernel, CUDA, NCCL, compilers
    "traceback", 'file "', "errno", "eaddr", "econn", "enomem", "enospc", "epipe",
    "code: -", "signal", "sigterm", "sigquit", "sigint", "segmentation", "core dump",
    "exit code", "exit status", "with code", "exited (", "misaligned", "segfault",
    "*** sig", "what():", "terminate called", "cuda", "nccl", "c10d", "gloo", "tcpstore",
    "no kernel", "ninja", "nvcc", "ptxas",
    # a watchdog's report before its timeout line
    "debug info",
    # a shell's "Killed" in another language
    *KILLED_TRANSLATED,
)
# fmt: on


_SHAPED = any_of(VOCABULARY)
# A glog error or fatal record ("E0505 12:00:00.123456 ..."): its text may be any words.
_GLOG_ERROR = re.compile(r"[EF]\d{4} \d\d:\d\d:\d\d")


def error_shaped(line: LogLine) -> bool:
    """Whether a line looks like part of a failure: an exception line, or error words in
    its message or in a collector's prefix (a cloud export's ``ERROR``). A request the
    server answered below 500 is not: access lines are a sixth of a serving log, and this
    test is the costly part of keeping an excerpt."""
    message = line.message
    answered = message.find('HTTP/1.1" ')
    if answered >= 0 and "1" <= message[answered + 10 : answered + 11] <= "4":
        return False
    if (
        _SHAPED.search(message.lower()) is not None
        or EXCEPTION_LINE.match(message)
        or _GLOG_ERROR.match(message)
    ):
        return True
    return line.foreign_timestamp is not None and _SHAPED.search(line.raw.lower()) is not None


# One line and the event read from it (or None); a traceback's event is a record of its
# own, with the line that ended the traceback (it starts earlier).
Record = tuple[LogLine, Event | None]


class Excerpt:
    """Feed :meth:`add` every line in order (then :meth:`close`); :meth:`read` gives the
    excerpt, lines and events in the log's order, at any time."""

    def __init__(self) -> None:
        self._head: list[Record] = []
        # The window before the next error line, and the end of the log: this line too.
        self._context: deque[Record] = deque(maxlen=CONTEXT_LINES + 1)
        self._region: list[Record] | None = None
        self._region_bytes = 0
        self._after = 0  # lines the open region still takes after its last error line
        self._first: list[list[Record]] = []
        self._first_read = self._first_bytes = 0
        self._first_full = False
        self._last: deque[tuple[list[Record], int, int]] = deque()  # (region, bytes, read)
        self._last_read = self._last_bytes = 0
        self._per_kind: dict[EventKind, int] = {}
        self._firsts: list[Record] = []
        self._latest: dict[EventKind, Record] = {}
        self._closing: list[Event] = []  # tracebacks still open when the log ended

    def add(self, line: LogLine, event: Event | None, ended: Event | None = None) -> None:
        """``event``: what the grammar read from ``line``; ``ended``: a traceback that
        ``line`` ended. Runs once per line of logs that grow for weeks: kept lean."""
        if ended is not None:
            self._record((line, ended), False)
        if event is None:
            self._record((line, None), error_shaped(line))
            return
        record = (line, event)
        kind = event.kind
        self._remember(record, kind)
        if kind not in ROUTINE or self._region is not None or line.number <= HEAD_LINES:
            self._place(record, kind not in ROUTINE and error_shaped(line))
        else:  # a batch line between regions: it only passes through the window
            self._context.append(record)

    def close(self, events: list[Event]) -> None:
        """The events the reader emitted at the end of the log (an unfinished traceback)."""
        self._closing += events

    def _record(self, record: Record, shaped: bool) -> None:
        """A record without its own event bookkeeping done (no event, or a traceback)."""
        event = record[1]
        if event is not None:
            self._remember(record, event.kind)
        self._place(record, shaped)

    def _remember(self, record: Record, kind: EventKind) -> None:
        """The first events of each kind and its latest one, wherever they fall."""
        seen = self._per_kind.get(kind, 0)
        if seen < FIRST_PER_KIND:
            self._per_kind[kind] = seen + 1
            self._firsts.append(record)
        self._latest[kind] = record

    def _place(self, record: Record, shaped: bool) -> None:
        """Into the head, the window, the open region; a region opens or closes here."""
        line = record[0]
        if line.number <= HEAD_LINES:
            self._head.append(record)
        self._context.append(record)
        region = self._region
        if region is None:
            if shaped:
                self._open()
                self._after = CONTEXT_LINES
            return
        region.append(record)
        self._region_bytes += len(line.raw)
        if shaped:
            self._after = CONTEXT_LINES
        else:
            self._after -= 1
            if self._after <= 0:
                self._close()
                return
        if len(region) >= REGION_LINES or self._region_bytes >= REGION_BYTES:
            self._close()
            self._open()  # the rest of the window, a piece with its own window before

    def _open(self) -> None:
        """A region begins with the lines before it and the state the server was in (the
        last event of each kind)."""
        region = [*self._latest.values(), *self._context]
        self._region = region
        self._region_bytes = sum(len(line.raw) for line, _ in region)

    def _close(self) -> None:
        region, size = self._region, self._region_bytes
        assert region is not None
        self._region = None
        read = sum(1 for _, event in region if event is None or event.kind not in ROUTINE)
        if (
            not self._first_full
            and self._first_read + read <= FIRST_READ
            and self._first_bytes + size <= FIRST_BYTES
        ):
            self._first.append(region)
            self._first_read += read
            self._first_bytes += size
            return
        self._first_full = True  # the first regions are the earliest: none after a gap
        self._last.append((region, size, read))
        self._last_read += read
        self._last_bytes += size
        while len(self._last) > 1 and (
            self._last_read > LAST_READ or self._last_bytes > LAST_BYTES
        ):
            _, dropped_size, dropped_read = self._last.popleft()
            self._last_read -= dropped_read
            self._last_bytes -= dropped_size

    def _records(self) -> list[Record]:
        """Every record kept, each once, in the order the reader emitted them."""
        groups: list = [self._head, self._firsts, self._context, self._latest.values()]
        groups += self._first
        groups += [region for region, _, _ in self._last]
        if self._region is not None:
            groups.append(self._region)
        unique = {id(record): record for group in groups for record in group}
        # At one line, the traceback it ended was emitted before the line's own event.
        return sorted(
            unique.values(),
            key=lambda r: (r[0].number, r[1] is None or r[1].kind is not EventKind.TRACEBACK),
        )

    def read(self) -> tuple[list[LogLine], list[Event]]:
        """The lines kept (with the lines of the events kept) and the events kept."""
        records = self._records()
        events = [event for _, event in records if event is not None] + self._closing
        by_number = {line.number: line for line, _ in records}
        for event in events:
            by_number.setdefault(event.line.number, event.line)
        return [by_number[number] for number in sorted(by_number)], events

    @property
    def held(self) -> int:
        """Records held: what the excerpt's memory grows with."""
        return len(self._records())
