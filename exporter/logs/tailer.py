"""Follow a log file across appends and rotations, with bounded memory.

Two layers:

* :class:`FileFollower` is synchronous and thread-free: each :meth:`FileFollower.poll`
  returns the complete lines that appeared since the previous call. It follows the file
  by identity ``(st_dev, st_ino)`` and offset, and survives rename+create, copytruncate
  and delete+recreate rotation without losing or repeating a line it could see.
* :class:`LogTailer` runs a follower in its own thread, woken by inotify (watchdog) on the
  file's directory, with a slow poll as a safety net, and hands lines to a callback.

Where a line ends, how it is decoded and how a line longer than ``max_line_bytes`` is cut:
:mod:`exporter.logs.splitter`, shared with the ``classify`` command.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from watchdog.events import (
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

from exporter.logs.splitter import DEFAULT_MAX_LINE_BYTES, LineSplitter

__all__ = ["FileFollower", "LogTailer", "TailerStats"]

log = logging.getLogger(__name__)

DEFAULT_READ_CHUNK_BYTES = 1024 * 1024
DEFAULT_MAX_BYTES_PER_POLL = 8 * 1024 * 1024
# LogTailer hands its callback batches of at most this many bytes (about 300 SGLang lines)
# when catching up on a long log: the lines and the events made from them stay in the CPU
# cache (8 MiB batches are read 20% slower, bench/README.md), and a callback that works
# under a lock holds it for a millisecond or two rather than a quarter of a second.
TAILER_BATCH_BYTES = 64 * 1024
DEFAULT_POLL_INTERVAL = 0.5


@dataclass
class TailerStats:
    """Counters of a follower. Plain ints: safe to read from another thread."""

    lines: int = 0  # lines emitted, cut ones included
    bytes: int = 0  # bytes read from the file(s)
    truncated_lines: int = 0  # lines longer than max_line_bytes, emitted cut
    rotations: int = 0  # times the followed file was left for a new one (or deleted)
    truncations: int = 0  # times the file shrank below our offset (copytruncate)
    reopen_errors: int = 0  # failed open/stat/read calls: counted, never raised


class FileFollower:
    """Read the lines newly appended to ``path`` on each :meth:`poll`. Not thread-safe.

    The file is opened at construction if it exists (from its current end when
    ``start_at_end``, e.g. when re-attaching to a log already read, dropping the rest of
    a line left unfinished there); otherwise it is opened, from its start, by the first
    poll that finds it. ``stats`` lets an owner share its counters. Memory stays bounded:
    reads are ``read_chunk_bytes`` at most, a poll reads ``max_bytes_per_poll`` at most
    (see :attr:`more_pending`), and at most ``max_line_bytes`` of a line are buffered.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        start_at_end: bool = False,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        read_chunk_bytes: int = DEFAULT_READ_CHUNK_BYTES,
        max_bytes_per_poll: int = DEFAULT_MAX_BYTES_PER_POLL,
        stats: TailerStats | None = None,
    ) -> None:
        if min(max_line_bytes, read_chunk_bytes, max_bytes_per_poll) < 1:
            raise ValueError("byte limits must be positive")
        self.path = os.path.abspath(os.fspath(path))
        self.stats = stats if stats is not None else TailerStats()
        self._read_chunk_bytes = read_chunk_bytes
        self._max_bytes_per_poll = max_bytes_per_poll
        self._fd: int | None = None
        self._ident = (0, 0)
        self._offset = 0
        self.splitter = LineSplitter(max_line_bytes, self.stats)
        self._more_pending = False
        self._closed = False
        self._open(at_end=start_at_end)

    @property
    def more_pending(self) -> bool:
        """True when the last poll stopped at ``max_bytes_per_poll`` before reaching EOF."""
        return self._more_pending

    @property
    def file_id(self) -> tuple[int, int] | None:
        """``(st_dev, st_ino)`` of the file being read, or None while none is open."""
        return self._ident if self._fd is not None else None

    def poll(self) -> list[str]:
        """Return the lines completed since the last poll. Never raises on I/O errors."""
        out: list[str] = []
        if self._closed or (self._fd is None and not self._open(at_end=False)):
            self._more_pending = False
            return out
        budget = self._max_bytes_per_poll
        while True:
            read, at_eof = self._drain(out, budget)
            budget -= read
            if not at_eof or not self._replaced():
                break
            # The writer may have appended to the old file between our EOF and the stat.
            read, at_eof = self._drain(out, budget)
            budget -= read
            if not at_eof:
                break
            self._switch(out)
            if self._fd is None:
                break
        self._more_pending = not at_eof
        return out

    def flush(self) -> list[str]:
        """Return the buffered unterminated line, if any, as a complete line."""
        out: list[str] = []
        self.splitter.flush(out)
        return out

    def close(self) -> None:
        """Release the file; later polls return nothing."""
        self._closed = True
        self._close_fd()

    def __enter__(self) -> FileFollower:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _open(self, *, at_end: bool) -> bool:
        try:
            # O_NONBLOCK: opening a FIFO put at the path must not hang the caller.
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            return False
        except OSError:
            self.stats.reopen_errors += 1
            return False
        try:
            st = os.fstat(fd)
        except OSError:
            os.close(fd)
            self.stats.reopen_errors += 1
            return False
        self._fd = fd
        self._ident = (st.st_dev, st.st_ino)
        self._offset = st.st_size if at_end else 0
        if self._offset:
            self._resume_mid_file()
        return True

    def _resume_mid_file(self) -> None:
        """Starting at EOF: if the last line there is unfinished, drop the rest of it."""
        assert self._fd is not None
        try:
            last = os.pread(self._fd, 1, self._offset - 1)
        except OSError:
            self.stats.reopen_errors += 1
            return
        self.splitter.resume_after(last)

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _drain(self, out: list[str], budget: int) -> tuple[int, bool]:
        """Read the open file up to EOF or ``budget`` bytes: (bytes read, reached EOF)."""
        assert self._fd is not None
        total = 0
        while total < budget:
            want = min(self._read_chunk_bytes, budget - total)
            try:
                data = os.pread(self._fd, want, self._offset)
            except OSError:
                self.stats.reopen_errors += 1
                return total, True
            if data:
                self._offset += len(data)
                total += len(data)
                self.stats.bytes += len(data)
                self.splitter.feed(data, out)
            if len(data) < want:
                # A short read is EOF; a size below our offset means the file was
                # truncated in place (copytruncate, or a relaunch reopening it with
                # O_TRUNC): the new content starts at 0.
                try:
                    size = os.fstat(self._fd).st_size
                except OSError:
                    self.stats.reopen_errors += 1
                    return total, True
                if size >= self._offset:
                    return total, True
                self.stats.truncations += 1
                self._offset = 0
                self.splitter.end_of_file(out)
        return total, False

    def _replaced(self) -> bool:
        """Whether the open file is done with: another file is at the path, or it was deleted."""
        assert self._fd is not None
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            # Renamed away with no successor yet: keep reading it, the writer may still
            # append until it reopens. Unlinked: nothing more can be written that we'd see.
            try:
                return os.fstat(self._fd).st_nlink == 0
            except OSError:
                self.stats.reopen_errors += 1
                return False
        except OSError:
            self.stats.reopen_errors += 1
            return False
        return (st.st_dev, st.st_ino) != self._ident

    def _switch(self, out: list[str]) -> None:
        self.splitter.end_of_file(out)
        self._close_fd()
        self.stats.rotations += 1
        self._open(at_end=False)


