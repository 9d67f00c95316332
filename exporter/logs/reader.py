"""Lines in, events out: the log-reading half of the pipeline, with its own counters."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from exporter.logs.events import Event
from exporter.logs.grammar import grammar_for, parse_event
from exporter.logs.lines import LogLine, parse_line
from exporter.logs.tracebacks import TracebackAssembler


@dataclass
class ReaderStats:
    lines: int = 0
    matched: int = 0  # lines the grammar knows
    unknown: int = 0  # lines it does not: counted, never an error


class LogReader:
    """Turns the lines of one attempt's log into events, in order.

    ``keep_lines`` retains every parsed line (the classifier needs them as evidence); the
    daemon's live pipeline turns it off and keeps memory flat however long SGLang runs.
    """

    def __init__(self, version: str | None = None, keep_lines: bool = True) -> None:
        self._patterns = grammar_for(version)
        self._tracebacks = TracebackAssembler()
        self._keep = keep_lines
        self.lines: list[LogLine] = []
        self.stats = ReaderStats()

    def feed(self, raw_lines: Iterable[str]) -> list[Event]:
        events: list[Event] = []
        stats = self.stats
        # Locals in the loop: it runs once per line of a log that may grow for weeks.
        number, matched = stats.lines, 0
        keep, kept = self._keep, self.lines
        tracebacks, patterns = self._tracebacks, self._patterns
        for raw in raw_lines:
            number += 1
            line = parse_line(number, raw)
            if keep:
                kept.append(line)
            finished = tracebacks.feed(line)
            if finished is not None:
                events.append(finished)
            event = parse_event(line, patterns)
            if event is not None:
                matched += 1
                events.append(event)
        stats.unknown += number - stats.lines - matched
        stats.matched += matched
        stats.lines = number
        return events

    def close(self) -> list[Event]:
        finished = self._tracebacks.flush()
        return [finished] if finished else []


def read_log(text: str, version: str | None = None) -> tuple[list[LogLine], list[Event]]:
    """Read a whole log at once (the ``classify`` command, tests)."""
    reader = LogReader(version)
    events = reader.feed(split_lines(text))
    events.extend(reader.close())
    return reader.lines, events


def split_lines(text: str) -> list[str]:
    """Split on \\n and on bare \\r: tqdm redraws its progress bars with \\r."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


HEAD_BYTES = 8 << 20
TAIL_BYTES = 56 << 20


def read_log_file(path: str | Path) -> str:
    """A log file's text for classification: whole when it is small; otherwise its head (the
    startup) and its tail (the failure), so days of batch lines do not cost a scan."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size <= HEAD_BYTES + TAIL_BYTES:
            data = handle.read()
        else:
            head = handle.read(HEAD_BYTES)
            handle.seek(size - TAIL_BYTES)
            data = head + b"\n" + handle.read()
    return data.decode("utf-8", errors="replace")
