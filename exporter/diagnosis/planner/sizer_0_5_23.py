"""SGLang 0.5.23's side of every version rule: KVCacheConfigurator._profile_available_bytes
→ _handle_max_mamba_cache, then resolve_max_num_reqs (kv_cache_configurator.py:2990-3409),
the draft model loaded before sizing, and the prefill CUDA graphs' reserve."""

from __future__ import annotations

from typing import TYPE_CHECKING

from exporter.diagnosis.planner.cells import pool_cell_bytes, state_bytes_per_request
from exporter.diagnosis.planner.model import Model
from exporter.diagnosis.planner.sizing import (
    NOT_ENOUGH_MEMORY,
    Pools,
    Sizer,
    Sizing,
    mamba_ratio,
    never_radix_off,
    nothing_unbudgeted,
    radix_off,
)
from exporter.diagnosis.planner.types import GIB
from exporter.diagnosis.taxonomy import FailureClass

if TYPE_CHECKING:
    from exporter.diagnosis.planner.launch import Launch


def _size(model: Model, launch: Launch, pools: Pools) -> Sizing:
    """The multimodal reservation, the state cache, then the KV cache and the requests."""
    sizing = Sizing()
    if model.multimodal and not launch.language_only:
        megabytes = 100 + (1024 if launch.mm_feature_transport in ("cuda_ipc", "cuda_vmm") else 0)
        sizing.multimodal = megabytes / 1024
    rest = pools.after - pools.free * (1 - pools.fraction) - sizing.multimodal
    ratio = mamba_ratio(launch, radix_off(model, launch))
    if model.gdn is not None:
        rest = _state_cache(model, launch, pools, sizing, rest, ratio)
        if sizing.failure:  # not one state slot: the KV cache is never sized
            sizing.kv_budget = rest
            return sizing
        sizing.mamba = (sizing.slots + 1) * state_bytes_per_request(model, launch) / GIB
        rest -= sizing.mamba
    sizing.kv_budget = rest
    cell = pool_cell_bytes(model, launch)
    if rest <= 0:
        sizing.verdict = FailureClass.POOL_INIT_OOM.value
        sizing.failure = (
            "ValueError: Loaded weights leave no GPU memory for the KV cache under "
            f"--mem-fraction-static={pools.fraction}."
        )
        sizing.tokens = int(rest * GIB) // cell
        return sizing
    _requests(model, launch, pools, sizing, int(rest * GIB) // cell, ratio)
    return sizing


def _state_cache(
    model: Model, launch: Launch, pools: Pools, sizing: Sizing, rest: float, ratio: int
) -> float:
    """_handle_max_mamba_cache: the state slots and, with speculative decoding, the
    intermediate states reserved for them; what is left of ``rest``."""
    n = pools.requests
    state = state_bytes_per_request(model, launch)
    spec = launch.speculative is not None and n is not None
    draft = launch.draft_tokens
    requests = max(1, (n or 1) // launch.attn_dp)
    if launch.max_mamba_cache_size is not None:
        slots = launch.max_mamba_cache_size // launch.attn_dp
        if spec:
            sizing.spec_reserve = state * (min(requests, slots // ratio) + 1) * draft / GIB
    elif radix_off(model, launch) and n is not None:
        slots = requests
        if spec:
            sizing.spec_reserve = state * (slots + 1) * draft / GIB
    else:
        budget = rest * launch.mamba_ratio / (1 + launch.mamba_ratio) * GIB
        if spec:
            slots = int((budget - state * (1 + draft)) // (state * (1 + draft / ratio)))
            capped = min(requests, slots // ratio)
            sizing.spec_reserve = state * (capped + 1) * draft / GIB
        else:
            slots = int((budget - state) // state)
    rest -= sizing.spec_reserve
    sizing.slots = slots
    if slots <= 0:
        sizing.verdict = FailureClass.POOL_INIT_OOM.value
        sizing.failure = (
            "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache."
        )
    return rest


def _requests(
    model: Model, launch: Launch, pools: Pools, sizing: Sizing, tokens: int, ratio: int
) -> None:
    """resolve_max_num_reqs: whole pages of tokens, then the requests they and the state
    slots allow."""
    n = pools.requests
    tokens = tokens // launch.page_size * launch.page_size
    if launch.max_total_tokens is not None:
        tokens = min(tokens, launch.max_total_tokens) // launch.page_size * launch.page_size
    context = launch.context_length or model.context_length
    if n is not None:
        reqs = min(max(1, n // launch.attn_dp), tokens // 2)
    else:
        reqs = min(max(min(int(tokens / context * 512), 4096), 2048), tokens // 2)
    if sizing.slots is not None and sizing.slots // ratio < reqs:
        reqs = sizing.slots // ratio
        sizing.capped = reqs
    sizing.tokens, sizing.max_num_reqs, sizing.running = tokens, reqs, max(0, reqs)
    if reqs <= 0:
        sizing.verdict = FailureClass.MAMBA_CACHE_EXHAUSTED.value
        sizing.failure = (
            "RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve "
            "any requests."
        )
    elif tokens <= 0:
        sizing.verdict = FailureClass.POOL_INIT_OOM.value
        sizing.failure = NOT_ENOUGH_MEMORY


def _slots_per_request(launch: Launch) -> int:
    strategy = launch.mamba_strategy
    overlap = not launch.disable_overlap
    if strategy == "auto":
        strategy = "extra_buffer" if overlap or launch.page_size > 1 else "no_buffer"
    if strategy == "no_buffer":
        return 3
    return 3 + (2 if overlap and strategy == "extra_buffer" else 1)


def _graph_reserve_mib(model: Model, launch: Launch, chunked: int) -> float:
    """The prefill CUDA graphs: a flat 1.5 GiB with MLA, else 8 MiB per token bucket."""
    if model.mla is not None:
        return 1.5 * 1024
    prefill_max = chunked if chunked > 0 else launch.max_prefill_tokens
    if launch.max_total_tokens is not None:
        prefill_max = min(prefill_max, launch.max_total_tokens)
    return len(_prefill_graph_sizes(prefill_max)) * 8


def _prefill_graph_sizes(max_bs: int) -> list[int]:
    """The prefill CUDA-graph token buckets (cuda_graph_hook.py:480-497)."""
    sizes = [
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1025, 64),
        *range(1280, 4097, 256),
        *range(4608, max_bs + 1, 512),
    ]
    return [size for size in sizes if size <= max_bs]


SIZER = Sizer(
    version="0.5.23",
    mamba_strategy_flag="mamba-radix-cache-strategy",
    cuda_graph_max_bs_flag="cuda-graph-max-bs-decode",
    loads_draft_before_sizing=True,
    draft_kv_in_target_cell=True,
    draft_builds_own_embedding=False,
    speculative_reserve_mib={},
    defaults_20_to_35_gib=(4096, 48, 160),
    graph_bs_capped_by_running=True,
    default_reserves_disabled_graphs=False,
    graph_reserve_mib=_graph_reserve_mib,
    slots_per_request=_slots_per_request,
    radix_off_with_speculation=never_radix_off,
    budgets_slot_zero=True,
    size=_size,
    unbudgeted=nothing_unbudgeted,
)
