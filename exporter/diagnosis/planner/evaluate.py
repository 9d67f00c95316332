"""One evaluation: what SGLang does with one set of flags, from the free memory through
the version's sizing to the headroom left for CUDA graphs, with notes on why."""

from __future__ import annotations

from collections.abc import Mapping

from exporter.diagnosis.planner.budget import budget_steps, headroom, what_ate
from exporter.diagnosis.planner.calibration import Calibration
from exporter.diagnosis.planner.cells import pool_cell_bytes, state_bytes_per_request
from exporter.diagnosis.planner.launch import Launch, read_launch
from exporter.diagnosis.planner.memory import Memory, draft_loaded_before_sizing, memory
from exporter.diagnosis.planner.model import Model
from exporter.diagnosis.planner.reserves import default_mem_fraction, reserve_mib
from exporter.diagnosis.planner.sizing import Pools, Sizing, mamba_ratio, radix_off
from exporter.diagnosis.planner.types import FITS, GIB, MIB, Plan, PlanError, gib
from exporter.diagnosis.taxonomy import FailureClass


def evaluate(
    model: Model,
    flags: Mapping[str, object],
    gpu_memory_bytes: int,
    gpus: int,
    version: str,
    calibration: Calibration | None,
) -> Plan:
    """The plan for exactly these flags, without suggestions."""
    launch = read_launch(flags, version, model)
    _check_parallelism(model, launch, gpus)
    mem = memory(model, launch, gpu_memory_bytes, calibration)
    notes: list[str] = []
    fraction, fraction_source = _fraction(model, launch, gpu_memory_bytes, calibration)
    n = launch.max_running_requests
    if n is None and launch.speculative is not None:
        n = 48  # ServerArgs resets it for speculative decoding (server_args.py:2362-2366)
        notes.append(
            "speculative decoding set max_running_requests to 48: it sizes the "
            "reservations even if 48 requests never come"
        )
    after = mem.after
    if draft_loaded_before_sizing(launch):
        after -= mem.draft or 0
    sizing = launch.sizer.size(model, launch, Pools(mem.free / GIB, after / GIB, fraction, n))
    context = launch.context_length or model.context_length
    if launch.context_length and launch.context_length > model.context_length:
        sizing.verdict = FailureClass.INVALID_ARGUMENT.value
        sizing.failure = (
            f"ValueError: --context-length {launch.context_length} is greater than the "
            f"derived context_length ({model.context_length})"
        )
    budget = budget_steps(model, launch, mem, fraction, fraction_source, sizing, n, after)
    steps, left = headroom(model, launch, mem, fraction, sizing, n, context)
    if sizing.verdict == FITS:
        budget += steps
        _check_graphs(model, launch, gpu_memory_bytes, left, sizing)
    notes += _notes(model, launch, sizing, context, mem)
    return Plan(
        verdict=sizing.verdict,
        version=version,
        budget=budget,
        max_total_num_tokens=sizing.tokens,
        mamba_cache_slots=sizing.slots,
        max_running_requests=sizing.running,
        headroom_bytes=left,
        what_ate_the_budget=what_ate(budget),
        notes=notes,
        inputs=_inputs(model, launch, mem, fraction, context, n),
    )


def _inputs(
    model: Model, launch: Launch, mem: Memory, fraction: float, context: int, n: int | None
) -> dict[str, object]:
    """What the arithmetic used, for the plan's JSON."""
    return {
        "calibrated": mem.free_source == "the log",
        "mem_fraction_static": fraction,
        "context_length": context,
        "kv_cell_bytes": pool_cell_bytes(model, launch),
        "state_bytes_per_request": state_bytes_per_request(model, launch),
        "max_running_requests": n,
        "speculative_num_draft_tokens": launch.draft_tokens or None,
        "tp_size": launch.tp,
    }


def _check_parallelism(model: Model, launch: Launch, gpus: int) -> None:
    world = launch.tp * launch.pp * (1 if launch.dp_attention else launch.dp)
    if world > gpus:
        raise PlanError(f"the flags need {world} GPUs (tp x pp x dp), {gpus} given")
    if model.heads % launch.attn_tp:
        raise PlanError(f"--tp-size {launch.tp} does not divide the {model.heads} attention heads")
    if launch.pp > model.layers:
        raise PlanError(f"--pp-size {launch.pp} exceeds the {model.layers} layers")


def _fraction(
    model: Model, launch: Launch, gpu_memory_bytes: int, calibration: Calibration | None
) -> tuple[float, str]:
    if launch.mem_fraction_static is not None:
        return launch.mem_fraction_static, "the command line"
    if calibration is not None and calibration.mem_fraction_static is not None:
        return calibration.mem_fraction_static, "the log's resolved value"
    return default_mem_fraction(model, launch, gpu_memory_bytes), "SGLang's default for this GPU"


def _check_graphs(
    model: Model, launch: Launch, gpu_memory_bytes: int, left: int, sizing: Sizing
) -> None:
    """Pools that fit can still leave the CUDA graphs too little: SGLang's own reserve
    for them, less a prefill chunk's working set."""
    need = round(reserve_mib(model, launch, gpu_memory_bytes / MIB, activations=False) * MIB)
    if left < need:
        sizing.verdict = FailureClass.CUDA_GRAPH_OOM.value
        sizing.failure = (
            f"{gib(left)} left for CUDA graphs and activations, below the "
            f"{gib(need)} they need: an out-of-memory error after the pools"
        )


def _notes(model: Model, launch: Launch, sizing: Sizing, context: int, mem: Memory) -> list[str]:
    notes = []
    if sizing.failure:
        notes.append(f"SGLang {launch.version} would fail: {sizing.failure}")
    if radix_off(model, launch) and not launch.disable_radix_cache and model.gdn is not None:
        notes.append(
            f"{launch.version} disables the radix cache for {model.architecture} with "
            "speculative decoding: one state slot per running request, "
            "--mamba-full-memory-ratio ignored"
        )
    if sizing.capped is not None:
        notes.append(
            f"max_running_requests is capped to {sizing.capped} by the mamba state cache "
            f"({sizing.slots} slots, {mamba_ratio(launch, radix_off(model, launch))} "
            "per request)"
        )
    if sizing.verdict == FITS and 0 < sizing.tokens < context:
        notes.append(
            f"the KV pool ({sizing.tokens} tokens) is smaller than the context length "
            f"{context}: longer requests will be rejected"
        )
    if launch.speculative not in (None, "NGRAM") and mem.draft is None:
        notes.append("the draft model's size is unknown (no config for it): calibrate from a log")
    if mem.free_source == "estimated":
        notes.append("free memory and weights are estimated from the GPU size and the config")
    return notes
