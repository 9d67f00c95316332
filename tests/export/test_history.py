"""The attempt history: durable appends, reads that survive kill -9, the counts, the CLI."""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.history import (
    HISTORY_FILE,
    AttemptRecord,
    History,
    HistoryWriteError,
    parse_history,
)
from tests.conftest import TESTS

ROOT = TESTS.parent
T0 = 1_700_000_000.0


def start(attempt: int, time: float = T0, **extra) -> dict:
    return {
        "type": "start",
        "attempt": attempt,
        "time": time,
        "profile": "default",
        "profile_index": 0,
        "command": ["python", "-m", "sglang.launch_server", "--model-path", "/m"],
        "log": f"/var/log/sglang/attempt-{attempt:06d}.log",
        "processes": [{"pid": 100 + attempt, "create_time": time + 0.12}],
        "reason": "first launch",
        **extra,
    }


def ready(attempt: int, time: float, startup_s: float = 83.2) -> dict:
    return {"type": "ready", "attempt": attempt, "time": time, "startup_s": startup_s}


def end(attempt: int, time: float, failure_class: str = "pool_init_oom", **extra) -> dict:
    return {
        "type": "end",
        "attempt": attempt,
        "time": time,
        "exit_code": 1,
        "signal": None,
        "phase": "startup",
        "phase_reached": "kv_pool",
        "failure_class": failure_class,
        "root_cause_line": "RuntimeError: Not enough memory.",
        "diagnosis": "the KV pool did not fit",
        "decision": "relaunch profile fewer-requests in 4 s",
        "stopped_by": None,
        **extra,
    }


def write(history: History, *records: dict) -> None:
    for record in records:
        history.append(record)


# -- append and read -------------------------------------------------------------------------


def test_round_trip_merges_records_by_attempt_and_orders_by_id(tmp_path):
    history = History(tmp_path / "state" / "nested")  # created on the first write
    write(
        history,
        start(2, T0 + 100),
        start(1, T0, gpu_uuid="GPU-1"),
        ready(1, T0 + 83.2),
        end(2, T0 + 150, exit_code=-9, signal=9, failure_class="killed_by_signal"),
        end(1, T0 + 90, failure_class="none", stopped_by="daemon", future_key={"a": [1]}),
    )
    read = history.read()
    assert (read.corrupt_lines, read.warnings) == (0, [])
    assert [record.attempt for record in read.attempts] == [1, 2]
    first, second = read.attempts
    assert first.started_at == T0 and first.ready_at == T0 + 83.2 and first.ended_at == T0 + 90
    assert first.startup_s == 83.2 and first.profile == "default" and first.profile_index == 0
    assert first.command[-1] == "/m" and first.log.endswith("attempt-000001.log")
    assert first.processes == [{"pid": 101, "create_time": T0 + 0.12}]
    assert (first.reason, first.stopped_by, first.failure_class) == (
        "first launch",
        "daemon",
        "none",
    )
    assert first.extra == {"gpu_uuid": "GPU-1", "future_key": {"a": [1]}}
    assert first.ended and not first.failed
    assert (second.exit_code, second.signal, second.ready_at) == (-9, 9, None)
    assert second.failed and second.phase == "startup" and second.phase_reached == "kv_pool"


def test_to_json_carries_every_field_and_the_extra_keys(tmp_path):
    history = History(tmp_path)
    write(history, start(3, newer="kept"), end(3, T0 + 5))
    data = history.read().attempts[0].to_json()
    assert data["newer"] == "kept" and "extra" not in data
    assert data["attempt"] == 3 and data["started_at"] == T0 and data["ended_at"] == T0 + 5
    assert json.loads(json.dumps(data)) == data
    # A key of a newer daemon never shadows a known field.
    record = AttemptRecord(attempt=1, profile="p", extra={"profile": "x", "y": 1})
    assert record.to_json()["profile"] == "p" and record.to_json()["y"] == 1


def test_end_without_start_still_yields_a_record(tmp_path):
    history = History(tmp_path)
    write(history, end(5, T0))
    (record,) = history.read().attempts
    assert record.attempt == 5 and record.started_at is None and record.ended and record.failed


def test_missing_file_is_an_empty_history(tmp_path):
    read = History(tmp_path / "nowhere").read()
    assert (read.attempts, read.corrupt_lines, read.warnings) == ([], 0, [])
    assert History(tmp_path / "nowhere").next_attempt_id() == 1
    assert not (tmp_path / "nowhere").exists()  # reading creates nothing


