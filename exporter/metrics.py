"""The Prometheus view of the daemon, built at scrape time from one snapshot of its state.

A custom collector (no client-side metric objects, no multiprocess mode): the daemon keeps
plain counters and the attempt's progress, and a scrape turns one consistent snapshot into
metric families. Label values come from closed sets (states, failure classes, pools,
milestones, configured profile names, TP ranks), never from raw log text or pids.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client import start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from exporter import __version__
from exporter.supervisor.progress import AttemptProgress
from exporter.supervisor.states import ServerState

NAMESPACE = "sglang_sentinel"


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


def _gauge(name: str, doc: str, labels: Iterable[str] = (), unit: str = "") -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{NAMESPACE}_{name}", doc, labels=list(labels), unit=unit)


def _counter(name: str, doc: str, labels: Iterable[str] = ()) -> CounterMetricFamily:
    return CounterMetricFamily(f"{NAMESPACE}_{name}", doc, labels=list(labels))


def families(snap: Snapshot) -> list[Metric]:
    """Every metric family for one snapshot; pure, so it is tested without a server."""
    out: list[Metric] = []
    build = _gauge("build_info", "sglang-sentinel build; always 1.", ["version"])
    build.add_metric([__version__], 1)
    out.append(build)

    state = _gauge("server_state", "1 for the server's current state, else 0.", ["state"])
    for candidate in ServerState:
        state.add_metric([candidate.value], 1.0 if candidate is snap.state else 0.0)
    up = _gauge("server_up", "1 when the server is serving and healthy.")
    up.add_metric([], 1.0 if snap.state is ServerState.READY else 0.0)
    out += [state, up]

    attempts = _counter("attempts", "Launch attempts (adopted servers included).")
    attempts.add_metric([], snap.attempts_total)
    restarts = _counter("restarts", "Relaunches, by why the previous attempt ended.", ["reason"])
    for reason, count in sorted(snap.restarts.items()):
        restarts.add_metric([reason], count)
    failures = _counter("failures", "Ended attempts, by failure class.", ["class"])
    last = _gauge(
        "last_failure_timestamp_seconds", "When the last failure of each class ended.", ["class"]
    )
    for failure_class, count in sorted(snap.failures.items()):
        failures.add_metric([failure_class], count)
        last.add_metric([failure_class], snap.last_failure_time[failure_class])
    out += [attempts, restarts, failures, last]

    profile = _gauge("profile_info", "The profile of the current attempt; always 1.", ["profile"])
    level = _gauge("fallback_level", "Index of the current profile in the ladder (0 = first).")
    if snap.profile is not None:
        profile.add_metric([snap.profile], 1)
        level.add_metric([], snap.profile_index or 0)
    startup = _gauge(
        "startup_duration_seconds", "Launch to serving, for the last attempt that served."
    )
    if snap.startup_duration_s is not None:
        startup.add_metric([], snap.startup_duration_s)
    out += [profile, level, startup]

    out += _pool_families(snap.progress)

    lines = _counter("log_lines", "Log lines read, by whether the grammar knew them.", ["matched"])
    for matched in (True, False):
        lines.add_metric([str(matched).lower()], snap.log_lines.get(matched, 0))
    out.append(lines)
    return out


def _pool_families(progress: AttemptProgress | None) -> list[Metric]:
    kv = _gauge("kv_cache_tokens", "KV cache size in tokens, from the log.", ["tp_rank"])
    pools = _gauge(
        "memory_pool_bytes", "Memory pools allocated, from the log.", ["tp_rank", "pool"]
    )
    slots = _gauge("mamba_cache_slots", "Linear-attention state slots, from the log.", ["tp_rank"])
    weights = _gauge("weights_bytes", "Device memory taken by the weights.", ["tp_rank"])
    available = _gauge(
        "device_available_bytes",
        "Free device memory at each startup milestone, as SGLang measured it.",
        ["tp_rank", "phase"],
    )
    for rank, pool in sorted((progress.ranks if progress else {}).items()):
        label = str(rank)
        if pool.kv_tokens is not None:
            kv.add_metric([label], pool.kv_tokens)
        if pool.mamba_slots is not None:
            slots.add_metric([label], pool.mamba_slots)
        if pool.weights_bytes is not None:
            weights.add_metric([label], pool.weights_bytes)
        for name, size in sorted(pool.pools.items()):
            pools.add_metric([label, name], size)
        for milestone, size in sorted(pool.available.items()):
            available.add_metric([label, milestone], size)
    return [kv, pools, slots, weights, available]


class SentinelCollector(Collector):
    """Registered once; every scrape asks the daemon for a fresh snapshot."""

    def __init__(self, snapshot: Callable[[], Snapshot]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterable[Metric]:
        return families(self._snapshot())


def serve(host: str, port: int, snapshot: Callable[[], Snapshot]) -> tuple[object, object]:
    """Start /metrics on host:port (and only there) in a background thread.

    A registry of our own: the exposition holds the sglang_sentinel namespace only.
    Returns (server, thread); ``server.shutdown()`` stops it.
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SentinelCollector(snapshot))
    return start_http_server(port, addr=host, registry=registry)
