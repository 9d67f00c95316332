"""Tests for exporter.logs.tailer: FileFollower (manual polls) and LogTailer (thread)."""

from __future__ import annotations

import os
import shutil
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.logs import tailer as tailer_mod
from exporter.logs.tailer import FileFollower, LogTailer

DEADLINE_S = 10.0


@pytest.fixture(autouse=True)
def _no_leaked_tailer_threads() -> Iterator[None]:
    yield
    leaked = [t.name for t in threading.enumerate() if t.name.startswith("log-tailer:")]
    assert not leaked, f"tailer threads left running: {leaked}"


def wait_until(cond: Callable[[], bool], what: str, timeout: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(data)


class Collector:
    """Thread-safe sink for on_lines, usable as the LogTailer callback."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.lines: list[str] = []

    def __call__(self, lines: list[str]) -> None:
        with self._lock:
            self.lines.extend(lines)

    def snapshot(self) -> list[str]:
        with self._lock:
            return list(self.lines)

    def count(self) -> int:
        with self._lock:
            return len(self.lines)


# --- FileFollower: basics -------------------------------------------------------------


def test_appended_lines_arrive_once_in_order(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    path.write_bytes(b"one\ntwo\n")
    with FileFollower(path) as f:
        assert f.poll() == ["one", "two"]
        assert f.poll() == []
        append(path, b"three\nfour\n")
        assert f.poll() == ["three", "four"]
        assert f.poll() == []
        assert f.stats.lines == 4
        assert f.stats.bytes == len(b"one\ntwo\nthree\nfour\n")


def test_partial_line_is_buffered_until_its_terminator(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    with FileFollower(path) as f:
        append(path, b"hel")
        assert f.poll() == []
        append(path, b"lo wor")
        assert f.poll() == []
        append(path, b"ld\nnext")
        assert f.poll() == ["hello world"]
        assert f.flush() == ["next"]
        assert f.flush() == []


def test_cr_and_crlf_split_lines(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    with FileFollower(path) as f:
        # tqdm redraws with a bare \r; \r\n is one terminator; \n\n is a real empty line.
        append(path, b"a\r\nb\r 10%|#\r 20%|##\r\n\nc\r")
        assert f.poll() == ["a", "b", " 10%|#", " 20%|##", "", "c"]
        # \r\n split across two reads still counts once.
        append(path, b"\nd\n")
        assert f.poll() == ["d"]


def test_missing_file_then_created(tmp_path: Path) -> None:
    path = tmp_path / "later.log"
    with FileFollower(path) as f:
        assert f.poll() == []
        assert f.file_id is None
        path.write_bytes(b"born\n")
        assert f.poll() == ["born"]
        assert f.stats.reopen_errors == 0


def test_start_at_end_skips_existing_content(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    path.write_bytes(b"old 1\nold 2\n")
    with FileFollower(path, start_at_end=True) as f:
        assert f.poll() == []
        append(path, b"new\n")
        assert f.poll() == ["new"]


def test_start_at_end_drops_the_rest_of_an_unfinished_line(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    path.write_bytes(b"old\nhalf a li")
    with FileFollower(path, start_at_end=True) as f:
        append(path, b"ne\nnew\n")
        assert f.poll() == ["new"]
    path.write_bytes(b"old\r")
    with FileFollower(path, start_at_end=True) as f:
        append(path, b"\nnew\n")  # completes the \r\n seen before the start: no empty line
        assert f.poll() == ["new"]


def test_start_at_end_on_missing_file_reads_it_whole_once_created(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    with FileFollower(path, start_at_end=True) as f:
        path.write_bytes(b"first\n")
        assert f.poll() == ["first"]


def test_invalid_utf8_never_raises(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    with FileFollower(path) as f:
        append(path, b"bad \xff\xfe here\n\xc3\x00\n")
        assert f.poll() == ["bad \ufffd\ufffd here", "\ufffd\x00"]
        # A multi-byte character split between two polls decodes whole.
        append(path, "caf\u00e9".encode()[:-1])
        assert f.poll() == []
        append(path, "caf\u00e9".encode()[-1:] + b"\n")
        assert f.poll() == ["caf\u00e9"]


def test_read_errors_are_counted_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A directory at the path opens but cannot be read (EISDIR).
    path = tmp_path / "a.log"
    path.mkdir()
    with FileFollower(path) as f:
        assert f.poll() == []
        assert f.stats.reopen_errors >= 1

    def denied(*_args: object, **_kwargs: object) -> int:
        raise PermissionError(13, "Permission denied")

    other = tmp_path / "b.log"
    other.write_bytes(b"x\n")
    monkeypatch.setattr(tailer_mod.os, "open", denied)
    with FileFollower(other) as f:
        assert f.poll() == []
        assert f.stats.reopen_errors == 2  # construction, then the poll
    monkeypatch.undo()


def test_poll_budget_sets_more_pending(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    path.write_bytes(b"".join(b"line %03d\n" % i for i in range(100)))
    with FileFollower(path, read_chunk_bytes=64, max_bytes_per_poll=256) as f:
        got: list[str] = []
        got += f.poll()
        assert f.more_pending
        while f.more_pending:
            got += f.poll()
        assert got == [f"line {i:03d}" for i in range(100)]


def test_long_line_is_cut_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    with FileFollower(path, max_line_bytes=8) as f:
        append(path, b"short\n0123456789abcdef\nok\n")
        assert f.poll() == ["short", "01234567", "ok"]
        assert f.stats.truncated_lines == 1
        # Exactly max_line_bytes is not cut.
        append(path, b"01234567\n")
        assert f.poll() == ["01234567"]
        assert f.stats.truncated_lines == 1


def test_100mb_line_without_newline_is_cut_with_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "huge.log"
    chunk = b"x" * (4 * 1024 * 1024)
    total = 100 * 1024 * 1024
    with FileFollower(path) as f, open(path, "ab") as writer:
        got: list[str] = []
        tracemalloc.start()
        try:
            written = 0
            while written < total:
                writer.write(chunk)
                writer.flush()
                written += len(chunk)
                got += f.poll()
                assert f.splitter.buffered_bytes <= 64 * 1024
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 4 * 1024 * 1024, f"peak {peak} bytes"
        assert got == ["x" * 64 * 1024]
        assert f.stats.truncated_lines == 1
        assert f.stats.bytes == total
        writer.write(b"tail of the long line\nafter\n")
        writer.flush()
        assert f.poll() == ["after"]
        assert f.stats.truncated_lines == 1


# --- rotation ---------------------------------------------------------------------------


def test_unterminated_tail_of_rotated_file_is_its_own_line(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    with FileFollower(path) as f:
        append(path, b"done\nno newline")
        assert f.poll() == ["done"]
        os.rename(path, tmp_path / "a.log.1")
        append(path, b"fresh\n")
        assert f.poll() == ["no newline", "fresh"]
        assert f.stats.rotations == 1


def test_truncation_restarts_from_zero_and_ends_the_unterminated_line(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    with FileFollower(path) as f:
        append(path, b"one\ntwo\ncrashed mid-li")
        assert f.poll() == ["one", "two"]
        path.write_bytes(b"new run\n")  # same inode, O_TRUNC: shorter than our offset
        assert f.poll() == ["crashed mid-li", "new run"]
        assert f.stats.truncations == 1
        assert f.stats.rotations == 0


def test_renamed_away_file_is_still_read_until_a_successor_appears(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    with FileFollower(path) as f, open(path, "ab", buffering=0) as old:
        old.write(b"1\n")
        assert f.poll() == ["1"]
        os.rename(path, tmp_path / "a.log.1")
        old.write(b"2\n")
        assert f.poll() == ["2"]
        assert f.stats.rotations == 0
        old.write(b"3\n")
        append(path, b"4\n")
        assert f.poll() == ["3", "4"]
        assert f.stats.rotations == 1


def test_lines_appended_to_old_file_while_rotation_is_detected_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    with FileFollower(path) as f, open(path, "ab", buffering=0) as old:
        old.write(b"1\n")
        assert f.poll() == ["1"]
        os.rename(path, tmp_path / "a.log.1")
        append(path, b"fresh\n")
        real_replaced = f._replaced

        def racing_replaced() -> bool:
            # The writer slips a line into the old file after we hit its EOF, before we
            # find the successor: it must be drained before switching.
            old.write(b"late\n")
            f._replaced = real_replaced  # type: ignore[method-assign]
            return real_replaced()

        f._replaced = racing_replaced  # type: ignore[method-assign]
        assert f.poll() == ["late", "fresh"]


def test_deleted_file_is_released_then_successor_read_from_start(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    path.write_bytes(b"1\n")
    with FileFollower(path) as f:
        assert f.poll() == ["1"]
        path.unlink()
        assert f.poll() == []
        assert f.file_id is None  # no fd left pinning the deleted file
        assert f.stats.rotations == 1
        path.write_bytes(b"2\n3\n")
        assert f.poll() == ["2", "3"]
        assert f.file_id is not None


ROTATIONS = 5
LINES_PER_FILE = 500
KINDS = ["rename_create", "copytruncate", "delete_recreate"]


def _open_append(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


class RotatingWriter:
    """Writes numbered lines like an app whose log gets rotated under it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = _open_append(path)
        self.next = 0

    def write(self, n: int) -> None:
        for _ in range(n):
            os.write(self.fd, b"line %05d\n" % self.next)
            self.next += 1

    def run(
        self,
        kind: str,
        seen_through: Callable[[int], None],
        truncations_seen: Callable[[int], None],
    ) -> None:
        for r in range(ROTATIONS):
            self.write(LINES_PER_FILE)  # the tailer usually lags: the old file must be drained
            if kind == "rename_create":
                os.rename(self.path, f"{self.path}.{r}")
                self.write(20)  # still appending to the renamed file until it "reopens"
                os.close(self.fd)
                self.fd = _open_append(self.path)
            elif kind == "delete_recreate":
                os.close(self.fd)
                os.unlink(self.path)
                self.fd = _open_append(self.path)
            else:
                # copytruncate is lossy by nature: lines written between logrotate's copy and
                # its truncate are only in the copy, and lines the tailer had not read yet
                # when the file was truncated are gone from the path. So, like a quiet app,
                # the writer pauses until the tailer has read everything, rotates, and waits
                # until the tailer has noticed the shrink (had the file grown back past the
                # tailer's offset first, no tailer could tell). Then delivery must be exact.
                seen_through(self.next - 1)
                shutil.copyfile(self.path, f"{self.path}.{r}")
                os.truncate(self.path, 0)
                truncations_seen(r + 1)
            self.write(1)
            # A file the tailer never opened cannot be followed once renamed or deleted, so
            # let it attach to this one before the next rotation (tail -F has the same limit).
            seen_through(self.next - 1)
        self.write(LINES_PER_FILE)
        os.close(self.fd)


def _run_writer(
    writer: RotatingWriter, kind: str, received: Collector, stats_of: Callable[[], int]
) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def seen_through(n: int) -> None:
        wait_until(lambda: received.count() > n, f"line {n}")

    def truncations_seen(n: int) -> None:
        wait_until(lambda: stats_of() >= n, f"truncation {n}")

    def target() -> None:
        try:
            writer.run(kind, seen_through, truncations_seen)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, name="test-writer")
    thread.start()
    return thread, errors


