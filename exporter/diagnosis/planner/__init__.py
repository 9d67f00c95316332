"""SGLang's memory-pool arithmetic for 0.5.9 and 0.5.23: will a launch fit, what ate the
budget, and the cheapest flag changes that make it fit. Pure: no I/O, no clock.

It follows the sizing code step by step (shared/reference/sglang-internals.md §4; 0.5.9
``model_runner_kv_cache_mixin.py``, 0.5.23 ``mem_cache/kv_cache_configurator.py``), in the
same float GiB arithmetic, so that with the free-memory numbers of a real attempt's log
(``calibrate``) the token count is SGLang's own, up to the log's 0.01 GiB rounding. Without a
log the free memory comes from the GPU size and the weights from the config: an estimate.

Per GPU rank, the budget is spent in this order:

    P  free before weights         (after the CUDA context and NCCL)
    W  weights                     (0.5.23: target and draft)
    R  static headroom             (1 - mem_fraction_static) * P, kept for graphs/activations
       multimodal reservation      (0.5.23)
       speculative reservation     intermediate recurrent state per (request, draft token)
       mamba state                 one recurrent state per slot
       KV cache                    what is left, in whole tokens
and out of R, unbudgeted: the request table, 0.5.9's padding slots and its whole draft model.

One module per step, in the order a plan runs: ``model`` (config.json), ``flags`` and
``launch`` (the command line), ``calibration`` (a log), ``memory`` (free memory and
weights), ``cells`` (bytes per token, per request, per rank), ``reserves`` (the default
fraction), ``sizing`` (what a version's sizer is), ``budget`` and ``evaluate`` (one
evaluation), ``search`` (``plan()`` and its suggestions). What differs between versions
lives in one ``sizer_<version>`` module each, registered in ``versions``.
"""

from exporter.diagnosis.planner.calibration import Calibration, calibrate
from exporter.diagnosis.planner.cells import (
    draft_weight_bytes,
    kv_cell_bytes,
    pool_cell_bytes,
    state_bytes_per_request,
    weight_bytes,
)
from exporter.diagnosis.planner.launch import Launch, read_launch
from exporter.diagnosis.planner.model import GatedDeltaNet, Model, read_model
from exporter.diagnosis.planner.reserves import default_mem_fraction
from exporter.diagnosis.planner.search import Patch, plan
from exporter.diagnosis.planner.types import (
    CUDA_CONTEXT_BYTES,
    DEFAULT_MAX_FRACTION,
    FITS,
    GIB,
    LOG_ROUNDING_BYTES,
    MIB,
    NCCL_BYTES,
    UNKNOWN,
    VERDICTS,
    BudgetStep,
    Plan,
    PlanError,
    PlanInputs,
    Suggestion,
)

__all__ = [
    "CUDA_CONTEXT_BYTES",
    "DEFAULT_MAX_FRACTION",
    "FITS",
    "GIB",
    "LOG_ROUNDING_BYTES",
    "MIB",
    "NCCL_BYTES",
    "UNKNOWN",
    "VERDICTS",
    "BudgetStep",
    "Calibration",
    "GatedDeltaNet",
    "Launch",
    "Model",
    "Patch",
    "Plan",
    "PlanError",
    "PlanInputs",
    "Suggestion",
    "calibrate",
    "default_mem_fraction",
    "draft_weight_bytes",
    "kv_cell_bytes",
    "plan",
    "pool_cell_bytes",
    "read_launch",
    "read_model",
    "state_bytes_per_request",
    "weight_bytes",
]
