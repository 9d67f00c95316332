"""The records of the attempt history: what the daemon writes (one builder per record
type, each fixing its keys and their order) and what a read merges them into (one
``AttemptRecord`` per attempt)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

# Which attribute the "time" of each record type fills.
TIME_FIELDS = {"start": "started_at", "ready": "ready_at", "end": "ended_at"}


@dataclass(frozen=True)
class AttemptRecord:
    """One attempt, merged from its start, ready and end records. Frozen: one record is
    shared by every read of a History after the read that merged it (history/file.py)."""

    attempt: int
    profile: str | None = None
    profile_index: int | None = None
    command: list[str] = field(default_factory=list)
    log: str | None = None
    started_at: float | None = None
    ready_at: float | None = None
    startup_s: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    signal: int | None = None
    phase: str | None = None
    phase_reached: str | None = None
    failure_class: str | None = None
    confidence: str | None = None  # the classification's; absent in records before 2026-12
    root_cause_line: str | None = None
    diagnosis: str | None = None
    decision: str | None = None
    stopped_by: str | None = None
    processes: list[dict] = field(default_factory=list)
    reason: str | None = None
    preflight: dict | None = None  # what the pre-flight found (supervisor/preflight.py)
    # Keys this version does not know, kept so that a newer daemon's records survive.
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def ended(self) -> bool:
        return self.ended_at is not None

    @property
    def failed(self) -> bool:
        return self.ended and self.failure_class not in (None, "none")

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        extra = data.pop("extra")
        return data | {key: value for key, value in extra.items() if key not in data}


@dataclass
class HistoryRead:
    attempts: list[AttemptRecord]  # ordered by attempt id
    corrupt_lines: int
    warnings: list[str]


# The records the daemon writes. Each builder fixes its record's keys and their order, so the
# file's lines stay the same from one version to the next. Values are written as given.
Record = dict[str, object]


def start_record(
    attempt: int,
    at: float,
    *,
    profile: str,
    profile_index: int,
    command: list[str],
    log: Path | str,
    processes: list[dict],
    reason: str,
    patch: Mapping[str, object] | None = None,
    preflight: Mapping[str, object] | None = None,
) -> Record:
    """A launch (or a launch that failed to start: no processes, reason "not launched"), with
    the automatic change it carries and what the pre-flight planned for it, when there are."""
    record: Record = {
        "type": "start",
        "attempt": attempt,
        "time": at,
        "profile": profile,
        "profile_index": profile_index,
        "command": command,
        "log": str(log),
        "processes": processes,
        "reason": reason,
    }
    if patch is not None:
        record["patch"] = patch
    if preflight is not None:
        record["preflight"] = preflight
    return record


def ready_record(attempt: int, at: float, startup_s: float | None) -> Record:
    """The attempt serves, ``startup_s`` after its launch."""
    return {"type": "ready", "attempt": attempt, "time": at, "startup_s": startup_s}


def end_record(
    attempt: int,
    at: float,
    *,
    exit_code: int | None,
    phase: str | None,
    phase_reached: str | None,
    failure_class: str,
    confidence: str,
    root_cause_line: str | None,
    diagnosis: str,
    decision: str | None,
    stopped_by: str | None,
    served_s: float | None,
) -> Record:
    """An attempt the daemon saw end; a negative exit code is the signal that ended it."""
    return {
        "type": "end",
        "attempt": attempt,
        "time": at,
        "exit_code": exit_code,
        "signal": -exit_code if exit_code is not None and exit_code < 0 else None,
        "phase": phase,
        "phase_reached": phase_reached,
        "failure_class": failure_class,
        "confidence": confidence,
        "root_cause_line": root_cause_line,
        "diagnosis": diagnosis,
        "decision": decision,
        "stopped_by": stopped_by,
        "served_s": served_s,
    }


def lost_record(
    attempt: int,
    at: float,
    *,
    phase: str | None,
    failure_class: str,
    root_cause_line: str | None,
    diagnosis: str,
) -> Record:
    """An attempt that ended while no daemon watched it, classified from its log afterwards:
    no exit code, no decision (the next daemon decides), no confidence nor phase reached."""
    return {
        "type": "end",
        "attempt": attempt,
        "time": at,
        "exit_code": None,
        "signal": None,
        "phase": phase,
        "failure_class": failure_class,
        "root_cause_line": root_cause_line,
        "diagnosis": diagnosis + " (ended while the daemon was down)",
        "decision": None,
        "stopped_by": None,
    }