def _assert_exact(received: list[str], writer: RotatingWriter) -> None:
    expected = [f"line {i:05d}" for i in range(writer.next)]
    assert len(received) == len(expected)
    assert received == expected


@pytest.mark.parametrize("kind", KINDS)
def test_rotation_with_manual_polls(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "app.log"
    writer = RotatingWriter(path)
    received = Collector()
    with FileFollower(path) as f:
        thread, errors = _run_writer(writer, kind, received, lambda: f.stats.truncations)
        deadline = time.monotonic() + 2 * DEADLINE_S
        while thread.is_alive() and time.monotonic() < deadline:
            received(f.poll())
            time.sleep(0.0005)
        thread.join()
        assert not errors, errors
        received(f.poll())
        received(f.flush())
        _assert_exact(received.snapshot(), writer)
        if kind == "copytruncate":
            assert f.stats.truncations == ROTATIONS
            assert f.stats.rotations == 0
        else:
            assert f.stats.rotations == ROTATIONS
        assert f.stats.reopen_errors == 0


@pytest.mark.parametrize("kind", KINDS)
def test_rotation_with_threaded_tailer(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "app.log"
    writer = RotatingWriter(path)
    received = Collector()
    with LogTailer(path, received) as tailer:
        assert tailer.inotify_active, tailer.fallback_reason
        thread, errors = _run_writer(writer, kind, received, lambda: tailer.stats.truncations)
        thread.join()
        assert not errors, errors
        wait_until(lambda: received.count() >= writer.next, "all lines")
    _assert_exact(received.snapshot(), writer)
    counter = tailer.stats.truncations if kind == "copytruncate" else tailer.stats.rotations
    assert counter == ROTATIONS


# --- LogTailer --------------------------------------------------------------------------


def test_tailer_inotify_wakes_without_waiting_for_the_poll(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    path.write_bytes(b"")
    received = Collector()
    polls = 0
    real_poll = FileFollower.poll

    def counting_poll(self: FileFollower) -> list[str]:
        nonlocal polls
        polls += 1
        return real_poll(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(FileFollower, "poll", counting_poll)
        # A poll interval far beyond the deadline: only inotify can deliver in time.
        with LogTailer(path, received, poll_interval=60) as tailer:
            assert tailer.inotify_active
            for i in range(3):
                append(path, b"line %d\n" % i)
                wait_until(lambda i=i: received.count() == i + 1, f"line {i}")
            # Our own reads (opened/closed events) must not wake the tailer in a loop.
            settled = polls
            time.sleep(0.2)
            assert polls - settled <= 2
    assert received.snapshot() == ["line 0", "line 1", "line 2"]


def test_tailer_delivers_existing_content_at_start(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    path.write_bytes(b"already\nthere\n")
    received = Collector()
    with LogTailer(path, received, poll_interval=60):
        wait_until(lambda: received.count() == 2, "existing lines", timeout=5)
    assert received.snapshot() == ["already", "there"]


def test_tailer_stop_drains_a_backlog_beyond_one_poll(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    received = Collector()
    lines = [f"line {i:05d}" for i in range(20_000)]
    path.write_bytes(b"first\n")  # read by the poll at start
    with LogTailer(path, received, poll_interval=60, use_inotify=False, max_bytes_per_poll=4096):
        wait_until(lambda: received.count() == 1, "first line")
        # The thread now sleeps for a minute: only stop() reads this, 4 KiB per poll.
        append(path, "".join(f"{line}\n" for line in lines).encode())
    assert received.snapshot() == ["first", *lines]


def test_tailer_polling_fallback_when_inotify_disabled(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    received = Collector()
    with LogTailer(path, received, poll_interval=0.02, use_inotify=False) as tailer:
        assert not tailer.inotify_active
        assert tailer.fallback_reason
        append(path, b"polled\n")
        wait_until(lambda: received.count() == 1, "polled line")
    assert received.snapshot() == ["polled"]


def test_tailer_falls_back_to_polling_when_observer_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class BrokenObserver:
        def schedule(self, *_args: object, **_kwargs: object) -> None:
            raise OSError(24, "inotify instance limit reached")

    monkeypatch.setattr(tailer_mod, "Observer", BrokenObserver)
    path = tmp_path / "a.log"
    received = Collector()
    with LogTailer(path, received, poll_interval=0.02) as tailer:
        assert not tailer.inotify_active
        assert tailer.fallback_reason is not None
        assert "limit" in tailer.fallback_reason
        append(path, b"still read\n")
        wait_until(lambda: received.count() == 1, "line via polling")
    assert received.snapshot() == ["still read"]


def test_tailer_missing_directory_polls(tmp_path: Path) -> None:
    directory = tmp_path / "not-yet"
    path = directory / "a.log"
    received = Collector()
    with LogTailer(path, received, poll_interval=0.02) as tailer:
        assert not tailer.inotify_active
        assert tailer.fallback_reason is not None
        directory.mkdir()
        append(path, b"found\n")
        wait_until(lambda: received.count() == 1, "line in late directory")
    assert received.snapshot() == ["found"]


def test_tailer_start_at_end_and_flush_on_stop(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    path.write_bytes(b"before 1\nbefore 2\n")
    received = Collector()
    with LogTailer(path, received, start_at_end=True) as tailer:
        append(path, b"after\nunterminated")
        wait_until(lambda: received.count() == 1, "line after start")
    assert received.snapshot() == ["after", "unterminated"]
    assert tailer.stats.lines == 2


def test_tailer_survives_a_failing_callback(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    received = Collector()
    calls = 0

    def flaky(lines: list[str]) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("consumer bug")
        received(lines)

    with LogTailer(path, flaky) as tailer:
        append(path, b"lost to the bug\n")
        wait_until(lambda: calls >= 1, "first callback")
        append(path, b"delivered\n")
        wait_until(lambda: received.count() == 1, "second batch")
        assert tailer.stats.lines == 2
    assert received.snapshot() == ["delivered"]


def test_tailer_can_be_stopped_from_its_callback(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    received = Collector()
    holder: list[LogTailer] = []

    def stop_on_first(lines: list[str]) -> None:
        received(lines)
        holder[0].stop()

    tailer = LogTailer(path, stop_on_first, poll_interval=0.02)
    holder.append(tailer)
    tailer.start()
    try:
        append(path, b"last words\n")
        wait_until(lambda: received.count() == 1, "line")
        wait_until(lambda: not tailer._thread or not tailer._thread.is_alive(), "thread exit")
    finally:
        tailer.stop()
    assert received.snapshot() == ["last words"]


def test_tailer_start_twice_and_stop_twice(tmp_path: Path) -> None:
    tailer = LogTailer(tmp_path / "a.log", lambda _lines: None)
    tailer.stop()  # never started: nothing to do
    tailer.start()
    try:
        with pytest.raises(RuntimeError):
            tailer.start()
    finally:
        tailer.stop()
        tailer.stop()


# --- property: same lines as a reference split, whatever the read boundaries ------------


def reference_lines(data: bytes, max_line_bytes: int) -> tuple[list[str], int]:
    text = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    segments = text.split(b"\n")
    if not segments[-1]:
        segments.pop()  # an empty tail is no line; a non-empty one is emitted on flush
    cut = sum(len(s) > max_line_bytes for s in segments)
    return [s[:max_line_bytes].decode("utf-8", "replace") for s in segments], cut


_ALPHABET = [b"a", b"\xc3\xa9", b"\r", b"\n", b"\r\n", b"\x00", b"\xff", b"\xc3", b"\xe2\x82"]
_chunks = st.lists(
    st.one_of(
        st.lists(st.sampled_from(_ALPHABET), max_size=12).map(b"".join),
        st.binary(max_size=24),
    ),
    max_size=25,
)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    chunks=_chunks,
    polls=st.lists(st.booleans(), min_size=25, max_size=25),
    max_line_bytes=st.integers(1, 10),
    read_chunk_bytes=st.integers(1, 9),
    max_bytes_per_poll=st.integers(1, 40),
)
def test_property_same_lines_as_reference(
    tmp_path: Path,
    chunks: list[bytes],
    polls: list[bool],
    max_line_bytes: int,
    read_chunk_bytes: int,
    max_bytes_per_poll: int,
) -> None:
    path = tmp_path / "prop.log"
    path.unlink(missing_ok=True)
    got: list[str] = []
    with (
        FileFollower(
            path,
            max_line_bytes=max_line_bytes,
            read_chunk_bytes=read_chunk_bytes,
            max_bytes_per_poll=max_bytes_per_poll,
        ) as f,
        open(path, "ab") as writer,
    ):
        for chunk, poll_now in zip(chunks, polls, strict=False):  # polls may be longer
            writer.write(chunk)
            writer.flush()
            if poll_now:
                got += f.poll()
        got += f.poll()
        while f.more_pending:
            got += f.poll()
        got += f.flush()
        expected, cut = reference_lines(b"".join(chunks), max_line_bytes)
        assert got == expected
        assert f.stats.truncated_lines == cut
        assert f.stats.lines == len(expected)
