"""The daemon's counters as one value: each event a fold that returns the next value, so
that the daemon, their only writer, swaps them whole under its lock and a scrape never sees
half an update. Pure: no I/O, no clock (the caller says when)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TypeVar

K = TypeVar("K")


@dataclass(frozen=True)
class Counters:
    attempts_total: int = 0
    restarts: Mapping[str, int] = field(default_factory=dict)  # reason -> count
    failures: Mapping[str, int] = field(default_factory=dict)  # failure class -> count
    last_failure_time: Mapping[str, float] = field(default_factory=dict)  # class -> when
    startup_duration_s: float | None = None  # of the last attempt that came to serve
    log_lines: Mapping[bool, int] = field(default_factory=dict)  # matched? -> count
    hangs: int = 0
    remedies: Mapping[str, int] = field(default_factory=dict)  # class (or verdict) -> count

    @property
    def failures_total(self) -> int:
        return sum(self.failures.values())

    def launched(self) -> Counters:
        """An attempt began: launched, adopted, or refused before it could start."""
        return replace(self, attempts_total=self.attempts_total + 1)

    def restarted(self, reason: str) -> Counters:
        return replace(self, restarts=_plus(self.restarts, reason))

    def failed(self, failure_class: str, at: float) -> Counters:
        return replace(
            self,
            failures=_plus(self.failures, failure_class),
            last_failure_time={**self.last_failure_time, failure_class: at},
        )

    def served(self, startup_s: float) -> Counters:
        return replace(self, startup_duration_s=startup_s)

    def read(self, matched: int, unknown: int) -> Counters:
        """Log lines the grammar matched and those it did not."""
        lines = _plus(_plus(self.log_lines, True, matched), False, unknown)
        return replace(self, log_lines=lines)

    def hung(self) -> Counters:
        return replace(self, hangs=self.hangs + 1)

    def remedied(self, key: str) -> Counters:
        return replace(self, remedies=_plus(self.remedies, key))


def _plus(counts: Mapping[K, int], key: K, by: int = 1) -> dict[K, int]:
    return {**counts, key: counts.get(key, 0) + by}
