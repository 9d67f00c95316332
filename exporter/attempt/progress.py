"""What one attempt's log has shown so far: the startup step reached, how far its weight
shards and CUDA-graph batch sizes are, pool sizes per TP rank, readiness and the latest
runtime numbers. Fed with events, read by the daemon and
the metrics collector. Pure: no I/O, no clock.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from exporter.logs.events import Event, EventKind


class Step(enum.IntEnum):
    """How far an attempt got. Only moves forward (0.5.9 loads its draft model after the
    target's CUDA graphs: that second "Load weight begin" is not a step back)."""

    SPAWNED = 0
    INITIALIZING = 1
    LOADING_WEIGHTS = 2
    ALLOCATING_POOLS = 3
    CAPTURING_GRAPHS = 4
    STARTING_HTTP = 5
    SERVING = 6

    @property
    def label(self) -> str:
        return self.name.lower()


_STEP_OF = {
    EventKind.SERVER_ARGS: Step.INITIALIZING,
    EventKind.DIST_INIT_BEGIN: Step.INITIALIZING,
    EventKind.WEIGHT_LOAD_BEGIN: Step.LOADING_WEIGHTS,
    EventKind.WEIGHT_SHARDS: Step.LOADING_WEIGHTS,
    EventKind.WEIGHT_LOAD_END: Step.ALLOCATING_POOLS,
    EventKind.MAMBA_CACHE_ALLOCATED: Step.ALLOCATING_POOLS,
    EventKind.KV_CACHE_ALLOCATED: Step.ALLOCATING_POOLS,
    EventKind.MEMORY_POOL_END: Step.ALLOCATING_POOLS,
    EventKind.CUDA_GRAPH_BEGIN: Step.CAPTURING_GRAPHS,
    EventKind.CUDA_GRAPH_BATCHES: Step.CAPTURING_GRAPHS,
    EventKind.SCHEDULER_READY: Step.STARTING_HTTP,
    EventKind.HTTP_STARTED: Step.STARTING_HTTP,
    EventKind.SERVER_READY: Step.SERVING,
}
# device_available_bytes{phase}: free device memory at each startup milestone.
_MILESTONE = {
    EventKind.WEIGHT_LOAD_BEGIN: "before_weights",
    EventKind.WEIGHT_LOAD_END: "after_weights",
    EventKind.MEMORY_POOL_END: "after_pools",
    EventKind.CUDA_GRAPH_END: "after_graphs",
    EventKind.SCHEDULER_READY: "ready",
}
# Startup lines that show it moving (every rank's, each milestone); the tqdm counters only
# when their count changes: a redraw of the same count is no progress.
_ADVANCES = frozenset(_STEP_OF) | {
    EventKind.DIST_INIT_END,
    EventKind.MEMORY_BASELINE,
    EventKind.CUDA_GRAPH_END,
}
_COUNTERS = {
    EventKind.WEIGHT_SHARDS: ("shards", "loaded"),
    EventKind.CUDA_GRAPH_BATCHES: ("graph_batches", "captured"),
}
# startup_progress_ratio{phase}: the step each counter measures.
COUNTED_STEPS = {"shards": Step.LOADING_WEIGHTS, "graph_batches": Step.CAPTURING_GRAPHS}
_POOL_EVENTS = frozenset(_MILESTONE) | {
    EventKind.KV_CACHE_ALLOCATED,
    EventKind.MAMBA_CACHE_ALLOCATED,
}
# The runtime numbers batch lines carry; gen_throughput only decode lines.
_BATCH_NUMBERS = (
    ("running_requests", int),
    ("queued_requests", int),
    ("token_usage", float),
    ("gen_throughput", float),
)
_MAMBA_POOLS = (
    ("conv_bytes", "mamba_conv"),
    ("ssm_bytes", "mamba_ssm"),
    ("intermediate_ssm_bytes", "mamba_intermediate_ssm"),
    ("intermediate_conv_bytes", "mamba_intermediate_conv"),
)


@dataclass
class RankPools:
    """One TP rank's memory as the log reports it; the target model's numbers come first,
    a speculative draft model's KV pool is kept apart as pool "draft_kv"."""

    kv_tokens: int | None = None
    weights_bytes: int | None = None
    mamba_slots: int | None = None
    pools: dict[str, int] = field(default_factory=dict)
    available: dict[str, int] = field(default_factory=dict)


@dataclass
class RuntimeStats:
    running_requests: int | None = None
    queued_requests: int | None = None
    token_usage: float | None = None
    gen_throughput: float | None = None
    retractions: int = 0  # retracted requests, summed


@dataclass
class AttemptProgress:
    step: Step = Step.SPAWNED
    ready: bool = False
    ranks: dict[int, RankPools] = field(default_factory=dict)
    max_total_num_tokens: int | None = None
    max_running_requests: int | None = None
    runtime: RuntimeStats = field(default_factory=RuntimeStats)
    sglang_format: str | None = None  # "ServerArgs" (0.5.9 and older) or "dict" (0.5.23)
    shards: tuple[int, int] | None = None  # weight shards (loaded, total), the latest load
    graph_batches: tuple[int, int] | None = None  # CUDA-graph batch sizes (captured, total)
    advances: int = 0  # startup lines that moved it forward: the stall check's pulse

    def ratio(self, counter: str) -> float | None:
        """Done of total for "shards" or "graph_batches"; None before the first bar."""
        count = getattr(self, counter)
        if count is None or count[1] <= 0:
            return None
        return count[0] / count[1]

    def where(self) -> str:
        """Where the startup is, for a human: the step and the counters of the current one."""
        text = f"step '{self.step.label}'"
        if self.step is Step.LOADING_WEIGHTS and self.shards is not None:
            text += f", {self.shards[0]}/{self.shards[1]} weight shards loaded"
        if self.step is Step.CAPTURING_GRAPHS and self.graph_batches is not None:
            captured, total = self.graph_batches
            text += f", {captured}/{total} CUDA-graph batch sizes captured"
        return text

    def copy(self) -> AttemptProgress:
        """A copy that later lines do not change (for a snapshot taken under the lock)."""
        return AttemptProgress(
            step=self.step,
            ready=self.ready,
            ranks={
                rank: replace(pools, pools=dict(pools.pools), available=dict(pools.available))
                for rank, pools in self.ranks.items()
            },
            max_total_num_tokens=self.max_total_num_tokens,
            max_running_requests=self.max_running_requests,
            runtime=replace(self.runtime),
            sglang_format=self.sglang_format,
            shards=self.shards,
            graph_batches=self.graph_batches,
            advances=self.advances,
        )

    def apply(self, events: Sequence[Event]) -> None:
        batches = False
        for event in events:
            kind = event.kind
            # Batch lines (most of a serving log) mark no step: only their numbers count.
            if kind is EventKind.DECODE_BATCH or kind is EventKind.PREFILL_BATCH:
                batches = True
            else:
                self._apply(event)
        if batches:
            self._latest_batch_numbers(events)

    def _apply(self, event: Event) -> None:
        kind = event.kind
        step = _STEP_OF.get(kind)
        if step is not None and step > self.step:
            self.step = step
        counter = _COUNTERS.get(kind)
        if counter is not None:
            self._count(event, *counter)
        elif kind in _ADVANCES and not self.ready:
            self.advances += 1
        if kind is EventKind.SERVER_READY:
            self.ready = True
        elif kind is EventKind.RETRACTION:
            self.runtime.retractions += int(event.get("retracted_requests", 0))
        elif kind is EventKind.SERVER_ARGS:
            self.sglang_format = str(event.get("format"))
        else:
            self._startup(event)

    def _count(self, event: Event, attribute: str, field_name: str) -> None:
        count = (int(event.get(field_name)), int(event.get("total")))
        if count != getattr(self, attribute):
            setattr(self, attribute, count)
            self.advances += 1

    def _startup(self, event: Event) -> None:
        kind = event.kind
        if kind not in _POOL_EVENTS:
            return
        rank = self.ranks.setdefault(event.tp_rank or 0, RankPools())
        milestone = _MILESTONE.get(kind)
        if milestone is not None and "avail_bytes" in event.fields:
            rank.available.setdefault(milestone, int(event.get("avail_bytes")))
        if kind is EventKind.WEIGHT_LOAD_END and rank.weights_bytes is None:
            rank.weights_bytes = int(event.get("usage_bytes"))
        elif kind is EventKind.KV_CACHE_ALLOCATED:
            size = int(event.get("k_bytes", 0)) + int(event.get("v_bytes", 0))
            size += int(event.get("kv_bytes", 0))
            if rank.kv_tokens is None:
                rank.kv_tokens = int(event.get("tokens"))
                rank.pools["kv"] = size
            else:
                rank.pools["draft_kv"] = size
        elif kind is EventKind.MAMBA_CACHE_ALLOCATED and rank.mamba_slots is None:
            rank.mamba_slots = int(event.get("slots"))
            for name, pool in _MAMBA_POOLS:
                if name in event.fields:
                    rank.pools[pool] = int(event.get(name))
        elif kind is EventKind.SCHEDULER_READY:
            self.max_total_num_tokens = int(event.get("max_total_num_tokens"))
            self.max_running_requests = int(event.get("max_running_requests"))

    def _latest_batch_numbers(self, events: Sequence[Event]) -> None:
        """Each runtime number from the latest batch line that has it (a prefill line may
        lack some): the earlier lines' numbers would be overwritten, so they are never read
        and their fields never converted (LazyFields)."""
        missing = list(_BATCH_NUMBERS)
        for event in reversed(events):
            kind = event.kind
            if kind is not EventKind.DECODE_BATCH and kind is not EventKind.PREFILL_BATCH:
                continue
            fields = event.fields
            for number in tuple(missing):
                name, convert = number
                value = fields.get(name)
                if value is not None:
                    setattr(self.runtime, name, convert(value))
                    missing.remove(number)
            if not missing:
                return
