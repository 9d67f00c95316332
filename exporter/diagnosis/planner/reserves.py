"""What SGLang keeps out of the static fraction (§4.8): its default --mem-fraction-static,
the GPU-size defaults for the prefill chunk and the decode CUDA graphs, and the reserve
the graphs and activations need. Each version's differences come from its ``Sizer``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from exporter.diagnosis.planner.model import Model
from exporter.diagnosis.planner.types import MIB

if TYPE_CHECKING:
    from exporter.diagnosis.planner.launch import Launch


def default_mem_fraction(model: Model, launch: Launch, gpu_memory_bytes: int) -> float:
    """SGLang's --mem-fraction-static when the flag is absent (§4.8): the GPU size less a
    reserve for activations, CUDA graphs and parallelism, then scaled down for a ViT."""
    total = gpu_memory_bytes / MIB
    reserved = reserve_mib(model, launch, total, activations=True)
    if total > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    if launch.speculative is not None:
        reserved += launch.sizer.speculative_reserve_mib.get(launch.speculative, 0)
    fraction = round((total - reserved) / total, 3)
    if model.vit_shape is not None and not launch.language_only:
        layers, hidden = model.vit_shape
        complexity = layers * hidden**2 / (24 * 1024**2)
        fraction *= 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (complexity - 1.0)))
    return fraction


def gpu_defaults(launch: Launch, total_mib: float) -> tuple[int, int]:
    """(chunked prefill size, decode CUDA-graph max batch size) by GPU size (§4.8)."""
    small_tp = launch.tp < 4
    if total_mib < 20 * 1024:
        chunked, max_bs = 2048, 8
    elif total_mib < 35 * 1024:
        chunked, small, large = launch.sizer.defaults_20_to_35_gib
        max_bs = small if small_tp else large
    elif total_mib < 60 * 1024:
        chunked, max_bs = 4096, 32 if small_tp else 160
    elif total_mib < 160 * 1024:
        chunked, max_bs = 8192, 256 if small_tp else 512
    else:
        chunked, max_bs = 16384, 512
    if launch.chunked_prefill_size is not None:
        chunked = launch.chunked_prefill_size
    if launch.cuda_graph_max_bs is not None:
        max_bs = launch.cuda_graph_max_bs
    elif launch.sizer.graph_bs_capped_by_running and launch.max_running_requests is not None:
        max_bs = min(max_bs, launch.max_running_requests)
    return chunked, max_bs


def reserve_mib(model: Model, launch: Launch, total_mib: float, activations: bool) -> float:
    """SGLang's reserve for what the static fraction leaves out; without the activation
    term it is the part that is not a prefill chunk's transient working set."""
    chunked, max_bs = gpu_defaults(launch, total_mib)
    reserved = 512 + launch.tp * launch.pp / 8 * 1024
    if activations:
        reserved += max(chunked if chunked > 0 else launch.max_prefill_tokens, 2048) * 1.5
    if launch.device == "cpu":
        return reserved
    if launch.dp_attention:
        reserved += max_bs * launch.dp * (4.5 if max_bs > 300 else 3)
    # A default may reserve graph memory even with graphs disabled; the graphs do not.
    reserves_anyway = launch.sizer.default_reserves_disabled_graphs and activations
    if launch.disable_cuda_graph and not reserves_anyway:
        return reserved
    reserved += max_bs * 2
    return reserved + launch.sizer.graph_reserve_mib(model, launch, chunked)
