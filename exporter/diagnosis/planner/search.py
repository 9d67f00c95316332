"""``plan()``: evaluate the flags as given, then search the cheapest flag changes that make
the launch fit (§4.10's ladder below the fraction, the fraction last or first)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from exporter.diagnosis.planner.calibration import Calibration
from exporter.diagnosis.planner.cells import ssm_bytes
from exporter.diagnosis.planner.evaluate import evaluate
from exporter.diagnosis.planner.launch import read_launch
from exporter.diagnosis.planner.model import Model, read_model
from exporter.diagnosis.planner.types import DEFAULT_MAX_FRACTION, Plan, PlanError, Suggestion
from exporter.diagnosis.taxonomy import FailureClass
from exporter.sglang.flags import normalize_flags
from exporter.sglang.versions import DEFAULT_VERSION

_MAX_RUNNING_LADDER = (64, 48, 32, 24, 16, 12, 8, 6, 4, 3, 2, 1)
Patch = tuple[dict[str, object], tuple[str, ...]]


def plan(
    model_config: Mapping[str, Any],
    gpu_memory_bytes: int,
    gpus: int = 1,
    flags: Mapping[str, object] | None = None,
    version: str = DEFAULT_VERSION,
    calibration: Calibration | None = None,
    max_fraction: float = DEFAULT_MAX_FRACTION,
) -> Plan:
    """Predict what SGLang ``version`` does with these flags on ``gpus`` GPUs of
    ``gpu_memory_bytes`` each, and the cheapest flag changes that make it fit."""
    if not isinstance(gpu_memory_bytes, int) or gpu_memory_bytes <= 0:
        raise PlanError(f"GPU memory must be a positive number of bytes, got {gpu_memory_bytes!r}")
    if not isinstance(gpus, int) or gpus < 1:
        raise PlanError(f"the GPU count must be at least 1, got {gpus!r}")
    if not 0 < max_fraction <= 1:
        raise PlanError(f"the maximum fraction {max_fraction} is outside (0, 1]")
    model = read_model(model_config)
    flags = normalize_flags(flags or {})
    base = evaluate(model, flags, gpu_memory_bytes, gpus, version, calibration)
    if base.verdict == FailureClass.INVALID_ARGUMENT.value or _acceptable(base, flags, model):
        return base
    suggestions = list(
        _suggestions(model, flags, base, gpu_memory_bytes, gpus, calibration, max_fraction)
    )
    return replace(base, suggestions=suggestions)


def _target_tokens(flags: Mapping[str, object], model: Model, version: str) -> int:
    """A suggestion must hold one request of the full context (or the --max-total-tokens
    cap, if lower): below that SGLang starts but rejects long requests."""
    launch = read_launch(flags, version, model)
    target = launch.context_length or model.context_length
    return min(target, launch.max_total_tokens) if launch.max_total_tokens else target


def _acceptable(candidate: Plan, flags: Mapping[str, object], model: Model) -> bool:
    return candidate.fits and candidate.max_total_num_tokens >= _target_tokens(
        flags, model, candidate.version
    )


def _rungs(model: Model, flags: Mapping[str, object], base: Plan) -> Iterator[list[Patch]]:
    """The ladder below the fraction, least loss of serving capacity first (§4.10): fewer
    running requests, fewer draft steps, a bfloat16 SSM state, no speculative decoding;
    each rung's changes mildest first."""
    launch = read_launch(flags, base.version, model)
    if launch.speculative is not None or model.gdn is not None:
        current = base.inputs["max_running_requests"] or math.inf
        yield [({"max-running-requests": n}, ()) for n in _MAX_RUNNING_LADDER if n < current]
    if launch.speculative not in (None, "NGRAM") and launch.topk == 1:
        yield [
            ({"speculative-num-steps": s, "speculative-num-draft-tokens": s + 1}, ())
            for s in range(launch.steps - 1, 0, -1)
        ]
    if model.gdn is not None and ssm_bytes(model, launch) > 2:
        yield [({"mamba-ssm-dtype": "bfloat16"}, ())]
    if launch.speculative is not None:
        yield [({}, tuple(name for name in flags if name.startswith("speculative-")))]


