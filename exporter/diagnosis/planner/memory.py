"""Free memory and weights per rank: from a log where it says, else from the GPU size and
the config."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.diagnosis.planner.calibration import Calibration
from exporter.diagnosis.planner.cells import draft_weight_bytes, weight_bytes
from exporter.diagnosis.planner.launch import Launch
from exporter.diagnosis.planner.model import Model
from exporter.diagnosis.planner.types import CUDA_CONTEXT_BYTES, NCCL_BYTES


@dataclass(frozen=True)
class Memory:
    """Free memory and weights per rank, and where each number came from."""

    free: int  # P
    after: int  # A, target weights only
    weights: int
    draft: int | None  # the draft's weights (0.5.9: its peak), None when unknown
    free_source: str  # "the log" or "estimated"
    weights_source: str
    draft_source: str


def memory(
    model: Model,
    launch: Launch,
    gpu_memory_bytes: int,
    calibration: Calibration | None,
) -> Memory:
    cal = calibration or Calibration()
    free, after, weights = cal.free_before_weights, cal.free_after_weights, cal.weights
    logged = "the log" if free is not None or after is not None else "estimated"
    if weights is None and free is not None and after is not None:
        weights = free - after
    weights_source = "estimated" if weights is None else "the log"
    if weights is None:
        weights = weight_bytes(model, launch)
    if free is None and after is not None:
        free = after + weights
    if free is None:
        overhead = 0 if launch.device == "cpu" else CUDA_CONTEXT_BYTES
        if launch.device != "cpu" and launch.tp * launch.pp > 1:
            overhead += NCCL_BYTES
        free = gpu_memory_bytes - overhead
    if after is None:
        after = free - weights
    # A draft load in a log of the same version says what the draft takes; 0.5.9 logs its
    # peak (own embedding and LM head), 0.5.23 its shared-weights size.
    draft, draft_source = draft_weight_bytes(model, launch), "estimated"
    if cal.draft_weights is not None and cal.could_be_from(launch.version) and draft != 0:
        draft, draft_source = cal.draft_weights, "the log"
    return Memory(free, after, weights, draft, logged, weights_source, draft_source)


def draft_loaded_before_sizing(launch: Launch) -> bool:
    """Whether a draft model's weights are gone before the pools are sized."""
    return launch.sizer.loads_draft_before_sizing and launch.speculative not in (None, "NGRAM")
