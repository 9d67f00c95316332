"""The append-only attempt history: ``<state_dir>/attempts.jsonl``.

Every attempt leaves a ``start`` record (with what the pre-flight planned for its command,
when it ran), a ``ready`` record once it serves and an ``end`` record, one JSON object per
line, each fsynced before the daemon goes on. A daemon killed with ``kill -9`` leaves
at worst a truncated last line; the next daemon reads around it and continues the restart
count, the backoff and the crash-loop limit where the last one left.
Records are written as given: the caller redacts secrets first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

HISTORY_FILE = "attempts.jsonl"

# Which attribute the "time" of each record type fills.
_TIME_FIELDS = {"start": "started_at", "ready": "ready_at", "end": "ended_at"}


class HistoryWriteError(Exception):
    """A record could not be made durable; the file is left as it was."""

    def __init__(self, path: Path, error: OSError) -> None:
        super().__init__(f"cannot write the attempt history {path}: {error.strerror or error}")
        self.path = path
        self.error = error


@dataclass
class AttemptRecord:
    """One attempt, merged from its start, ready and end records."""

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


def _float(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError("not a number")
    number = float(value)  # OverflowError for an int beyond float
    if not math.isfinite(number):
        raise ValueError("not finite")
    return number


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("not an integer")
    return value


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError("not a string")
    return value


def _str_list(value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise TypeError("not a list of strings")
    return value


def _dict(value: object) -> dict:
    if not isinstance(value, dict):
        raise TypeError("not an object")
    return value


def _dict_list(value: object) -> list[dict]:
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise TypeError("not a list of objects")
    return value


# The known keys besides type, attempt and time; each is also the attribute it fills.
_FIELDS: dict[str, Callable[[object], object]] = {
    "profile": _str,
    "profile_index": _int,
    "command": _str_list,
    "log": _str,
    "processes": _dict_list,
    "reason": _str,
    "startup_s": _float,
    "exit_code": _int,
    "signal": _int,
    "phase": _str,
    "phase_reached": _str,
    "failure_class": _str,
    "confidence": _str,
    "root_cause_line": _str,
    "diagnosis": _str,
    "decision": _str,
    "stopped_by": _str,
    "preflight": _dict,
}
_LIST_FIELDS = {"command", "processes"}  # null reads as empty, not None


def parse_history(data: bytes) -> HistoryRead:
    """Merge the records of a history file's bytes; never raises on bad content."""
    records: dict[int, AttemptRecord] = {}
    seen: set[tuple[int, str]] = set()
    corrupt = 0
    warnings: list[str] = []
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        # A line cut short by kill -9 is never valid JSON: the closing brace comes last.
        try:
            entry = json.loads(raw.decode("utf-8"))
            problem = _invalid(entry)
        except (ValueError, RecursionError):
            entry, problem = None, "not JSON (cut short or garbage)"
        if isinstance(entry, dict) and entry.get("type") not in (*_TIME_FIELDS, None):
            # A record type of a newer daemon: not corrupt, just not ours to merge.
            warnings.append(f"line {number}: unknown record type {entry['type']!r}, skipped")
            continue
        if problem:
            corrupt += 1
            unterminated = number == len(lines)
            warnings.append(
                f"line {number}: {'truncated last line' if unterminated else problem}, skipped"
            )
            continue
        attempt, kind = entry["attempt"], entry["type"]
        if (attempt, kind) in seen:
            warnings.append(f"line {number}: another {kind} record for attempt {attempt} wins")
        seen.add((attempt, kind))
        record = records.setdefault(attempt, AttemptRecord(attempt=attempt))
        setattr(record, _TIME_FIELDS[kind], float(entry["time"]))
        for key, value in entry.items():
            if key in ("type", "attempt", "time"):
                continue
            if key not in _FIELDS:
                record.extra[key] = value
            elif value is None:
                setattr(record, key, [] if key in _LIST_FIELDS else None)
            else:
                try:
                    setattr(record, key, _FIELDS[key](value))
                except (TypeError, ValueError, OverflowError) as error:
                    warnings.append(f"line {number}: ignored {key!r} of attempt {attempt}: {error}")
    attempts = sorted(records.values(), key=lambda record: record.attempt)
    return HistoryRead(attempts=attempts, corrupt_lines=corrupt, warnings=warnings)


def _invalid(entry: object) -> str | None:
    """Why a decoded line is not a record, or None when it is one."""
    if not isinstance(entry, dict):
        return "not a JSON object"
    if entry.get("type") not in tuple(_TIME_FIELDS):  # a tuple: the value may be unhashable
        return "no record type"
    try:
        _int(entry.get("attempt"))
        _float(entry.get("time"))
    except (TypeError, ValueError, OverflowError):
        return "no valid attempt id or time"
    return None


class History:
    """The history file of one state directory. One daemon writes it at a time."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / HISTORY_FILE

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
        """The attempts so far; a missing file is an empty history. OSError if unreadable."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return HistoryRead(attempts=[], corrupt_lines=0, warnings=[])
        return parse_history(data)

    def next_attempt_id(self) -> int:
        return max((record.attempt for record in self.read().attempts), default=0) + 1


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def recent_failures(
    attempts: Iterable[AttemptRecord], now: float, window_s: float
) -> list[AttemptRecord]:
    """The attempts that count toward the crash-loop limit.

    An attempt counts when it ended, started no earlier than ``now - window_s`` (its end
    time stands in when its start record was lost) and was not stopped by the daemon: a
    server that exits by itself has crashed, whatever its exit status.
    """
    since = now - window_s
    return [
        record
        for record in attempts
        if record.ended
        and record.stopped_by != "daemon"
        and (record.started_at if record.started_at is not None else record.ended_at) >= since
    ]


def consecutive_failures(attempts: Iterable[AttemptRecord], healthy_reset_s: float) -> int:
    """Failed attempts at the end of the history: the backoff exponent.

    Counts from the newest attempt while it ended with a failure class other than "none";
    stops at one that has not ended or ended without a failure, and at one that served for
    at least ``healthy_reset_s`` (it worked, so its crash starts a new streak). A server
    that becomes ready and dies seconds later still counts: that is a crash loop too.
    """
    count = 0
    for record in reversed(list(attempts)):
        if not record.failed or _served_s(record) >= healthy_reset_s:
            break
        count += 1
    return count


def _served_s(record: AttemptRecord) -> float:
    if record.ready_at is None or record.ended_at is None:
        return 0.0
    return record.ended_at - record.ready_at
