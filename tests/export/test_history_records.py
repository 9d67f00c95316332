"""The typed history records write the same lines as the dict literals the daemon wrote before
them (copied below from supervisor/daemon.py as of commit eb09e80), byte for byte, so old and
new daemons read each other's files."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.history import (
    History,
    end_record,
    lost_record,
    parse_history,
    ready_record,
    start_record,
)

LOG = Path("/var/log/sglang-sentinel/attempt-3.log")
COMMAND = ["python", "-m", "sglang.launch_server", "--api-key", "***"]
LEADER = {"pid": 4242, "create_time": 1767261600.25}
PATCH = {"set": {"mem-fraction-static": 0.5}, "remove": ["cuda-graph-max-bs"], "reason": "oom"}
PREFLIGHT = {"verdict": "fits", "planned_tokens": 4096, "time": 1767261599.5}


def old_start(processes: list[dict], reason: str, patch: dict, preflight: dict) -> dict:
    """daemon.py's `_launch` and `_not_launched` records, with `**self._patch_record(index)`
    and `**self._preflight_record()` as {} or {"patch": ...} / {"preflight": ...}."""
    return {
        "type": "start",
        "attempt": 3,
        "time": 1767261600.0,
        "profile": "more-static-memory",
        "profile_index": 1,
        "command": COMMAND,
        "log": str(LOG),
        "processes": processes,
        "reason": reason,
        **patch,
        **preflight,
    }


@pytest.mark.parametrize("patch", [None, PATCH])
@pytest.mark.parametrize("preflight", [None, PREFLIGHT])
@pytest.mark.parametrize(
    ("processes", "reason"), [([LEADER], "retrying after pool_init_oom"), ([], "not launched")]
)
def test_start_record_is_the_old_start_dict(tmp_path, processes, reason, patch, preflight):
    old = old_start(
        processes,
        reason,
        {"patch": patch} if patch else {},
        {"preflight": preflight} if preflight else {},
    )
    new = start_record(
        3,
        1767261600.0,
        profile="more-static-memory",
        profile_index=1,
        command=COMMAND,
        log=LOG,
        processes=processes,
        reason=reason,
        patch=patch,
        preflight=preflight,
    )
    assert written(tmp_path / "new", new) == written(tmp_path / "old", old)


def test_ready_record_is_the_old_ready_dict(tmp_path):
    # `_watch_health` and `_adopt` wrote the same literal.
    old = {"type": "ready", "attempt": 3, "time": 1767261642.5, "startup_s": 42.5}
    new = ready_record(3, 1767261642.5, 42.5)
    assert written(tmp_path / "new", new) == written(tmp_path / "old", old)


@pytest.mark.parametrize(
    ("exit_code", "served_s", "stopped_by", "decision"),
    [
        (-9, None, None, "falling back to profile 'more-static-memory'"),
        (1, 310.0, None, "retrying profile 'default' in 2 s"),
        (None, 12.0, "daemon", None),
    ],
)
def test_end_record_is_the_old_end_dict(tmp_path, exit_code, served_s, stopped_by, decision):
    old = {  # `_conclude`
        "type": "end",
        "attempt": 3,
        "time": 1767261700.0,
        "exit_code": exit_code,
        "signal": -exit_code if exit_code is not None and exit_code < 0 else None,
        "phase": "init",
        "phase_reached": "loading weights",
        "failure_class": "pool_init_oom",
        "confidence": "high",
        "root_cause_line": "RuntimeError: Not enough memory. Please try to increase ...",
        "diagnosis": "the memory pools did not fit",
        "decision": decision,
        "stopped_by": stopped_by,
        "served_s": served_s,
    }
    new = end_record(
        3,
        1767261700.0,
        exit_code=exit_code,
        phase="init",
        phase_reached="loading weights",
        failure_class="pool_init_oom",
        confidence="high",
        root_cause_line="RuntimeError: Not enough memory. Please try to increase ...",
        diagnosis="the memory pools did not fit",
        decision=decision,
        stopped_by=stopped_by,
        served_s=served_s,
    )
    assert written(tmp_path / "new", new) == written(tmp_path / "old", old)


def test_lost_record_is_the_old_lost_end_dict(tmp_path):
    old = {  # `_record_lost`
        "type": "end",
        "attempt": 3,
        "time": 1767261800.0,
        "exit_code": None,
        "signal": None,
        "phase": None,
        "failure_class": "other",
        "root_cause_line": None,
        "diagnosis": "log missing" + " (ended while the daemon was down)",
        "decision": None,
        "stopped_by": None,
    }
    new = lost_record(
        3,
        1767261800.0,
        phase=None,
        failure_class="other",
        root_cause_line=None,
        diagnosis="log missing",
    )
    assert written(tmp_path / "new", new) == written(tmp_path / "old", old)


def test_the_builders_records_read_back_as_one_attempt(tmp_path):
    history = History(tmp_path)
    history.append(
        start_record(
            3,
            10.0,
            profile="p",
            profile_index=0,
            command=COMMAND,
            log=LOG,
            processes=[LEADER],
            reason="first launch",
            patch=PATCH,
            preflight=PREFLIGHT,
        )
    )
    history.append(ready_record(3, 12.0, 2.0))
    history.append(
        lost_record(
            3,
            20.0,
            phase=None,
            failure_class="other",
            root_cause_line=None,
            diagnosis="log missing",
        )
    )
    (attempt,) = parse_history(history.path.read_bytes()).attempts
    assert (attempt.started_at, attempt.ready_at, attempt.ended_at) == (10.0, 12.0, 20.0)
    assert attempt.log == str(LOG) and attempt.preflight == PREFLIGHT
    assert attempt.extra == {"patch": PATCH}
    assert attempt.diagnosis == "log missing (ended while the daemon was down)"


def written(state_dir: Path, record: dict) -> bytes:
    """What History.append puts in the file for ``record``."""
    history = History(state_dir)
    history.append(record)
    return history.path.read_bytes()