class _PathEventHandler(FileSystemEventHandler):
    """Wake the tailer on events about one path of the watched directory."""

    def __init__(self, path: str, wake: Callable[[], None]) -> None:
        super().__init__()
        self._path = path
        self._wake = wake

    def on_any_event(self, event: FileSystemEvent) -> None:
        if self._path in (event.src_path, event.dest_path):
            self._wake()


# Only these: watchdog 7 also reports opened/closed, and our own reads would wake us.
_WAKING_EVENTS: list[type[FileSystemEvent]] = [
    FileModifiedEvent,
    FileCreatedEvent,
    FileMovedEvent,
    FileDeletedEvent,
]


class LogTailer:
    """Follow ``path`` in a thread and call ``on_lines(lines)`` from it with each batch.

    inotify on the file's directory wakes the thread; a poll every ``poll_interval``
    seconds catches whatever inotify merged or dropped. If the observer cannot start
    (inotify limits, missing directory) or ``use_inotify`` is False, it polls only:
    :attr:`inotify_active` is False and :attr:`fallback_reason` says why. ``stop()``
    delivers what was written before it, then the unterminated last line, and joins the
    threads. An exception from ``on_lines`` is logged and the tailer goes on.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        on_lines: Callable[[list[str]], object],
        *,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        start_at_end: bool = False,
        use_inotify: bool = True,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        read_chunk_bytes: int = TAILER_BATCH_BYTES,
        max_bytes_per_poll: int = TAILER_BATCH_BYTES,
    ) -> None:
        if poll_interval <= 0:
            raise ValueError("poll_interval must be positive")
        self.path = os.path.abspath(os.fspath(path))
        self.stats = TailerStats()
        self.inotify_active = False
        self.fallback_reason: str | None = None
        self._on_lines = on_lines
        self._poll_interval = poll_interval
        self._use_inotify = use_inotify
        self._new_follower = functools.partial(
            FileFollower,
            self.path,
            start_at_end=start_at_end,
            max_line_bytes=max_line_bytes,
            read_chunk_bytes=read_chunk_bytes,
            max_bytes_per_poll=max_bytes_per_poll,
            stats=self.stats,
        )
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._observer: BaseObserver | None = None
        self._thread: threading.Thread | None = None

    def start(self, catch_up: bool = False) -> None:
        """Attach to the file (``start_at_end`` counts from here) and start following.
        ``catch_up``: first deliver what the file holds now, in the caller's thread, before
        returning (a daemon adopting a server reads its log so far before it probes it)."""
        if self._thread is not None:
            raise RuntimeError("LogTailer can be started once")
        follower = self._new_follower()
        if catch_up:
            self._catch_up(follower)
        if self._use_inotify:
            self._start_observer()
        else:
            self.fallback_reason = "inotify disabled"
        self._wake.set()  # read what is already there without waiting for an event
        self._thread = threading.Thread(
            target=self._run, args=(follower,), name=f"log-tailer:{self.path}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Deliver the remaining lines, stop watching and join the threads. Idempotent."""
        self._stopping.set()
        self._wake.set()
        if self._observer is not None:
            self._observer.stop()
            self._observer.join()
            self._observer = None
            self.inotify_active = False
        # From on_lines (our own thread) the thread finishes by itself once this returns.
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def __enter__(self) -> LogTailer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _start_observer(self) -> None:
        observer = Observer()
        handler = _PathEventHandler(self.path, self._wake.set)
        try:
            observer.schedule(
                handler, os.path.dirname(self.path), recursive=False, event_filter=_WAKING_EVENTS
            )
            observer.start()
        except Exception as exc:  # OSError from inotify; any failure here just means polling
            self.fallback_reason = f"{type(exc).__name__}: {exc}"
            log.warning("inotify unavailable for %s, polling only: %s", self.path, exc)
            return
        self._observer = observer
        self.inotify_active = True

    def _run(self, follower: FileFollower) -> None:
        try:
            while not self._stopping.is_set():
                self._wake.wait(self._poll_interval)
                # Cleared before reading, so an event arriving during the poll re-wakes us.
                self._wake.clear()
                self._catch_up(follower)
            # Everything written before stop(): after a crash the last lines matter most.
            self._catch_up(follower)
            self._deliver(follower.flush())
        except Exception:  # a bug must not silently end log reading without a trace
            log.exception("log tailer for %s crashed", self.path)
        finally:
            follower.close()

    def _catch_up(self, follower: FileFollower) -> None:
        while True:
            self._deliver(follower.poll())
            if not follower.more_pending:
                return

    def _deliver(self, lines: list[str]) -> None:
        if not lines:
            return
        try:
            self._on_lines(lines)
        except Exception:
            log.exception("on_lines callback failed for %s", self.path)
