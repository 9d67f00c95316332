"""Bytes in, lines out: the one place that decides where a log line ends.

Lines end at ``\\n``, ``\\r`` (tqdm redraws its bar with a bare ``\\r``) or ``\\r\\n``
(one terminator, also when a read ends between the two). Bytes are decoded as UTF-8 with
``errors="replace"``. A line longer than ``max_line_bytes`` is emitted cut to that length
and the rest of it is dropped, so memory stays bounded however long a line grows. The
tailer (a followed file) and the ``classify`` command (a file or a pipe read once) both
split through :class:`LineSplitter`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO, Protocol

DEFAULT_MAX_LINE_BYTES = 64 * 1024
READ_BYTES = 1024 * 1024


class LineCounts(Protocol):
    lines: int
    truncated_lines: int


class SplitCounts:
    """The counters of a splitter that nobody shares."""

    def __init__(self) -> None:
        self.lines = 0  # lines emitted, cut ones included
        self.truncated_lines = 0  # lines longer than max_line_bytes, emitted cut


class LineSplitter:
    """Feed bytes as they are read; get the lines they complete."""

    def __init__(self, max_line_bytes: int, counts: LineCounts) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be positive")
        self.counts = counts
        self._max_line_bytes = max_line_bytes
        self._partial = b""  # start of the current line, never longer than max_line_bytes
        self._discarding = False  # inside a line already emitted cut: drop up to its end
        self._pending_cr = False  # last byte read was \r: a leading \n next is its pair

    @property
    def buffered_bytes(self) -> int:
        """Bytes of the unfinished line held: at most ``max_line_bytes``."""
        return len(self._partial)

    def resume_after(self, last_byte: bytes) -> None:
        """Starting mid-file after ``last_byte``: the rest of an unfinished line there is
        dropped (its head was before our start: its tail alone would mislead a parser)."""
        self._pending_cr = last_byte == b"\r"
        self._discarding = last_byte not in (b"\n", b"\r")

    def feed(self, data: bytes, out: list[str]) -> None:
        if self._pending_cr and data[:1] == b"\n":
            data = data[1:]
        self._pending_cr = data[-1:] == b"\r"
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if self._discarding:
            end = data.find(b"\n")
            if end < 0:
                return
            self._discarding = False
            data = data[end + 1 :]
        lines = data.split(b"\n")
        tail = lines.pop()
        if lines:
            if self._partial:
                lines[0] = self._partial + lines[0]
                self._partial = b""
            limit = self._max_line_bytes
            if max(map(len, lines)) > limit:
                self.counts.truncated_lines += sum(len(line) > limit for line in lines)
                lines = [line[:limit] for line in lines]
            out.extend([line.decode("utf-8", "replace") for line in lines])
            self.counts.lines += len(lines)
        if tail:
            self._append_partial(tail, out)

    def flush(self, out: list[str]) -> None:
        """The buffered unterminated line, if any, as a complete line."""
        if self._partial:
            out.append(self._partial.decode("utf-8", "replace"))
            self.counts.lines += 1
            self._partial = b""
        self._discarding = False

    def end_of_file(self, out: list[str]) -> None:
        """An unterminated tail is a whole line: what comes next is another file's start."""
        self.flush(out)
        self._pending_cr = False

    def _append_partial(self, piece: bytes, out: list[str]) -> None:
        room = self._max_line_bytes - len(self._partial)
        if len(piece) <= room:
            self._partial += piece
            return
        # The line outgrew the cap: emit its head now, drop the rest up to its terminator.
        out.append((self._partial + piece[:room]).decode("utf-8", "replace"))
        self.counts.lines += 1
        self.counts.truncated_lines += 1
        self._partial = b""
        self._discarding = True


def line_batches(
    stream: BinaryIO,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    read_bytes: int = READ_BYTES,
    counts: LineCounts | None = None,
) -> Iterator[list[str]]:
    """The lines of a stream read once to its end (a file, a pipe), a read's worth at a time."""
    splitter = LineSplitter(max_line_bytes, counts if counts is not None else SplitCounts())
    while True:
        data = stream.read(read_bytes)
        if not data:
            break
        out: list[str] = []
        splitter.feed(data, out)
        if out:
            yield out
    out = []
    splitter.end_of_file(out)
    if out:
        yield out
