"""One consistent view of the daemon's state, taken under its lock: the only value the
metrics read (metrics.py builds every family from it; the daemon fills it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from exporter.attempt.progress import AttemptProgress
from exporter.attempt.states import ServerState

if TYPE_CHECKING:
    # Named for readers only: the daemon hands these values in, and this layer does not
    # import the supervisor or the telemetry sources at run time (tests/test_layers.py).
    from exporter.supervisor.preflight import Preflight
    from exporter.telemetry.source import Reading

REAPED_ORIGINS = ("attempt", "other")  # whose zombies were reaped: the keys of ``reaped``


@dataclass(frozen=True)
class Snapshot:
    state: ServerState
    profile: str | None = None
    profile_index: int | None = None
    attempts_total: int = 0
    restarts: Mapping[str, int] = field(default_factory=dict)  # reason -> count
    failures: Mapping[str, int] = field(default_factory=dict)  # failure class -> count
    last_failure_time: Mapping[str, float] = field(default_factory=dict)
    startup_duration_s: float | None = None
    progress: AttemptProgress | None = None
    log_lines: Mapping[bool, int] = field(default_factory=dict)  # matched? -> count
    last_line_time: float | None = None
    last_batch_time: float | None = None
    last_progress_time: float | None = None
    preflight: Preflight | None = None  # of the next or current launch
    hangs: int = 0
    remedies: Mapping[str, int] = field(default_factory=dict)  # failure class -> count
    reaped: Mapping[str, int] = field(default_factory=dict)  # origin -> zombies reaped
    # Each telemetry source's last snapshot, by its name (telemetry/registry.py's SOURCES);
    # every source renders its own part (metrics.py), so a new one needs no field here.
    sources: Mapping[str, Reading] = field(default_factory=dict)
