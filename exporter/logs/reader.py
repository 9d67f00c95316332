"""Lines in, events out: the log-reading half of the pipeline, with its own counters."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import BinaryIO

from exporter.logs.events import Event
from exporter.logs.excerpt import Excerpt
from exporter.logs.grammar import grammar_for, parse_event
from exporter.logs.lines import LogLine, NodeLabels, parse_line
from exporter.logs.splitter import DEFAULT_MAX_LINE_BYTES, line_batches
from exporter.logs.tracebacks import TracebackAssembler
from exporter.logs.unwrap import Rejoined, Rejoiner, wrap_width

WRAP_SAMPLE_ROWS = 5000


@dataclass
class ReaderStats:
    lines: int = 0
    matched: int = 0  # lines the grammar knows
    unknown: int = 0  # lines it does not: counted, never an error


class LogReader:
    """Turns the lines of one attempt's log into events, in order.

    ``keep_lines`` retains every parsed line (the classifier needs them as evidence);
    ``excerpt`` keeps, in bounded memory, what classification needs of them (the daemon's
    live pipeline, and ``classify`` on a file of any size). ``wrap_width`` is where a paste
    was hard-wrapped (unwrap.wrap_width): its rows are rejoined into records.
    """

    def __init__(
        self,
        version: str | None = None,
        keep_lines: bool = True,
        excerpt: Excerpt | None = None,
        wrap_width: int | None = None,
    ) -> None:
        self._patterns = grammar_for(version)
        self._tracebacks = TracebackAssembler()
        self._keep = keep_lines
        self.lines: list[LogLine] = []
        self.excerpt = excerpt
        self.stats = ReaderStats()
        self._rejoiner = Rejoiner(wrap_width) if wrap_width else None
        self._nodes = NodeLabels()

    def feed(self, raw_lines: Iterable[str]) -> list[Event]:
        if self._rejoiner is not None:
            return self._feed(self._rejoiner.feed(raw_lines))
        return self._feed(raw_lines)

    def _feed(self, raw_lines: Iterable[str | Rejoined]) -> list[Event]:
        events: list[Event] = []
        stats = self.stats
        # Locals in the loop: it runs once per line of a log that may grow for weeks.
        number, matched, continued = stats.lines, 0, 0
        keep, kept = self._keep, self.lines
        tracebacks, patterns = self._tracebacks, self._patterns
        excerpt = self.excerpt.add if self.excerpt is not None else None
        rejoined, nodes = Rejoined, self._nodes
        for raw in raw_lines:
            number += 1
            if raw.__class__ is rejoined:  # numbered and shown as its first row
                line = parse_line(number, raw.text, nodes)
                line.raw = raw.first
                number += raw.rows - 1
                continued += raw.rows - 1  # rows of a record: known or not with it
            else:
                line = parse_line(number, raw, nodes)
            if keep:
                kept.append(line)
            finished = tracebacks.feed(line)
            if finished is not None:
                events.append(finished)
            event = parse_event(line, patterns)
            if event is not None:
                matched += 1
                events.append(event)
            if excerpt is not None:
                excerpt(line, event, finished)
        stats.unknown += number - stats.lines - continued - matched
        stats.matched += matched
        stats.lines = number
        return events

    def close(self) -> list[Event]:
        events = self._feed(self._rejoiner.close()) if self._rejoiner is not None else []
        finished = self._tracebacks.flush()
        if finished:
            events.append(finished)
        if self.excerpt is not None:
            self.excerpt.close(events)
        return events


def read_log(text: str, version: str | None = None) -> tuple[list[LogLine], list[Event]]:
    """Read a whole log at once, every line kept (tests; the whole-file classification
    that the excerpt is tested against)."""
    rows = split_lines(text)
    reader = LogReader(version, wrap_width=wrap_width(rows))
    events = reader.feed(rows)
    events.extend(reader.close())
    return reader.lines, events


def split_lines(text: str) -> list[str]:
    """Split on \\n and on bare \\r: tqdm redraws its progress bars with \\r."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def read_excerpt(
    stream: BinaryIO, version: str | None = None, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> tuple[Excerpt, ReaderStats]:
    """Read a log once, to its end, keeping only its excerpt: a file of any size (or a
    pipe) in bounded memory."""
    excerpt = Excerpt()
    batches = line_batches(stream, max_line_bytes)
    sample: list[str] = []  # the first rows, to tell whether the paste was hard-wrapped
    for batch in batches:
        sample.extend(batch)
        if len(sample) >= WRAP_SAMPLE_ROWS:
            break
    reader = LogReader(version, keep_lines=False, excerpt=excerpt, wrap_width=wrap_width(sample))
    reader.feed(sample)
    for batch in batches:
        reader.feed(batch)
    reader.close()
    return excerpt, reader.stats
