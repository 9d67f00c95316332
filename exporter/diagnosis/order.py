"""Put an attempt's lines in the order they happened, without a collector's noise.

Cloud-log exports arrive newest first; some Kubernetes exports follow every record with a
line of their own (``2026-09-06 15:46:07  <pod name>``) that says nothing of the server. A
multi-node report pastes each node's log after the other's: the second starts back at the
group's start, and its failure may be the first of all; the kernel's lines (``dmesg -T``) or a
rank's NCCL watchdog pasted below the server's log may have come before its error.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Sequence
from datetime import datetime

from exporter.logs.lines import LogLine
from exporter.logs.tracebacks import TRACEBACK_START

_COLLECTOR_LINE = re.compile(
    r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?Z?\s+[\w.-]+$"
    r"|^@?\w+(?:\t@?\w+)+$"  # a tab-separated export's header ("@timestamp<TAB>@message")
)


# SGLang's clock going back by more than this starts another process's log pasted after the
# first's (its processes' lines interleave out of order by a second or so, never a minute).
SECTION_GAP_S = 60.0
# Logs that ran this close to each other's span ran together (one node's last lines, pasted
# first, and another's, whose failure came minutes before).
SECTION_NEAR_S = 900.0
_BEFORE_ANY_STAMP = float("-inf")
# Clocks of other writers, for lines SGLang did not stamp: the kernel's as ``dmesg -T``
# prints it, and glog's (torch's C++ and NCCL's "[E611 22:17:34.502518901 file.cpp:632]"),
# whose year is the server's. Where the clock's writer changes, another log was pasted.
_DMESG_T = re.compile(
    r"^\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (\w{3}) +(\d{1,2}) (\d\d:\d\d:\d\d) (\d{4})\]"
)
# ... in a Chinese locale ("[四 3月 19 03:12:44 2026]": the weekday, then the month's number)
_DMESG_T_ZH = re.compile(r"^\[[一二三四五六日] +(\d{1,2})月 +(\d{1,2}) (\d\d:\d\d:\d\d) (\d{4})\]")
# the kernel's lines as syslog and `journalctl -k` print them ("Nov 12 03:14:07 host kernel:")
_SYSLOG_KERNEL = re.compile(r"^(\w{3}) +(\d{1,2}) (\d\d:\d\d:\d\d) \S+ kernel: ")
_GLOG = re.compile(r"^\[?[EWIF](\d{1,2})(\d\d) (\d\d:\d\d:\d\d)\.\d+ ")  # torch: month unpadded


def in_time_order(lines: Sequence[LogLine]) -> list[LogLine]:
    kept = [line for line in lines if not _COLLECTOR_LINE.match(line.message)]
    if not _is_reversed(kept):
        return _sections_merged(kept)
    # The export's own records turned; what the paste put around them (its header, the
    # reporter's words, what the operator typed after) stays where it was.
    stamped = [i for i, line in enumerate(kept) if line.foreign_timestamp or line.timestamp]
    if not stamped:
        return kept[::-1]
    first, last = stamped[0], stamped[-1]
    return kept[:first] + kept[first : last + 1][::-1] + kept[last + 1 :]


def _sections_merged(lines: list[LogLine]) -> list[LogLine]:
    """Logs of processes that ran at the same time (the nodes of one group, the kernel),
    pasted one after another, merged by their clocks; each line keeps the time of the last
    stamped line above it, so a traceback stays whole. A log pasted after another that ran
    at another time (last week's startup) stays where it is, as does a single log."""
    sections: list[list[tuple[float, LogLine]]] = [[]]
    latest = now = _BEFORE_ANY_STAMP
    stamped = writer = None
    year = _server_year(lines)
    for line in lines:
        clock = _clock(line, year)
        if clock is not None and clock != stamped:
            stamped = clock
            source, now = clock[0], _seconds(clock[1])
            if now < latest - SECTION_GAP_S or (writer is not None and source != writer):
                sections.append([])
                latest = now
            latest, writer = max(latest, now), source
        sections[-1].append((now, line))
    if len(sections) == 1 or not _at_the_same_time(sections):
        return lines
    return [line for _, line in heapq.merge(*sections, key=lambda timed: timed[0])]


def stamped_no_later(first: LogLine, second: LogLine, lines: Sequence[LogLine]) -> bool:
    """Whether ``first`` was stamped no later than ``second``, by their writers' clocks (the
    same second included); False where either has none."""
    year = _server_year(lines)
    clocks = _clock(first, year), _clock(second, year)
    return None not in clocks and _seconds(clocks[0][1]) <= _seconds(clocks[1][1])


def stamped_later(first: LogLine, second: LogLine, lines: Sequence[LogLine]) -> bool:
    """Whether ``first`` was stamped after ``second`` by their writers' clocks; False where
    either has none."""
    year = _server_year(lines)
    clocks = _clock(first, year), _clock(second, year)
    return None not in clocks and _seconds(clocks[0][1]) > _seconds(clocks[1][1])


def _server_year(lines: Sequence[LogLine]) -> str | None:
    """The year of SGLang's stamps: the kernel's syslog lines and glog's leave it out."""
    return next((line.timestamp[:4] for line in lines if line.timestamp is not None), None)


def _at_the_same_time(sections: list[list[tuple[float, LogLine]]]) -> bool:
    """Whether each section ran while the first did (by the times of its stamped lines; the
    lines before the first stamp have none)."""
    first = [time for time, _ in sections[0] if time != _BEFORE_ANY_STAMP]
    start, end = min(first) - SECTION_NEAR_S, max(first) + SECTION_NEAR_S
    return all(
        min(times) < end and max(times) > start
        for times in ([time for time, _ in section] for section in sections[1:])
    )


def _clock(line: LogLine, year: str | None) -> tuple[str, str] | None:
    """Who stamped the line, and when, as an ISO time."""
    if line.timestamp is not None:
        return "sglang", line.timestamp
    message = line.message
    if not message[:1].isalpha() and not message.startswith("["):
        return None
    try:
        kernel = _DMESG_T.match(message)
        if kernel is not None:
            month, day, time, kernel_year = kernel.groups()
            return "kernel", _named_month(kernel_year, month, day, time)
        kernel = _DMESG_T_ZH.match(message)
        if kernel is not None:
            month, day, time, kernel_year = kernel.groups()
            return "kernel", f"{kernel_year}-{int(month):02d}-{int(day):02d} {time}"
        syslog = _SYSLOG_KERNEL.match(message)
        if syslog is not None and year is not None:
            return "kernel", _named_month(year, *syslog.groups())
        glog = _GLOG.match(message)
        if glog is not None and year is not None:
            month, day, time = glog.groups()
            stamp = f"{year}-{int(month):02d}-{day} {time}"
            datetime.fromisoformat(stamp)  # a line that only looks like glog's: no date
            return "glog", stamp
    except ValueError:
        pass
    return None


def _named_month(year: str, month: str, day: str, time: str) -> str:
    """An ISO time from a date written with the month's name ("Aug 28"), as the kernel does."""
    return datetime.strptime(f"{year} {month} {day} {time}", "%Y %b %d %H:%M:%S").isoformat(sep=" ")


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def _is_reversed(lines: Sequence[LogLine]) -> bool:
    """Newest-first exports: timestamps run backwards, or tracebacks read bottom-up."""
    score = 0
    previous = None
    for line in lines:
        stamp = line.foreign_timestamp or line.timestamp
        if stamp is not None:
            stamp = stamp[:19].replace("T", " ")  # a collector's RFC 3339 beside SGLang's
            # within a day: a jump to another day is another clock's lines, not their order
            if previous is not None and stamp != previous and stamp[:10] == previous[:10]:
                score += 1 if stamp < previous else -1
            previous = stamp
    for i, line in enumerate(lines):
        if line.message.endswith(TRACEBACK_START):
            after = lines[i + 1].message if i + 1 < len(lines) else ""
            before = lines[i - 1].message if i > 0 else ""
            score += (before.startswith('File "') and not after.startswith('File "')) * 2
            score -= after.startswith('File "') * 2
    return score > 0