def test_each_record_is_one_line_written_once_and_fsynced(tmp_path, monkeypatch):
    calls = {"write": 0, "fsync": 0}
    real_write, real_fsync = os.write, os.fsync

    def counting_write(fd, data):
        calls["write"] += 1
        return real_write(fd, data)

    def counting_fsync(fd):
        calls["fsync"] += 1
        return real_fsync(fd)

    monkeypatch.setattr(os, "write", counting_write)
    monkeypatch.setattr(os, "fsync", counting_fsync)
    history = History(tmp_path)
    history.append(start(1))  # the first write also fsyncs the new file's directory
    assert calls == {"write": 1, "fsync": 2}
    multiline = end(1, T0 + 1, diagnosis="line one\nline two\r\n", root_cause_line="\u2028x")
    history.append(multiline)
    assert calls == {"write": 2, "fsync": 3}
    lines = (tmp_path / HISTORY_FILE).read_bytes().split(b"\n")
    assert len(lines) == 3 and lines[-1] == b""
    assert [json.loads(line)["type"] for line in lines[:2]] == ["start", "end"]
    assert history.read().attempts[0].diagnosis == "line one\nline two\r\n"


def test_values_json_cannot_hold_are_written_as_text(tmp_path):
    history = History(tmp_path)
    history.append(start(1, log=tmp_path / "attempt-000001.log"))
    assert history.read().attempts[0].log == str(tmp_path / "attempt-000001.log")


def test_next_attempt_id(tmp_path):
    history = History(tmp_path)
    assert history.next_attempt_id() == 1
    write(history, start(1), start(7), end(3, T0))
    assert history.next_attempt_id() == 8


# -- corrupt lines ---------------------------------------------------------------------------


def test_garbage_in_the_middle_is_counted_with_its_line_number(tmp_path):
    history = History(tmp_path)
    write(history, start(1), end(1, T0 + 1))
    with open(history.path, "ab") as handle:
        handle.write(b'{"type": "start", "attempt": 2, "ti\n')  # truncated, then closed
        handle.write(b"\x00\xff garbage\n")
        handle.write(b"[1, 2]\n")
        handle.write(b'{"type": "end", "attempt": "x", "time": 1}\n')
    write(history, start(3, T0 + 10), end(3, T0 + 20))
    read = history.read()
    assert read.corrupt_lines == 4
    assert [warning.split(":")[0] for warning in read.warnings] == [
        "line 3",
        "line 4",
        "line 5",
        "line 6",
    ]
    assert [record.attempt for record in read.attempts] == [1, 3]
    assert read.attempts[1].ended_at == T0 + 20


def test_a_truncated_last_line_is_counted_and_the_next_append_still_reads(tmp_path):
    history = History(tmp_path)
    write(history, start(1))
    line = json.dumps(end(1, T0 + 1)).encode()
    with open(history.path, "ab") as handle:
        handle.write(line[: len(line) // 2])  # kill -9 mid-write: no newline
    read = history.read()
    assert read.corrupt_lines == 1 and read.warnings == ["line 2: truncated last line, skipped"]
    assert not read.attempts[0].ended
    history.append(end(1, T0 + 2))
    read = history.read()
    assert read.corrupt_lines == 1 and read.attempts[0].ended_at == T0 + 2
    assert history.path.read_bytes().count(b"\n") == 3  # the half line was closed first


def test_an_unterminated_but_complete_last_line_is_a_record(tmp_path):
    history = History(tmp_path)
    history.path.write_bytes(json.dumps(start(1)).encode())
    assert history.read().corrupt_lines == 0 and history.read().attempts[0].attempt == 1
    history.append(end(1, T0 + 1))
    assert history.read().attempts[0].ended and history.read().corrupt_lines == 0


def test_fields_of_the_wrong_type_are_dropped_with_a_warning(tmp_path):
    history = History(tmp_path)
    write(history, start(1, command="not a list", profile_index=True), ready(1, T0, "slow"))
    read = history.read()
    (record,) = read.attempts
    assert record.command == [] and record.profile_index is None and record.startup_s is None
    assert record.profile == "default" and record.ready_at == T0
    assert read.corrupt_lines == 0 and len(read.warnings) == 3
    assert all(warning.startswith(("line 1:", "line 2:")) for warning in read.warnings)


def test_unknown_record_types_are_skipped_not_corrupt(tmp_path):
    history = History(tmp_path)
    write(history, start(1), {"type": "heartbeat", "attempt": 1, "time": T0})
    read = history.read()
    assert read.corrupt_lines == 0 and read.warnings == [
        "line 2: unknown record type 'heartbeat', skipped"
    ]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2000), st.booleans())
