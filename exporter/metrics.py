"""The Prometheus view of the daemon, built at scrape time from one snapshot of its state.

No client-side metric objects and no multiprocess mode: the daemon keeps plain counters
and the attempt's progress, and a scrape turns one consistent snapshot into metric families
rendered by exposition.py. Label values come from
closed sets (states, failure classes, pools, milestones, configured profile names, TP
ranks), never from raw log text or pids.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from exporter import __version__, exposition
from exporter.attempt.progress import COUNTED_STEPS, AttemptProgress
from exporter.attempt.snapshot import REAPED_ORIGINS, Snapshot
from exporter.attempt.states import ServerState
from exporter.diagnosis.planner import VERDICTS
from exporter.diagnosis.taxonomy import REMEDIED, FailureClass
from exporter.exposition import Family
from exporter.exposition import sentinel_counter as _counter
from exporter.exposition import sentinel_gauge as _gauge
from exporter.telemetry.health import collector_families
from exporter.telemetry.registry import SOURCES
from exporter.telemetry.source import Reading

FAILURE_CLASSES = tuple(c.value for c in FailureClass if c is not FailureClass.NONE)
RESTART_REASONS = (*FAILURE_CLASSES, "config_reload")
REMEDY_CLASSES = tuple(sorted(c.value for c in REMEDIED))


def families(snap: Snapshot) -> list[Family]:
    """Every metric family for one snapshot; pure, so it is tested without a server."""
    return [
        *_server_families(snap),
        *_outcome_families(snap),
        *_profile_families(snap),
        *_pool_families(snap.progress),
        *_startup_families(snap.progress, snap.last_progress_time),
        *_planned_families(snap),
        *_log_families(snap),
        *_runtime_families(snap.progress),
        _reaped_family(snap.reaped),
        *_source_families(snap.sources),
    ]


def _server_families(snap: Snapshot) -> list[Family]:
    build = _gauge("build_info", "sglang-sentinel build; always 1.", ["version"])
    build.add([__version__], 1)
    state = _gauge("server_state", "1 for the server's current state, else 0.", ["state"])
    for candidate in ServerState:
        state.add([candidate.value], 1.0 if candidate is snap.state else 0.0)
    up = _gauge("server_up", "1 when the server is serving and healthy.")
    up.add([], 1.0 if snap.state is ServerState.READY else 0.0)
    return [build, state, up]


def _outcome_families(snap: Snapshot) -> list[Family]:
    """Launches and how attempts ended."""
    attempts = _counter("attempts", "Launch attempts (adopted servers included).")
    attempts.add([], snap.attempts_total)
    # Every label value from 0: increase() cannot see the first event of a series that is
    # born with it.
    restarts = _counter("restarts", "Relaunches, by why the previous attempt ended.", ["reason"])
    for reason in RESTART_REASONS:
        restarts.add([reason], snap.restarts.get(reason, 0))
    failures = _counter("failures", "Ended attempts, by failure class.", ["class"])
    last = _gauge(
        "last_failure_timestamp_seconds", "When the last failure of each class ended.", ["class"]
    )
    for failure_class in FAILURE_CLASSES:
        failures.add([failure_class], snap.failures.get(failure_class, 0))
        if failure_class in snap.last_failure_time:
            last.add([failure_class], snap.last_failure_time[failure_class])
    return [attempts, restarts, failures, last]


def _profile_families(snap: Snapshot) -> list[Family]:
    profile = _gauge("profile_info", "The profile of the current attempt; always 1.", ["profile"])
    level = _gauge("fallback_level", "Index of the current profile in the ladder (0 = first).")
    if snap.profile is not None:
        profile.add([snap.profile], 1)
        level.add([], snap.profile_index or 0)
    startup = _gauge(
        "startup_duration_seconds", "Launch to serving, for the last attempt that served."
    )
    if snap.startup_duration_s is not None:
        startup.add([], snap.startup_duration_s)
    return [profile, level, startup]


def _log_families(snap: Snapshot) -> list[Family]:
    """What the log showed, and what the daemon made of it: hangs, automatic remedies."""
    lines = _counter("log_lines", "Log lines read, by whether the grammar knew them.", ["matched"])
    for matched in (True, False):
        lines.add([str(matched).lower()], snap.log_lines.get(matched, 0))
    last_line = _gauge("log_last_line_timestamp_seconds", "When the attempt's log last grew.")
    if snap.last_line_time is not None:
        last_line.add([], snap.last_line_time)
    last_batch = _gauge(
        "log_last_batch_timestamp_seconds",
        "When the attempt's log last showed a batch line (the scheduler working).",
    )
    if snap.last_batch_time is not None:
        last_batch.add([], snap.last_batch_time)
    hangs = _counter("hangs", "Attempts ended as hangs (startup stalls and stuck servers).")
    hangs.add([], snap.hangs)
    remedies = _counter(
        "automatic_remedies", "Automatic flag changes the daemon made, by failure class.", ["class"]
    )
    for failure_class in REMEDY_CLASSES:
        remedies.add([failure_class], snap.remedies.get(failure_class, 0))
    return [lines, last_line, last_batch, hangs, remedies]


def _source_families(readings: Mapping[str, Reading]) -> list[Family]:
    """Each registered source's families from its part of the snapshot (None where the
    snapshot carries none), then the health of those it carries."""
    out: list[Family] = []
    for source in SOURCES:
        out += source.families(readings.get(source.name))
    out += collector_families({name: reading.health for name, reading in readings.items()})
    return out


def _runtime_families(progress: AttemptProgress | None) -> list[Family]:
    """The latest batch-line numbers of the serving attempt."""
    runtime = progress.runtime if progress else None
    gauges = [
        ("running_requests", "Requests running, from the last batch line.", "running_requests"),
        ("queued_requests", "Requests waiting, from the last batch line.", "queued_requests"),
        ("token_usage_ratio", "KV pool usage (0-1), from the last batch line.", "token_usage"),
        (
            "generation_throughput_tokens_per_second",
            "Decode throughput, from the last decode line.",
            "gen_throughput",
        ),
    ]
    out: list[Family] = []
    for name, doc, attribute in gauges:
        family = _gauge(name, doc)
        value = getattr(runtime, attribute) if runtime else None
        if value is not None:
            family.add([], value)
        out.append(family)
    retractions = _counter("retractions", "Requests retracted for lack of KV cache (this attempt).")
    retractions.add([], runtime.retractions if runtime else 0)
    out.append(retractions)
    return out


def _reaped_family(reaped: Mapping[str, int]) -> Family:
    family = _counter(
        "reaped_processes",
        "Zombie children the daemon reaped (as PID 1 or subreaper), by whose they were.",
        ["origin"],
    )
    for origin in REAPED_ORIGINS:
        family.add([origin], reaped.get(origin, 0))
    return family


def _startup_families(progress: AttemptProgress | None, last: float | None) -> list[Family]:
    ratio = _gauge(
        "startup_progress_ratio",
        "How far a startup phase is (0-1): weight shards loaded, CUDA-graph batch sizes "
        "captured, from SGLang's progress bars.",
        ["phase"],
    )
    for counter, step in COUNTED_STEPS.items():
        value = progress.ratio(counter) if progress else None
        if value is not None:
            ratio.add([step.label], value)
    moved = _gauge(
        "startup_last_progress_timestamp_seconds",
        "When the attempt's startup last moved (a phase, a shard, a graph batch size).",
    )
    if last is not None:
        moved.add([], last)
    return [ratio, moved]


def _planned_families(snap: Snapshot) -> list[Family]:
    tokens = _gauge(
        "planned_kv_cache_tokens",
        "KV cache tokens the pre-flight predicts for the next or current launch.",
    )
    verdict = _gauge(
        "planned_verdict",
        "1 for the pre-flight's verdict on the next or current launch's command, else 0.",
        ["verdict"],
    )
    preflight = snap.preflight
    if preflight is not None:
        if preflight.planned_tokens is not None:
            tokens.add([], preflight.planned_tokens)
        for candidate in VERDICTS:
            verdict.add([candidate], 1.0 if candidate == preflight.launch_verdict else 0.0)
    return [tokens, verdict]


def _pool_families(progress: AttemptProgress | None) -> list[Family]:
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
            kv.add([label], pool.kv_tokens)
        if pool.mamba_slots is not None or pool.kv_tokens is not None:
            # a pool sized without linear-attention state has zero slots, not an unknown
            slots.add([label], pool.mamba_slots or 0)
        if pool.weights_bytes is not None:
            weights.add([label], pool.weights_bytes)
        for name, size in sorted(pool.pools.items()):
            pools.add([label, name], size)
        for milestone, size in sorted(pool.available.items()):
            available.add([label, milestone], size)
    return [kv, pools, slots, weights, available]


def serve(
    host: str,
    port: int,
    snapshot: Callable[[], Snapshot],
    routes: Mapping[str, Callable[[], exposition.Response]] | None = None,
) -> tuple[object, object]:
    """Start /metrics (and ``routes``: the daemon's probe endpoints) on host:port, and only
    there, in a background thread; every scrape renders one fresh snapshot. Returns
    (server, thread); ``server.shutdown()`` stops it."""
    return exposition.serve(host, port, lambda: families(snapshot()), routes)
