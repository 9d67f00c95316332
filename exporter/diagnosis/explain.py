"""A short human diagnosis for a classification, with the numbers the log holds.

SGLang's own message names one knob; this explains the budget: how much memory there was,
what the weights took, what the static fraction held back, and what else reserved memory.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from exporter.diagnosis.taxonomy import SPECS, FailureClass
from exporter.logs.events import Event, EventKind
from exporter.logs.grammar import GIB
from exporter.logs.lines import LogLine

if TYPE_CHECKING:
    from exporter.diagnosis.classify import Outcome

_FRACTION = re.compile(r"mem[-_]fraction[-_]static[=:]\s*'?(?P<value>[\d.]+)")
_TORCH_OOM = re.compile(
    r"Tried to allocate (?P<want>[\d.]+) (?P<want_unit>[KMG]i?B)\..*?"
    r"total capacity of (?P<total>[\d.]+) (?P<total_unit>[KMG]i?B) of which "
    r"(?P<free>[\d.]+) (?P<free_unit>[KMG]i?B) is free"
)
_OTHER_PROCESS = re.compile(r"Process \d+ has (?P<used>[\d.]+) (?P<unit>[KMG]i?B) memory in use")
_UNITS = {"KB": 1 << 10, "KiB": 1 << 10, "MB": 1 << 20, "MiB": 1 << 20, "GB": GIB, "GiB": GIB}


def gib(value: float) -> str:
    return f"{value / GIB:.2f} GiB"


def _bytes(amount: str, unit: str) -> float:
    return float(amount) * _UNITS[unit]


def _first(events: Sequence[Event], kind: EventKind) -> Event | None:
    return next((e for e in events if e.kind is kind), None)


def _fraction(root: LogLine, events: Sequence[Event]) -> float | None:
    match = _FRACTION.search(root.message)
    if match:
        return float(match.group("value").rstrip("."))
    args = _first(events, EventKind.SERVER_ARGS)
    value = args.get("mem_fraction_static") if args else None
    return float(value) if isinstance(value, (int, float)) else None


def _weights_budget(events: Sequence[Event], fraction: float | None) -> list[str]:
    """Before/after weights and the static budget, as 0.5.9's init_memory_pool computes it."""
    begin = _first(events, EventKind.WEIGHT_LOAD_BEGIN)
    end = _first(events, EventKind.WEIGHT_LOAD_END)
    if begin is None or end is None:
        return []
    before, after = float(begin.get("avail_bytes")), float(end.get("avail_bytes"))
    parts = [
        f"{gib(before)} free before weights, {gib(float(end.get('usage_bytes')))} of weights "
        f"({end.get('model_type')}), {gib(after)} left"
    ]
    if fraction is not None:
        held_back = before * (1 - fraction)
        parts.append(
            f"--mem-fraction-static={fraction:g} holds back {gib(held_back)} for activations "
            f"and graphs, leaving {gib(after - held_back)} for the KV and state pools"
        )
    return parts


def _reservations(events: Sequence[Event]) -> list[str]:
    """What SGLang decided on its own that reserves memory before the KV pool."""
    notes = []
    for event in events:
        if event.kind is not EventKind.RESOLUTION_WARNING:
            continue
        if event.get("setting") == "max_running_requests":
            notes.append(
                f"speculative decoding auto-forced max_running_requests={event.get('value')}, "
                "and a hybrid linear-attention model reserves recurrent state for every one of "
                "them (times the draft tokens) before any KV cache is sized"
            )
        elif event.get("setting") == "disable_radix_cache":
            notes.append(
                "the radix cache was disabled for speculative decoding, so the mamba state pool "
                "is sized by max_running_requests and --mamba-full-memory-ratio is ignored"
            )
    return notes


def _torch_oom(root: LogLine) -> list[str]:
    match = _TORCH_OOM.search(root.message)
    if match is None:
        return []
    want = _bytes(match.group("want"), match.group("want_unit"))
    total = _bytes(match.group("total"), match.group("total_unit"))
    free = _bytes(match.group("free"), match.group("free_unit"))
    parts = [f"asked for {gib(want)} with {gib(free)} free of {gib(total)}"]
    others = [
        _bytes(m.group("used"), m.group("unit")) for m in _OTHER_PROCESS.finditer(root.message)
    ]
    if len(others) > 1:
        parts.append(f"{len(others)} processes hold {gib(sum(others))} on that GPU")
    return parts


def _graph_headroom(events: Sequence[Event]) -> list[str]:
    pool_end = _first(events, EventKind.MEMORY_POOL_END)
    if pool_end is None:
        return []
    return [f"the pools left {gib(float(pool_end.get('avail_bytes')))} for CUDA graphs"]


def diagnose(
    failure_class: FailureClass, root: LogLine, events: Sequence[Event], outcome: Outcome
) -> str:
    details: list[str] = []
    if failure_class is FailureClass.POOL_INIT_OOM:
        details += _weights_budget(events, _fraction(root, events))
        details += _reservations(events)
    elif failure_class is FailureClass.WEIGHTS_OOM:
        begin = _first(events, EventKind.WEIGHT_LOAD_BEGIN)
        if begin is not None:
            details.append(f"{gib(float(begin.get('avail_bytes')))} free when loading began")
        details += _torch_oom(root)
    elif failure_class is FailureClass.CUDA_GRAPH_OOM:
        details += _graph_headroom(events) + _torch_oom(root)
    elif failure_class is FailureClass.RUNTIME_OOM:
        details += _torch_oom(root)
    elif failure_class is FailureClass.PORT_IN_USE and _first(events, EventKind.WARMUP_FAILED):
        details.append("the later warmup failure is a consequence, not the cause")
    if outcome.stall_evidence and failure_class is FailureClass.HANG_TIMEOUT:
        details.insert(0, outcome.stall_evidence)
    if outcome.exit_code is not None and outcome.exit_code < 0:
        details.append(f"the launcher died of signal {-outcome.exit_code}")
    if not details:
        details.append(_shorten(root.message))
    return SPECS[failure_class].summary + ": " + "; ".join(d.rstrip(".") for d in details) + "."


def _shorten(text: str, limit: int = 200) -> str:
    text = text.rstrip(".")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def without_log(failure_class: FailureClass, outcome: Outcome, caveat: str | None = None) -> str:
    """A diagnosis when the log holds nothing to point at (``caveat``: what it shows instead)."""
    if failure_class is FailureClass.NONE:
        return "no failure in the log."
    if caveat is not None:
        return f"{SPECS[failure_class].summary}: {caveat}."
    if outcome.lost_process:
        return (
            f"{SPECS[failure_class].summary}: {outcome.lost_process} died while the launcher kept "
            "running, and the log says nothing about it (killed from outside, e.g. SIGKILL or "
            "the host OOM killer)."
        )
    how = f"exited with status {outcome.exit_code}"
    if outcome.stalled:
        how = f"stopped making progress ({outcome.stall_evidence or 'no detail'})"
    if outcome.exit_code is not None and outcome.exit_code < 0:
        how = f"was killed by signal {-outcome.exit_code}"
    return f"{SPECS[failure_class].summary}: the log shows no error and the launcher {how}."