def test_arbitrary_bytes_appended_never_make_read_raise(garbage, newline_first):
    with tempfile.TemporaryDirectory() as directory:
        history = History(Path(directory))
        write(history, start(1), ready(1, T0 + 1), end(1, T0 + 2))
        with open(history.path, "ab") as handle:
            handle.write((b"\n" if newline_first else b"") + garbage)
        read = history.read()
        assert 1 in {record.attempt for record in read.attempts}
        assert read.corrupt_lines <= garbage.count(b"\n") + 1
        history.append(start(10**6, T0 + 3))
        after = history.read()
        assert after.attempts[-1].attempt == 10**6 and after.attempts[-1].started_at == T0 + 3
        assert after.corrupt_lines == read.corrupt_lines


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["type", "attempt", "time", "command", "processes", "signal", "x"]),
            st.one_of(
                st.sampled_from(["start", "ready", "end"]),
                st.none(),
                st.booleans(),
                st.integers(),
                st.floats(),
                st.text(max_size=5),
                st.lists(st.one_of(st.text(max_size=3), st.integers()), max_size=3),
            ),
        ),
        max_size=10,
    )
)
def test_valid_json_of_any_shape_never_makes_read_raise(entries):
    data = "\n".join(json.dumps(entry) for entry in entries).encode()
    read = parse_history(data)
    for record in read.attempts:
        json.dumps(record.to_json())
        assert all(isinstance(item, str) for item in record.command)


# -- reading on from the last read ----------------------------------------------------------


def _grow(path: Path, operation: str, attempt: int) -> None:
    """Change the history file the way something other than the reader's own append may."""
    line = (json.dumps(start(attempt, T0 + attempt)) + "\n").encode()
    if operation == "append":
        History(path.parent).append(start(attempt, T0 + attempt))  # another History: a writer
    elif operation == "half line":  # kill -9 mid-write
        with open(path, "ab") as handle:
            handle.write(line[: len(line) // 2])
    elif operation == "garbage":
        with open(path, "ab") as handle:
            handle.write(b"\x00 not a record\n")
    elif operation == "replaced":  # another file in its place, written whole
        fresh = path.with_suffix(".new")
        fresh.write_bytes(line)
        os.replace(fresh, path)
    elif operation == "shrunk" and path.exists():
        path.write_bytes(path.read_bytes()[: len(line) // 3])
    elif operation == "removed":
        path.unlink(missing_ok=True)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.sampled_from(["append", "half line", "garbage", "replaced", "shrunk", "removed"]),
        max_size=14,
    )
)
def test_a_reader_that_lives_on_reads_what_a_fresh_read_of_the_file_reads(operations):
    with tempfile.TemporaryDirectory() as name:
        reader = History(Path(name))
        for attempt, operation in enumerate(["append", *operations], start=1):
            _grow(reader.path, operation, attempt)
            whole = reader.path.read_bytes() if reader.path.exists() else b""
            assert reader.read() == parse_history(whole), operations[: attempt - 1]


def test_a_read_parses_only_the_lines_appended_since_the_last_one(tmp_path, monkeypatch):
    history = History(tmp_path)
    for attempt in range(1, 51):
        write(history, start(attempt, T0 + attempt), end(attempt, T0 + attempt + 1))
    assert len(history.read().attempts) == 50
    decoded = []
    loads = json.loads
    monkeypatch.setattr(json, "loads", lambda text, **kw: decoded.append(text) or loads(text, **kw))
    history.append(start(51, T0 + 60))
    read = history.read()
    assert len(decoded) == 1 and read.attempts[-1].attempt == 51
    assert history.read() == read and len(decoded) == 1  # nothing new: nothing parsed


def test_a_file_rewritten_in_place_is_read_again_from_the_start(tmp_path):
    history = History(tmp_path)
    write(history, start(1, T0), end(1, T0 + 1))
    history.read()
    # The same inode and size, a newline where the last read stopped: only the first
    # bytes tell that this is another history.
    other = History(tmp_path / "other")
    write(other, start(2, T0), end(2, T0 + 1))
    history.path.write_bytes(other.path.read_bytes())
    assert [record.attempt for record in history.read().attempts] == [2]
    # Rewritten keeping its first record (an edited copy written back), grown past where
    # the last read stopped: only the bytes before that point tell.
    edited = History(tmp_path / "edited")
    write(edited, start(2, T0), end(2, T0 + 7), start(3, T0 + 8))
    history.path.write_bytes(edited.path.read_bytes())
    assert history.read() == parse_history(history.path.read_bytes())


def test_what_a_read_returned_does_not_change_with_later_records(tmp_path):
    history = History(tmp_path)
    write(history, start(1))
    before = history.read()
    write(history, ready(1, T0 + 5), end(1, T0 + 9))
    assert history.read().attempts[0].ended_at == T0 + 9
    assert before.attempts[0].ready_at is None and before.attempts[0].ended_at is None


# -- write failures --------------------------------------------------------------------------


def test_a_state_dir_under_a_file_raises_naming_the_file(tmp_path):
    (tmp_path / "file").write_text("")
    history = History(tmp_path / "file" / "sub")
    with pytest.raises(HistoryWriteError) as caught:
        history.append(start(1))
    assert str(history.path) in str(caught.value)
    assert isinstance(caught.value.error, OSError) and caught.value.path == history.path


@pytest.mark.parametrize("failing", ["write", "fsync"])
def test_disk_full_raises_and_loses_nothing(tmp_path, monkeypatch, failing):
    history = History(tmp_path)
    write(history, start(1), end(1, T0 + 1))
    before = history.path.read_bytes()

    def full(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, failing, full)
    with pytest.raises(HistoryWriteError, match="No space left") as caught:
        history.append(start(2))
    monkeypatch.undo()
    assert str(history.path) in str(caught.value)
    assert caught.value.error.errno == errno.ENOSPC
    assert history.path.read_bytes() == before
    assert [record.attempt for record in history.read().attempts] == [1]


def test_a_short_write_is_undone(tmp_path, monkeypatch):
    history = History(tmp_path)
    write(history, start(1))
    before = history.path.read_bytes()
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, data[:10]))
    with pytest.raises(HistoryWriteError, match="short write"):
        history.append(start(2))
    monkeypatch.undo()
    assert history.path.read_bytes() == before


