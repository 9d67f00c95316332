"""Typed events read from an SGLang log."""

from __future__ import annotations

import enum
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from exporter.logs.lines import LogLine

FieldValue = int | float | str | bool


class EventKind(enum.Enum):
    """What a log line means. Values are stable: they appear in JSON and tests."""

    # Members are singletons: hash by identity. Enum's own __hash__ is a Python-level call,
    # paid for every event looked up in a set or dict (several per line of a log).
    __hash__ = object.__hash__

    # startup, in the order SGLang prints them
    RESOLUTION_WARNING = "resolution_warning"  # ServerArgs decided something for you
    SERVER_ARGS = "server_args"
    DIST_INIT_BEGIN = "dist_init_begin"
    DIST_INIT_END = "dist_init_end"
    MEMORY_BASELINE = "memory_baseline"
    MEMORY_UNBALANCED = "memory_unbalanced"
    WEIGHT_LOAD_BEGIN = "weight_load_begin"
    WEIGHT_SHARDS = "weight_shards"  # tqdm: "Loading safetensors checkpoint shards: k/n"
    WEIGHT_LOAD_END = "weight_load_end"
    MAMBA_REQUESTS_CAPPED = "mamba_requests_capped"
    MAMBA_CACHE_ALLOCATED = "mamba_cache_allocated"
    KV_CACHE_ALLOCATED = "kv_cache_allocated"
    MEMORY_POOL_END = "memory_pool_end"
    KV_POOL_BELOW_CONTEXT = "kv_pool_below_context"
    CUDA_GRAPH_BEGIN = "cuda_graph_begin"
    CUDA_GRAPH_BATCHES = "cuda_graph_batches"  # tqdm: "Capturing batches (bs=..): k/n"
    CUDA_GRAPH_END = "cuda_graph_end"
    SCHEDULER_READY = "scheduler_ready"  # the max_total_num_tokens=... summary
    STARTUP_TIMINGS = "startup_timings"
    HTTP_STARTED = "http_started"
    SERVER_READY = "server_ready"
    # runtime
    PREFILL_BATCH = "prefill_batch"
    DECODE_BATCH = "decode_batch"
    REQUEST_SERVED = "request_served"  # uvicorn's access log: a generation request answered 200
    RETRACTION = "retraction"
    HEALTH_CHECK_FAILED = "health_check_failed"
    # failure and shutdown
    PROCESS_EXCEPTION = "process_exception"  # "<Process> hit an exception: Traceback..."
    CHILD_FAILED = "child_failed"  # the launcher got SIGQUIT from a child
    SCHEDULER_DIED = "scheduler_died"
    WATCHDOG_TIMEOUT = "watchdog_timeout"
    WARMUP_FAILED = "warmup_failed"
    BIND_FAILED = "bind_failed"
    SIGTERM_RECEIVED = "sigterm_received"
    KILL_PROCESS_TREE = "kill_process_tree"
    ARGUMENT_ERROR = "argument_error"
    TRACEBACK = "traceback"  # assembled from many lines, see tracebacks.py


@dataclass(slots=True)  # not frozen, for speed (see LogLine); never mutated once built
class Event:
    """One meaningful line (or, for TRACEBACK, block) with its numbers parsed.

    Byte quantities are ints in bytes (SGLang's "GB" is GiB), durations floats in seconds.
    """

    kind: EventKind
    line: LogLine
    fields: Mapping[str, FieldValue] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def tp_rank(self) -> int | None:
        return self.line.tp_rank

    def get(self, name: str, default: FieldValue | None = None) -> FieldValue | None:
        return self.fields.get(name, default)


class FieldSource(Protocol):
    """What converts a regex match into fields (a grammar's line pattern)."""

    def fields_of(self, match: re.Match[str]) -> dict[str, FieldValue]: ...


class LazyFields(Mapping[str, FieldValue]):
    """A matched line's fields, converted from its regex match when first read.

    Batch lines are most of a serving log and their numbers are read for a few of them
    (the latest, the ones an excerpt keeps): converting a dozen groups of every one was
    the biggest cost of reading a log. Read-only, like the MappingProxyType of the others.
    """

    __slots__ = ("_fields", "_match", "_source")

    def __init__(self, source: FieldSource, match: re.Match[str]) -> None:
        self._source = source  # not a bound method: one object less per batch line
        self._match = match
        self._fields: dict[str, FieldValue] | None = None

    def _resolved(self) -> dict[str, FieldValue]:
        fields = self._fields
        if fields is None:  # two threads converting at once get equal dicts: harmless
            fields = self._fields = self._source.fields_of(self._match)
        return fields

    def __getitem__(self, name: str) -> FieldValue:
        return self._resolved()[name]

    def get(self, name: str, default: FieldValue | None = None) -> FieldValue | None:
        return self._resolved().get(name, default)

    def __contains__(self, name: object) -> bool:
        return name in self._resolved()

    def __iter__(self) -> Iterator[str]:
        return iter(self._resolved())

    def __len__(self) -> int:
        return len(self._resolved())

    def __repr__(self) -> str:
        return f"LazyFields({self._resolved()!r})"
