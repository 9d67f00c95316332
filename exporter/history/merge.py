"""Reading the history: its lines merged into one record per attempt, around whatever a
``kill -9`` or a stranger left in the file (counted and named, never raised)."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable

from exporter.history.records import TIME_FIELDS, AttemptRecord, HistoryRead


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
    merged = Merged()
    merged.feed(data)
    return merged.read()


class Merged:
    """The records of a history's lines so far, merged by attempt; ``feed`` goes on with
    the lines that follow. A merged record is replaced, never changed, so that what an
    earlier ``read`` returned stays as it was."""

    def __init__(self) -> None:
        self.records: dict[int, AttemptRecord] = {}
        self.seen: set[tuple[int, str]] = set()
        self.corrupt = 0
        self.warnings: list[str] = []
        self.lines = 0  # complete lines fed so far

    def copy(self) -> Merged:
        other = Merged()
        other.records, other.seen = dict(self.records), set(self.seen)
        other.corrupt, other.warnings, other.lines = self.corrupt, list(self.warnings), self.lines
        return other

    def read(self) -> HistoryRead:
        attempts = sorted(self.records.values(), key=lambda record: record.attempt)
        return HistoryRead(attempts, corrupt_lines=self.corrupt, warnings=list(self.warnings))

    def feed(self, data: bytes) -> None:
        """Merge the lines of ``data``, the bytes after those fed so far. A last line with
        no newline is merged but not counted: nothing may be fed after it."""
        lines = data.split(b"\n")
        for index, raw in enumerate(lines):
            if raw.strip():
                self._merge(raw, self.lines + index + 1, unterminated=index == len(lines) - 1)
        self.lines += len(lines) - 1

    def _merge(self, raw: bytes, number: int, unterminated: bool) -> None:
        # A line cut short by kill -9 is never valid JSON: the closing brace comes last.
        try:
            entry = json.loads(raw.decode("utf-8"))
            problem = _invalid(entry)
        except (ValueError, RecursionError):
            entry, problem = None, "not JSON (cut short or garbage)"
        if isinstance(entry, dict) and entry.get("type") not in (*TIME_FIELDS, None):
            # A record type of a newer daemon: not corrupt, just not ours to merge.
            self.warnings.append(f"line {number}: unknown record type {entry['type']!r}, skipped")
            return
        if problem:
            self.corrupt += 1
            why = "truncated last line" if unterminated else problem
            self.warnings.append(f"line {number}: {why}, skipped")
            return
        attempt, kind = entry["attempt"], entry["type"]
        if (attempt, kind) in self.seen:
            self.warnings.append(f"line {number}: another {kind} record for attempt {attempt} wins")
        self.seen.add((attempt, kind))
        fields: dict[str, object] = {TIME_FIELDS[kind]: float(entry["time"])}
        extra: dict[str, object] = {}
        for key, value in entry.items():
            if key in ("type", "attempt", "time"):
                continue
            if key not in _FIELDS:
                extra[key] = value
            elif value is None:
                fields[key] = [] if key in _LIST_FIELDS else None
            else:
                try:
                    fields[key] = _FIELDS[key](value)
                except (TypeError, ValueError, OverflowError) as error:
                    self.warnings.append(
                        f"line {number}: ignored {key!r} of attempt {attempt}: {error}"
                    )
        record = self.records.get(attempt) or AttemptRecord(attempt=attempt)
        self.records[attempt] = dataclasses.replace(record, **fields, extra=record.extra | extra)


def _invalid(entry: object) -> str | None:
    """Why a decoded line is not a record, or None when it is one."""
    if not isinstance(entry, dict):
        return "not a JSON object"
    if entry.get("type") not in tuple(TIME_FIELDS):  # a tuple: the value may be unhashable
        return "no record type"
    try:
        _int(entry.get("attempt"))
        _float(entry.get("time"))
    except (TypeError, ValueError, OverflowError):
        return "no valid attempt id or time"
    return None