def _fraction_patches(base: Plan, max_fraction: float) -> list[Patch]:
    """--mem-fraction-static in steps of 0.01, nearest first: up to the ceiling for a pool
    that does not fit, down when the headroom is what is short."""
    fraction = float(base.inputs["mem_fraction_static"])
    cents = round(fraction * 100)
    if base.verdict == FailureClass.CUDA_GRAPH_OOM.value:
        values = [c / 100 for c in range(cents - 1, 9, -1)]
    else:
        values = [c / 100 for c in range(cents + 1, int(max_fraction * 100 + 1e-9) + 1)]
    return [({"mem-fraction-static": value}, ()) for value in values if value != fraction]


def _suggestions(
    model: Model,
    flags: Mapping[str, object],
    base: Plan,
    gpu_memory_bytes: int,
    gpus: int,
    calibration: Calibration | None,
    max_fraction: float,
) -> Iterator[Suggestion]:
    """The first acceptable change of every rung, the fraction last (first when the
    headroom is short: lowering it is that failure's remedy). When no single change is
    enough, one combination: the rungs at their strongest, then the fraction."""

    def first_acceptable(flag_sets: Iterable[dict[str, object]]) -> Suggestion | None:
        for patched in flag_sets:
            try:
                candidate = evaluate(
                    model, patched, gpu_memory_bytes, gpus, base.version, calibration
                )
            except PlanError:
                continue
            if _acceptable(candidate, patched, model):
                return _suggestion(flags, patched, candidate)
        return None

    rungs = list(_rungs(model, flags, base))
    fractions = _fraction_patches(base, max_fraction)
    if base.verdict == FailureClass.CUDA_GRAPH_OOM.value:
        rungs.insert(0, fractions)
    else:
        rungs.append(fractions)
    singles = [first_acceptable(_apply(flags, patch) for patch in patches) for patches in rungs]
    found = [suggestion for suggestion in singles if suggestion is not None]
    if found:
        yield from found
        return
    ladder = [*_rungs(model, flags, base), fractions]
    accumulated = dict(flags)
    for patches in ladder:
        combined = first_acceptable(_apply(accumulated, patch) for patch in patches)
        if combined is not None:
            yield _relaxed(combined, ladder, flags, first_acceptable)
            return
        if patches and patches is not fractions:
            accumulated = _apply(accumulated, patches[-1])


def _relaxed(
    found: Suggestion,
    ladder: Sequence[list[Patch]],
    original: Mapping[str, object],
    first_acceptable: Callable[[Iterable[dict[str, object]]], Suggestion | None],
) -> Suggestion:
    """Undo what a combination does not need: each rung back to the original flags, else
    to its mildest change that still fits (N=1 is moot once speculation is dropped)."""
    current = found
    for patches in ladder:
        touched = {name for changes, removed in patches for name in (*changes, *removed)}
        flags = {**original, **current.set}
        flags = {k: v for k, v in flags.items() if k not in current.remove}
        undone = {k: v for k, v in flags.items() if k not in touched} | {
            k: original[k] for k in touched if k in original
        }
        milder = first_acceptable([undone, *(_apply(undone, patch) for patch in patches)])
        if milder is not None:
            current = milder
    return current


def _apply(flags: Mapping[str, object], patch: Patch) -> dict[str, object]:
    changes, removed = patch
    return {k: v for k, v in flags.items() if k not in removed} | changes


def _suggestion(original: Mapping[str, object], patched: dict, candidate: Plan) -> Suggestion:
    changed = {k: v for k, v in patched.items() if original.get(k) != v}
    removed = tuple(k for k in original if k not in patched)
    words = [f"--{k} {v}" for k, v in changed.items()]
    if removed:
        words.append("remove " + " ".join(f"--{k}" for k in removed))
    return Suggestion(" ".join(words), changed, removed, candidate)
