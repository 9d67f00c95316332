"""Reassemble Python tracebacks, which SGLang logs as one record spread over many lines.

Only the first line of ``Scheduler hit an exception: Traceback ...`` carries the
``[time TPn]`` prefix; the frames and the exception lines follow unprefixed. A traceback is
therefore owned by the process (TP rank) of the line that opened it and ends at the next
prefixed line, at a new traceback that is not chained to it, or at the end of input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType

from exporter.logs.events import Event, EventKind
from exporter.logs.lines import LogLine

TRACEBACK_START = "Traceback (most recent call last):"
# Python's words between the tracebacks of a chain: an exception raised while handling
# another, or one raised from another
HANDLED = "During handling of the above exception"
DIRECT_CAUSE = "The above exception was the direct cause"
# warnings.warn's line: "/path/torch/cuda/__init__.py:182: UserWarning: CUDA initialization: ..."
PY_WARNING = re.compile(r"\.py:\d+: \w*Warning: ")
_CHAIN_MARKERS = (
    f"{HANDLED}, another exception occurred",
    f"{DIRECT_CAUSE} of the following exception",
)
# "torch.OutOfMemoryError: CUDA out of memory..." / "KeyError: 'lm_head.weight'" / "AssertionError"
_EXCEPTION_TYPE = (
    r"(?:(?:[A-Za-z_]\w*\.)*(?:(?:[A-Z]\w*)?(?:Error|Exception|Exit|Interrupt|Timeout)"
    r"|OutOfResources|KeyboardInterrupt|StopIteration)"
    # the socket module's own, named in lower case ("socket.gaierror: [Errno -2] ...")
    r"|socket\.(?:gaierror|herror|timeout))"
)
EXCEPTION_LINE = re.compile(rf"^(?P<type>{_EXCEPTION_TYPE})(?::\s?(?P<message>.*))?$")
# Where a traceback's frames end, the line names the exception whatever its class is called
# ("interegular.utils.simple_parser.NoMatch: ..."); elsewhere that shape is as often a
# logger's name before its message.
RAISED_LINE = re.compile(
    rf"^(?P<type>{_EXCEPTION_TYPE}|(?:[a-z_]\w*\.)+[A-Z][A-Za-z]+(?=: ))(?::\s?(?P<message>.*))?$"
)
MAX_LINES = 500  # a traceback longer than this is kept whole in the log, cut here


@dataclass
class _OpenTraceback:
    start: LogLine
    lines: list[str] = field(default_factory=list)
    exceptions: list[tuple[str, str]] = field(default_factory=list)  # (type, message), in order
    frames: int = 0
    chained: bool = False  # the last line was a chain marker: the next traceback continues

    def to_event(self) -> Event:
        fields: dict[str, str | int] = {"line_count": len(self.lines), "frame_count": self.frames}
        if self.exceptions:
            # The first exception of a chain is the cause, the last one the wrapper raised.
            fields["cause_type"], fields["cause_message"] = self.exceptions[0]
            fields["exception_type"], fields["exception_message"] = self.exceptions[-1]
        fields["text"] = "\n".join(self.lines)
        return Event(EventKind.TRACEBACK, self.start, MappingProxyType(fields))


class TracebackAssembler:
    """Feed every line in order; get TRACEBACK events as each traceback ends."""

    def __init__(self) -> None:
        self._open: _OpenTraceback | None = None

    def feed(self, line: LogLine) -> Event | None:
        message = line.message
        starts = message.endswith(TRACEBACK_START)
        if self._open is not None:
            continues = not line.has_sglang_prefix and not (starts and not self._open.chained)
            if continues:
                self._append(line)
                return None
            finished = self.flush()
        else:
            finished = None
        if starts:
            self._open = _OpenTraceback(start=line, lines=[line.raw.rstrip()])
        return finished

    def flush(self) -> Event | None:
        tb, self._open = self._open, None
        return tb.to_event() if tb else None

    def _append(self, line: LogLine) -> None:
        tb = self._open
        assert tb is not None
        message = line.message
        if len(tb.lines) < MAX_LINES:
            tb.lines.append(line.raw.rstrip())
        if message.startswith('File "'):
            tb.frames += 1
        elif message.startswith(_CHAIN_MARKERS):
            tb.chained = True
            return
        else:
            match = RAISED_LINE.match(message)
            if match:
                tb.exceptions.append((match.group("type"), match.group("message") or ""))
        if message and message != TRACEBACK_START:
            tb.chained = False
