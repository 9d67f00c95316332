"""The budget of one evaluation, step by step: what each reservation before the KV cache
took, what the KV cache got, and what comes out of the static headroom unbudgeted."""

from __future__ import annotations

from collections.abc import Sequence

from exporter.diagnosis.planner.cells import pool_cell_bytes, state_bytes_per_request
from exporter.diagnosis.planner.launch import Launch
from exporter.diagnosis.planner.memory import Memory, draft_loaded_before_sizing
from exporter.diagnosis.planner.model import Model
from exporter.diagnosis.planner.sizing import Sizing, radix_off
from exporter.diagnosis.planner.types import FITS, GIB, BudgetStep, gib, mib
from exporter.diagnosis.taxonomy import FailureClass

# The reservations made before the KV cache: the largest one "ate the budget".
_RESERVATIONS = (
    "static_headroom",
    "multimodal_reservation",
    "speculative_reservation",
    "mamba_state",
)


def budget_steps(
    model: Model,
    launch: Launch,
    memory: Memory,
    fraction: float,
    fraction_source: str,
    sizing: Sizing,
    n: int | None,
    after: float,
) -> list[BudgetStep]:
    static = round(memory.free * (1 - fraction))
    steps = [
        BudgetStep(
            "free_before_weights",
            memory.free,
            f"free GPU memory per rank before the weights load ({memory.free_source})",
        ),
        BudgetStep(
            "weights",
            memory.weights,
            f"{model.architecture} weights per rank at tp={launch.tp} ({memory.weights_source})",
        ),
    ]
    if draft_loaded_before_sizing(launch):
        steps.append(
            BudgetStep(
                "draft_weights",
                round(memory.after - after),
                f"the draft model's weights, loaded before sizing ({memory.draft_source})",
            )
        )
    draft_from_headroom = not launch.sizer.loads_draft_before_sizing and launch.speculative
    steps.append(
        BudgetStep(
            "static_headroom",
            static,
            f"(1 - {fraction:g}) x {gib(memory.free)} kept free for activations, CUDA graphs"
            + (" and the draft model" if draft_from_headroom else "")
            + f" (--mem-fraction-static {fraction:g}: {fraction_source})",
        )
    )
    steps += _reservations(model, launch, sizing, n)
    steps.append(_kv_cache(model, launch, sizing))
    return steps


def _reservations(model: Model, launch: Launch, sizing: Sizing, n: int | None) -> list[BudgetStep]:
    """What the sizing reserved before the KV cache, beyond the static headroom."""
    state = state_bytes_per_request(model, launch)
    steps = []
    if sizing.multimodal:
        steps.append(
            BudgetStep(
                "multimodal_reservation",
                round(sizing.multimodal * GIB),
                "reserved for the multimodal embedding cache and feature transport "
                f"({launch.version})",
            )
        )
    if sizing.spec_reserve:
        requests = round(sizing.spec_reserve * GIB / (state * launch.draft_tokens))
        steps.append(
            BudgetStep(
                "speculative_reservation",
                round(sizing.spec_reserve * GIB),
                f"intermediate recurrent state for {requests} request slots x "
                f"{launch.draft_tokens} draft tokens x {mib(state)} per request, "
                "reserved before any KV cache",
            )
        )
    if sizing.slots is not None:
        slot_zero = launch.sizer.budgets_slot_zero and sizing.slots > 0
        steps.append(
            BudgetStep(
                "mamba_state",
                round(sizing.mamba * GIB),
                f"{sizing.slots + (1 if slot_zero else 0)} state slots x {mib(state)}: "
                + _slots_reason(model, launch, n),
            )
        )
    return steps


def _kv_cache(model: Model, launch: Launch, sizing: Sizing) -> BudgetStep:
    cell = pool_cell_bytes(model, launch)
    kv_bytes = round(sizing.kv_budget * GIB)
    if sizing.verdict == FailureClass.POOL_INIT_OOM.value or sizing.tokens <= 0:
        explanation = f"left for the KV cache: nothing, short by {gib(-kv_bytes)}"
        if kv_bytes > 0:
            explanation = f"left for the KV cache: {gib(kv_bytes)}, not enough to serve"
    else:
        explanation = f"{sizing.tokens} tokens x {cell} B per token"
        kv_bytes = (sizing.tokens + launch.page_size) * cell
    return BudgetStep("kv_cache", kv_bytes, explanation)


def _slots_reason(model: Model, launch: Launch, n: int | None) -> str:
    if launch.max_mamba_cache_size is not None:
        return "as --max-mamba-cache-size asks"
    if radix_off(model, launch) and n is not None:
        if launch.disable_radix_cache:
            return "one per running request, the radix cache being disabled"
        return (
            f"one per running request: {launch.version} disables the radix cache for this "
            "model with speculative decoding, so --mamba-full-memory-ratio is ignored"
        )
    return f"--mamba-full-memory-ratio {launch.mamba_ratio:g} of the state-to-KV split"


def headroom(
    model: Model,
    launch: Launch,
    memory: Memory,
    fraction: float,
    sizing: Sizing,
    n: int | None,
    context: int,
) -> tuple[list[BudgetStep], int]:
    """What comes out of the static headroom without being budgeted, and what is left."""
    left = round(memory.free * (1 - fraction))
    steps: list[BudgetStep] = []
    if sizing.verdict != FITS:
        return steps, left
    cell = pool_cell_bytes(model, launch)
    unused = round(sizing.kv_budget * GIB) - sizing.tokens * cell
    if launch.max_total_tokens is not None and unused > cell * launch.page_size:
        steps.append(
            BudgetStep(
                "unused_by_cap",
                unused,
                f"left free by --max-total-tokens {launch.max_total_tokens}: more headroom",
            )
        )
        left += unused
    draft = launch.draft_tokens if launch.speculative else 0
    table = sizing.max_num_reqs * (context + 4 + draft) * 4
    steps.append(
        BudgetStep(
            "request_table",
            table,
            f"{sizing.max_num_reqs} request slots x {context + 4 + draft} int32 token indices",
        )
    )
    left -= table
    unbudgeted = launch.sizer.unbudgeted(model, launch, memory, sizing, n)
    steps += unbudgeted
    left -= sum(step.bytes for step in unbudgeted)
    steps.append(BudgetStep("headroom", left, "left for CUDA graphs, activations and sampling"))
    return steps, left


def what_ate(budget: Sequence[BudgetStep]) -> str | None:
    reservations = [step for step in budget if step.name in _RESERVATIONS]
    return max(reservations, key=lambda step: step.bytes).name if reservations else None
