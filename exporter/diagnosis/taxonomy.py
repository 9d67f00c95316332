"""The failure taxonomy and, per class, which way the remedy points."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class FailureClass(enum.StrEnum):
    POOL_INIT_OOM = "pool_init_oom"
    WEIGHTS_OOM = "weights_oom"
    CUDA_GRAPH_OOM = "cuda_graph_oom"
    RUNTIME_OOM = "runtime_oom"
    MAMBA_CACHE_EXHAUSTED = "mamba_cache_exhausted"
    KV_POOL_EXHAUSTED = "kv_pool_exhausted"
    DISTRIBUTED_INIT = "distributed_init"
    PORT_IN_USE = "port_in_use"
    INVALID_ARGUMENT = "invalid_argument"
    MODEL_LOAD_ERROR = "model_load_error"
    UNSUPPORTED_MODEL = "unsupported_model"
    KERNEL_ERROR = "kernel_error"
    CUDA_ERROR = "cuda_error"
    HANG_TIMEOUT = "hang_timeout"
    KILLED_BY_SIGNAL = "killed_by_signal"
    DEPENDENCY_ERROR = "dependency_error"
    OTHER = "other"
    NONE = "none"  # the log shows no failure


class Phase(enum.StrEnum):
    STARTUP = "startup"
    RUNTIME = "runtime"
    SHUTDOWN = "shutdown"


class FractionMove(enum.StrEnum):
    """Which way --mem-fraction-static should move for a class."""

    RAISE = "raise"
    LOWER = "lower"
    UNCHANGED = "unchanged"  # the fraction is not the knob for this class


@dataclass(frozen=True)
class Remedy:
    mem_fraction_static: FractionMove
    retry_unchanged: bool  # would the same command plausibly work on a second try?
    advice: str


REMEDIES: dict[FailureClass, Remedy] = {
    FailureClass.POOL_INIT_OOM: Remedy(
        FractionMove.RAISE,
        False,
        "raise --mem-fraction-static, or shrink what is reserved before the KV pool "
        "(--max-running-requests, speculative draft tokens, --mamba-ssm-dtype bfloat16)",
    ),
    FailureClass.WEIGHTS_OOM: Remedy(
        FractionMove.UNCHANGED,
        False,
        "no --mem-fraction-static value helps: free the GPU of other processes, "
        "raise --tp-size or use a quantized checkpoint",
    ),
    FailureClass.CUDA_GRAPH_OOM: Remedy(
        FractionMove.LOWER,
        False,
        "lower --mem-fraction-static to leave headroom for CUDA graphs, then lower "
        "--cuda-graph-max-bs, and only then disable CUDA graphs",
    ),
    FailureClass.RUNTIME_OOM: Remedy(
        FractionMove.LOWER,
        True,
        "lower --mem-fraction-static for activation headroom, or lower "
        "--chunked-prefill-size and --max-running-requests",
    ),
    FailureClass.MAMBA_CACHE_EXHAUSTED: Remedy(
        FractionMove.RAISE,
        False,
        "give the linear-attention state pool more slots (--max-mamba-cache-size, "
        "--mamba-full-memory-ratio) or lower --max-running-requests",
    ),
    FailureClass.KV_POOL_EXHAUSTED: Remedy(
        FractionMove.RAISE,
        True,
        "a larger KV pool (raise --mem-fraction-static) or fewer concurrent tokens "
        "(--max-running-requests, --chunked-prefill-size)",
    ),
    FailureClass.DISTRIBUTED_INIT: Remedy(
        FractionMove.UNCHANGED,
        True,
        "no flag change in SGLang's memory helps: check NCCL/gloo setup, /dev/shm size, "
        "the peers and the network, then retry",
    ),
    FailureClass.PORT_IN_USE: Remedy(
        FractionMove.UNCHANGED,
        True,
        "free the port (stop whatever listens on it) or choose another --port",
    ),
    FailureClass.INVALID_ARGUMENT: Remedy(
        FractionMove.UNCHANGED,
        False,
        "fix the flags for the installed SGLang version: retrying unchanged fails the same way",
    ),
    FailureClass.MODEL_LOAD_ERROR: Remedy(
        FractionMove.UNCHANGED,
        False,
        "fix the model path, its config or its weight files: retrying unchanged fails the same way",
    ),
    FailureClass.UNSUPPORTED_MODEL: Remedy(
        FractionMove.UNCHANGED,
        False,
        "use an SGLang (and transformers) version that supports this architecture",
    ),
    FailureClass.KERNEL_ERROR: Remedy(
        FractionMove.UNCHANGED,
        False,
        "no memory flag helps: install the kernels for this GPU (or a toolchain for JIT), "
        "or choose another --attention-backend",
    ),
    FailureClass.CUDA_ERROR: Remedy(
        FractionMove.UNCHANGED,
        True,
        "no memory flag helps: check the device, the driver and the kernels; restart the server",
    ),
    FailureClass.HANG_TIMEOUT: Remedy(
        FractionMove.UNCHANGED,
        True,
        "restart; if it recurs, check NCCL/peers and what the stuck process was doing",
    ),
    FailureClass.KILLED_BY_SIGNAL: Remedy(
        FractionMove.UNCHANGED,
        True,
        "find who sent the signal (host OOM killer: dmesg) and reduce host memory pressure",
    ),
    FailureClass.DEPENDENCY_ERROR: Remedy(
        FractionMove.UNCHANGED,
        False,
        "install the missing or matching package versions: retrying unchanged fails the same way",
    ),
    FailureClass.OTHER: Remedy(
        FractionMove.UNCHANGED, True, "read the root-cause line; no automatic remedy is known"
    ),
    FailureClass.NONE: Remedy(FractionMove.UNCHANGED, True, "nothing to fix"),
}

# Failures that repeat identically when the same command is run again.
DETERMINISTIC = frozenset(c for c, remedy in REMEDIES.items() if not remedy.retry_unchanged)