# -- kill -9 ---------------------------------------------------------------------------------

# Appends records of random sizes until killed, telling each attempt before its start record:
# killed just after that, a large record is likely cut short mid-write.
WRITER = textwrap.dedent(
    """
    import random, sys
    from pathlib import Path
    from exporter.history import History

    history = History(Path(sys.argv[1]))
    rng = random.Random(int(sys.argv[2]))
    attempt = history.next_attempt_id()
    while True:
        size = rng.choice([100, 10_000, 500_000, 2_000_000])
        print(attempt, flush=True)
        history.append({"type": "start", "attempt": attempt, "time": 1.0, "size": size,
                        "command": ["x" * size]})
        history.append({"type": "end", "attempt": attempt, "time": 2.0, "failure_class": "none"})
        attempt += 1
    """
)


def test_survives_kill_9_at_random_moments(tmp_path):
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    history = History(tmp_path)
    corrupt_before = 0
    for round_ in range(10):
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), str(rng.randrange(2**32))],
            cwd=ROOT,
            stdout=subprocess.PIPE,
        )
        try:
            for _ in range(rng.randint(1, 5)):
                assert child.stdout.readline(), "the writer died"
            time.sleep(rng.uniform(0, 0.003))
        finally:
            os.kill(child.pid, signal.SIGKILL)  # the very process started above
            child.wait(timeout=30)
            child.stdout.close()
        assert child.returncode == -signal.SIGKILL
        read = history.read()
        context = f"seed {seed}, round {round_}: {read.warnings}"
        # At most the line being written when killed is lost, and it is the last one.
        assert read.corrupt_lines - corrupt_before in (0, 1), context
        if read.corrupt_lines > corrupt_before:
            last_line = history.path.read_bytes().count(b"\n") + 1
            assert read.warnings[-1] == f"line {last_line}: truncated last line, skipped", context
        corrupt_before = read.corrupt_lines
        for record in read.attempts:
            assert record.started_at == 1.0, context
            assert record.command == ["x" * record.extra["size"]], context
    history.append(end(history.next_attempt_id(), T0))
    final = history.read()
    assert final.attempts[-1].ended_at == T0 and final.corrupt_lines == corrupt_before


