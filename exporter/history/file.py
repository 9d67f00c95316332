"""The history file of one state directory: durable appends, and reads that parse only
what was appended since the last one."""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from exporter.history.merge import Merged
from exporter.history.records import HistoryRead

HISTORY_FILE = "attempts.jsonl"
_HEAD_BYTES = 256  # of the first record: its type, attempt and time come first


@dataclass(frozen=True)
class _Resume:
    """Where the last read stopped: the file, by inode and first bytes; the offset of the
    end of its last complete line, and that line; what the lines merged into."""

    inode: int
    head: bytes
    offset: int
    last_line: bytes
    merged: Merged


class HistoryWriteError(Exception):
    """A record could not be made durable; the file is left as it was."""

    def __init__(self, path: Path, error: OSError) -> None:
        super().__init__(f"cannot write the attempt history {path}: {error.strerror or error}")
        self.path = path
        self.error = error


class History:
    """The history file of one state directory. One daemon writes it at a time, and each
    History is read from one thread (it keeps where its last read stopped)."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / HISTORY_FILE
        self._last: _Resume | None = None

    def append(self, record: Mapping[str, object]) -> None:
        """Write one record durably, or raise HistoryWriteError and leave the file as it was."""
        # default=str: a Path in a record (the log file) is written as its text.
        line = (json.dumps(dict(record), default=str) + "\n").encode("utf-8")
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as error:
            raise HistoryWriteError(self.path, error) from error
        try:
            size = os.fstat(fd).st_size
            # Close a line a killed daemon left half written, in the same single write.
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line
            try:
                written = os.write(fd, line)
                if written != len(line):
                    raise OSError(errno.EIO, f"short write: {written} of {len(line)} bytes")
                os.fsync(fd)
                if size == 0:  # a new file: make its directory entry durable too
                    _fsync_dir(self.state_dir)
            except OSError:
                with contextlib.suppress(OSError):  # what stays is a truncated line at worst
                    os.ftruncate(fd, size)
                raise
        except OSError as error:
            raise HistoryWriteError(self.path, error) from error
        finally:
            os.close(fd)

    def read(self) -> HistoryRead:
        """The attempts so far; a missing file is an empty history. OSError if unreadable.

        Only the bytes appended since the last read are parsed (the decision after every
        crash reads the history, which only grows); another file in its place, one that
        shrank or one rewritten is read from the start."""
        try:
            with open(self.path, "rb") as handle:
                inode = os.fstat(handle.fileno()).st_ino
                resumed = self._resumed(handle, inode)
                merged = resumed.merged if resumed else Merged()
                offset = resumed.offset if resumed else 0
                handle.seek(offset)
                data = handle.read()
        except FileNotFoundError:
            self._last = None
            return HistoryRead(attempts=[], corrupt_lines=0, warnings=[])
        self._last = None  # until the merge has taken the new lines
        complete = data.rfind(b"\n") + 1
        merged.feed(data[:complete])
        if complete:  # the last complete line: the new bytes start at a line's start
            last_line = data[data.rfind(b"\n", 0, complete - 1) + 1 : complete]
            head = resumed.head if resumed else data[: min(complete, _HEAD_BYTES)]
            self._last = _Resume(inode, head, offset + complete, last_line, merged)
        elif resumed:
            self._last = resumed
        if complete == len(data):
            return merged.read()
        # A last line with no newline yet: read it, but parse it again next time.
        with_tail = merged.copy()
        with_tail.feed(data[complete:])
        return with_tail.read()

    def _resumed(self, handle: BinaryIO, inode: int) -> _Resume | None:
        """The last read, when this is still its file (the same inode, first bytes and line
        before where that read stopped: an inode number may be reused, and a file rewritten
        in place may keep its first record); else None, to read from the start."""
        last = self._last
        if last is None or inode != last.inode or handle.read(len(last.head)) != last.head:
            return None
        handle.seek(last.offset - len(last.last_line))
        return last if handle.read(len(last.last_line)) == last.last_line else None

    def next_attempt_id(self) -> int:
        return max((record.attempt for record in self.read().attempts), default=0) + 1


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
