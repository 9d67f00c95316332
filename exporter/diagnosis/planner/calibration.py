"""The memory numbers one real attempt's log holds, for a plan that matches SGLang's own."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from exporter.logs.events import Event, EventKind
from exporter.sglang.versions import detect_version


@dataclass(frozen=True)
class Calibration:
    """Numbers one real attempt's log holds, per GPU rank (MIN over ranks, as SGLang)."""

    free_before_weights: int | None = None  # P, "Load weight begin. avail mem="
    free_after_weights: int | None = None  # A, after the target's "Load weight end"
    weights: int | None = None  # target weights, "mem usage="
    draft_weights: int | None = None  # a later "Load weight end": the draft model
    mem_fraction_static: float | None = None  # as resolved, from server_args
    max_running_requests: int | None = None
    kv_tokens: int | None = None  # "KV Cache is allocated. #tokens:"
    mamba_slots: int | None = None  # "Mamba Cache is allocated. max_mamba_cache_size:"
    free_after_pools: int | None = None  # "Memory pool end. avail mem="
    version: str | None = None

    def to_json(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    def could_be_from(self, version: str) -> bool:
        """Whether this log may be of SGLang ``version`` (an unknown version may be)."""
        return self.version in (None, version)


# The first of each per rank, and its field: what the pools came to.
_OBSERVED = {
    EventKind.KV_CACHE_ALLOCATED: "tokens",
    EventKind.MAMBA_CACHE_ALLOCATED: "slots",
    EventKind.MEMORY_POOL_END: "avail_bytes",
}


def calibrate(events: Iterable[Event], version: str | None = None) -> Calibration:
    """The memory numbers of one attempt's log (``read_log(text)[1]``).

    Per rank the first weight load is the target's; a second one is the draft's (0.5.23
    loads it before the pools, 0.5.9 after them). SGLang sizes with the MIN over ranks.
    """
    events = list(events)
    begin: dict[int, int] = {}
    after: dict[int, int] = {}
    weights: dict[int, int] = {}
    draft: dict[int, int] = {}
    observed: dict[EventKind, dict[int, int]] = {kind: {} for kind in _OBSERVED}
    fraction = running = None
    for event in events:
        rank = event.tp_rank or 0
        kind = event.kind
        if kind is EventKind.SERVER_ARGS and fraction is None:
            fraction = optional(event.get("mem_fraction_static"), float)
            running = optional(event.get("max_running_requests"), int)
        elif kind is EventKind.WEIGHT_LOAD_BEGIN:
            begin.setdefault(rank, int(event.get("avail_bytes")))
        elif kind is EventKind.WEIGHT_LOAD_END and rank not in after:
            after[rank] = int(event.get("avail_bytes"))
            weights[rank] = int(event.get("usage_bytes"))
        elif kind is EventKind.WEIGHT_LOAD_END:
            draft.setdefault(rank, int(event.get("usage_bytes")))
        elif kind in observed:
            observed[kind].setdefault(rank, int(event.get(_OBSERVED[kind])))
    return Calibration(
        free_before_weights=min(begin.values(), default=None),
        free_after_weights=min(after.values(), default=None),
        weights=max(weights.values(), default=None),
        draft_weights=max(draft.values(), default=None),
        mem_fraction_static=fraction,
        max_running_requests=running,
        kv_tokens=min(observed[EventKind.KV_CACHE_ALLOCATED].values(), default=None),
        mamba_slots=min(observed[EventKind.MAMBA_CACHE_ALLOCATED].values(), default=None),
        free_after_pools=min(observed[EventKind.MEMORY_POOL_END].values(), default=None),
        version=version or detect_version([], events),
    )


def optional(value: object, cast: type) -> Any:
    return None if value is None else cast(value)
