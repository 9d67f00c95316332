"""How each background collector is doing, in node_exporter's shape: success, how long the last
collection took, and when one last succeeded. A failed collection publishes no data of its own,
so these metrics are what tells an empty series from a broken collector."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from exporter.exposition import Family, sentinel_gauge


@dataclass(frozen=True)
class CollectorHealth:
    success: bool  # the last collection succeeded
    duration_s: float  # how long the last collection took (or has been taking, when stalled)
    last_success_time: float | None  # wall time of the last success; None: never succeeded
    error: str | None = None  # short text, for logs and the snapshot; never a label


NEVER_COLLECTED = CollectorHealth(False, 0.0, None)  # before a source's first collection


def collector_families(healths: Mapping[str, CollectorHealth]) -> list[Family]:
    """The health of every collector, labelled by its name (a closed set: our collectors)."""
    success = sentinel_gauge(
        "collector_success",
        "1 when the collector's last collection succeeded.",
        ["collector"],
    )
    duration = sentinel_gauge(
        "collector_duration_seconds",
        "How long the collector's last collection took.",
        ["collector"],
    )
    last = sentinel_gauge(
        "collector_last_success_timestamp_seconds",
        "When the collector last succeeded; absent while it never has.",
        ["collector"],
    )
    for name, health in sorted(healths.items()):
        success.add([name], 1.0 if health.success else 0.0)
        duration.add([name], health.duration_s)
        if health.last_success_time is not None:
            last.add([name], health.last_success_time)
    return [success, duration, last]
