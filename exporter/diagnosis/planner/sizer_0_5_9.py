"""SGLang 0.5.9's side of every version rule: ModelRunner.init_memory_pool →
profile_max_num_token and handle_max_mamba_cache (model_runner_kv_cache_mixin.py), the
draft model loaded after the target's graphs, and the default fraction's reserves."""

from __future__ import annotations

from typing import TYPE_CHECKING

from exporter.diagnosis.planner.cells import (
    draft_kv_layers,
    kv_cell_bytes,
    pool_cell_bytes,
    state_bytes_per_request,
)
from exporter.diagnosis.planner.model import Model
from exporter.diagnosis.planner.sizing import (
    NOT_ENOUGH_MEMORY,
    Pools,
    Sizer,
    Sizing,
    mamba_ratio,
    no_graph_reserve,
    radix_off,
)
from exporter.diagnosis.planner.types import GIB, BudgetStep
from exporter.diagnosis.taxonomy import FailureClass

if TYPE_CHECKING:
    from exporter.diagnosis.planner.launch import Launch
    from exporter.diagnosis.planner.memory import Memory

# 0.5.9 disables the radix cache for these with speculative decoding and no_buffer
# (server_args.py:1759-1763), which pins one state slot per running request.
_RADIX_OFF_WITH_SPEC = (
    "Qwen3NextForCausalLM",
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration",
)


def _size(model: Model, launch: Launch, pools: Pools) -> Sizing:
    """ModelRunner.init_memory_pool → profile_max_num_token, handle_max_mamba_cache."""
    sizing = Sizing()
    n = pools.requests
    cell = pool_cell_bytes(model, launch)
    state = state_bytes_per_request(model, launch)
    rest = pools.after - pools.free * (1 - pools.fraction)
    is_off = radix_off(model, launch)
    if model.gdn is not None:
        if launch.speculative is not None and n is not None:
            sizing.spec_reserve = state * (n // launch.attn_dp) * launch.draft_tokens / GIB
            rest -= sizing.spec_reserve
        if launch.max_mamba_cache_size is not None:
            slots = launch.max_mamba_cache_size // launch.attn_dp
        elif is_off and n is not None:
            slots = n // launch.attn_dp
        else:
            raw = rest * launch.mamba_ratio / (1 + launch.mamba_ratio)
            slots = int((raw * GIB) // state)
        sizing.slots = slots
        sizing.mamba = slots * state / GIB
        rest -= sizing.mamba
    sizing.kv_budget = rest
    profiled = int(rest * GIB) // cell
    context = launch.context_length or model.context_length
    reqs = n if n is not None else min(max(int(profiled / context * 512), 2048), 4096)
    if sizing.slots is not None:
        reqs = min(reqs, sizing.slots // mamba_ratio(launch, is_off))
    tokens = profiled if launch.max_total_tokens is None else min(profiled, launch.max_total_tokens)
    tokens = tokens // launch.page_size * launch.page_size
    sizing.tokens, sizing.max_num_reqs = tokens, reqs
    sizing.running = max(0, min(tokens // 2 if n is None else n // launch.attn_dp, reqs))
    if tokens <= 0:
        sizing.verdict = FailureClass.POOL_INIT_OOM.value
        sizing.failure = NOT_ENOUGH_MEMORY
    elif sizing.running <= 0:
        # The pool starts, but no request can ever get a state slot.
        sizing.verdict = FailureClass.MAMBA_CACHE_EXHAUSTED.value
        sizing.failure = "no running request can get a linear-attention state slot"
    return sizing


def _slots_per_request(launch: Launch) -> int:
    if launch.mamba_strategy == "extra_buffer":
        return 3 + (1 if launch.speculative else 2)
    return 3


def _radix_off_with_speculation(model: Model, launch: Launch) -> bool:
    return (
        model.gdn is not None
        and launch.speculative is not None
        and launch.mamba_strategy != "extra_buffer"
        and model.architecture in _RADIX_OFF_WITH_SPEC
    )


def _unbudgeted(
    model: Model, launch: Launch, memory: Memory, sizing: Sizing, n: int | None
) -> list[BudgetStep]:
    """0.5.9 allocates slot 0 of every state buffer beyond its budget, and loads the
    whole draft model (weights, KV pool) only after the target's CUDA graphs."""
    steps = []
    if model.gdn is not None:
        state = state_bytes_per_request(model, launch)
        pad = state
        if launch.speculative and n is not None:
            # intermediate buffers hold (max_num_reqs + 1) x D states; N x D were budgeted
            pad += state * launch.draft_tokens * (sizing.max_num_reqs + 1 - n // launch.attn_dp)
        steps.append(
            BudgetStep("mamba_padding", pad, "state slots allocated beyond the budget (slot 0)")
        )
    if launch.speculative in (None, "NGRAM"):
        return steps
    if memory.draft is not None:
        steps.append(
            BudgetStep(
                "draft_weights",
                memory.draft,
                f"the draft model at its load peak, after the graphs ({memory.draft_source})",
            )
        )
    draft_cell = kv_cell_bytes(model, launch, layers=draft_kv_layers(model, launch))
    steps.append(
        BudgetStep(
            "draft_kv",
            (sizing.tokens + launch.page_size) * draft_cell,
            f"the draft's own KV pool: {sizing.tokens} tokens x {draft_cell} B",
        )
    )
    return steps


SIZER = Sizer(
    version="0.5.9",
    mamba_strategy_flag="mamba-scheduler-strategy",
    cuda_graph_max_bs_flag="cuda-graph-max-bs",
    loads_draft_before_sizing=False,
    draft_kv_in_target_cell=False,
    draft_builds_own_embedding=True,
    speculative_reserve_mib={
        "EAGLE": 2 * 1024,
        "EAGLE3": 2 * 1024,
        "STANDALONE": 6 * 1024,
        "NGRAM": 0,
    },
    defaults_20_to_35_gib=(2048, 24, 80),
    graph_bs_capped_by_running=False,
    default_reserves_disabled_graphs=True,
    graph_reserve_mib=no_graph_reserve,
    slots_per_request=_slots_per_request,
    radix_off_with_speculation=_radix_off_with_speculation,
    budgets_slot_zero=False,
    size=_size,
    unbudgeted=_unbudgeted,
)