# -- the CLI ---------------------------------------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "exporter.cli", "history", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def state(tmp_path) -> Path:
    history = History(tmp_path / "state")
    write(
        history,
        start(1, T0),
        end(1, T0 + 83, exit_code=1),
        start(2, T0 + 90, profile="fewer-requests", profile_index=1),
        ready(2, T0 + 170),
        end(
            2,
            T0 + 3790,
            failure_class="none",
            exit_code=0,
            phase="shutdown",
            stopped_by="daemon",
            decision="stop",
        ),
        start(3, T0 + 4000),
        end(3, T0 + 4005, exit_code=-9, signal=9, failure_class="killed_by_signal"),
        start(4, T0 + 4010),
    )
    return tmp_path / "state"


def test_cli_table(state):
    done = cli("--state-dir", str(state))
    assert done.returncode == 0 and done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[0].split() == [
        "ATTEMPT",
        "STARTED",
        "PROFILE",
        "DURATION",
        "PHASE",
        "CLASS",
        "EXIT",
        "DECISION",
    ]
    first = lines[1].split()
    assert (
        first[0] == "1"
        and first[1].startswith("2023-11-1")
        and first[2:7]
        == [
            "default",
            "1m23s",
            "startup",
            "pool_init_oom",
            "exit",
        ]
    )
    assert lines[1].endswith("relaunch profile fewer-requests in 4 s")
    assert lines[2] == "    root cause: RuntimeError: Not enough memory."
    assert lines[3] == "    diagnosis:  the KV pool did not fit"
    assert lines[4].split()[2:] == [
        "fewer-requests",
        "1h01m",
        "shutdown",
        "none",
        "exit",
        "0",
        "stop",
    ]
    assert lines[5].split()[2:7] == ["default", "5s", "startup", "killed_by_signal", "SIGKILL"]
    assert lines[8].split()[:1] == ["4"] and "running?" in lines[8]
    assert len(lines) == 9


def test_cli_json_lines_and_last(state):
    done = cli("--state-dir", str(state), "--json")
    assert done.returncode == 0
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [row["attempt"] for row in rows] == [1, 2, 3, 4]
    assert rows[1]["ready_at"] == T0 + 170 and rows[1]["profile"] == "fewer-requests"
    done = cli("--state-dir", str(state), "--json", "--last", "2")
    assert [json.loads(line)["attempt"] for line in done.stdout.splitlines()] == [3, 4]
    done = cli("--state-dir", str(state), "--last", "1")
    assert len(done.stdout.splitlines()) == 2
    assert cli("--state-dir", str(state), "--last", "0").returncode == 2


def test_cli_missing_state_dir(tmp_path):
    done = cli("--state-dir", str(tmp_path / "none"))
    assert done.returncode == 0
    assert done.stdout == f"no attempts recorded in {tmp_path / 'none'}\n"
    done = cli("--state-dir", str(tmp_path / "none"), "--json")
    assert done.returncode == 0 and done.stdout == ""
    assert "no attempts recorded" in done.stderr


def test_cli_warns_of_corrupt_lines_and_exits_0(state):
    with open(state / HISTORY_FILE, "ab") as handle:
        handle.write(b"garbage\n" + b'{"type": "end", "attempt": 4, "ti')
    done = cli("--state-dir", str(state), "--json")
    assert done.returncode == 0
    assert len(done.stdout.splitlines()) == 4
    assert "skipped 2 corrupt line(s)" in done.stderr
    assert "line 9:" in done.stderr and "line 10: truncated last line" in done.stderr


def test_cli_unreadable_history_exits_1(tmp_path):
    (tmp_path / HISTORY_FILE).mkdir()
    done = cli("--state-dir", str(tmp_path))
    assert done.returncode == 1 and "cannot read" in done.stderr
    assert "Traceback" not in done.stderr


def test_cli_needs_exactly_one_of_state_dir_and_config(tmp_path):
    assert cli().returncode == 2
    assert cli("--state-dir", str(tmp_path), "--config", str(tmp_path / "c")).returncode == 2


def test_cli_config_gives_the_state_dir(state, tmp_path):
    pytest.importorskip("exporter.config")
    config = tmp_path / "sentinel.toml"
    config.write_text(f'[paths]\nstate_dir = "{state}"\nlog_dir = "{tmp_path / "logs"}"\n')
    done = cli("--config", str(config), "--json", "--last", "1")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["attempt"] == 4


def test_cli_unloadable_config_exits_1(tmp_path):
    pytest.importorskip("exporter.config")
    done = cli("--config", str(tmp_path / "missing.toml"))
    assert done.returncode == 1 and str(tmp_path / "missing.toml") in done.stderr
    assert "Traceback" not in done.stderr
