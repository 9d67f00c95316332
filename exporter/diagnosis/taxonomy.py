"""The failure taxonomy: the classes and, per class, one spec of everything known about it."""

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
class ClassSpec:
    """One failure class: what it means, what to do, and how the daemon treats it."""

    summary: str  # the diagnosis starts with it: "<summary>: <the numbers>."
    advice: str  # what to change, for a human
    mem_fraction_static: FractionMove
    retry_unchanged: bool  # would the same command plausibly work on a second try?
    automatic_remedy: bool  # supervisor/remedies.py knows a flag change for it


# Everything the project knows about a class, in one place: a new class is one entry here
# (the completeness test in tests/diagnosis/test_taxonomy.py fails until every field is filled).
SPECS: dict[FailureClass, ClassSpec] = {
    FailureClass.POOL_INIT_OOM: ClassSpec(
        summary="the KV/state pool could not be sized after the weights loaded",
        advice=(
            "raise --mem-fraction-static, or shrink what is reserved before the KV pool "
            "(--max-running-requests, speculative draft tokens, --mamba-ssm-dtype bfloat16)"
        ),
        mem_fraction_static=FractionMove.RAISE,
        retry_unchanged=False,
        automatic_remedy=True,
    ),
    FailureClass.WEIGHTS_OOM: ClassSpec(
        summary="out of memory while loading the weights",
        advice=(
            "no --mem-fraction-static value helps: free the GPU of other processes, "
            "raise --tp-size or use a quantized checkpoint"
        ),
        mem_fraction_static=FractionMove.UNCHANGED,
        retry_unchanged=False,
        automatic_remedy=False,
    ),
    FailureClass.CUDA_GRAPH_OOM: ClassSpec(
        summary="out of memory while capturing CUDA graphs",
        advice=(
            "lower --mem-fraction-static to leave headroom for CUDA graphs, then lower "
            "--cuda-graph-max-bs, and only then disable CUDA graphs"
        ),
        mem_fraction_static=FractionMove.LOWER,
        retry_unchanged=False,
        automatic_remedy=True,
    ),
    FailureClass.RUNTIME_OOM: ClassSpec(
        summary="out of memory while serving requests",
        advice=(
            "lower --mem-fraction-static for activation headroom, or lower "
            "--chunked-prefill-size and --max-running-requests"
        ),
        mem_fraction_static=FractionMove.LOWER,
        retry_unchanged=True,
        automatic_remedy=True,
    ),
    FailureClass.MAMBA_CACHE_EXHAUSTED: ClassSpec(
        summary="the linear-attention (mamba) state pool ran out of slots",
        advice=(
            "give the linear-attention state pool more slots (--max-mamba-cache-size, "
            "--mamba-full-memory-ratio) or lower --max-running-requests"
        ),
        mem_fraction_static=FractionMove.RAISE,
        retry_unchanged=False,
        automatic_remedy=True,
    ),
    FailureClass.KV_POOL_EXHAUSTED: ClassSpec(
        summary="the KV cache pool was full",
        advice=(
            "a larger KV pool (raise --mem-fraction-static) or fewer concurrent tokens "
            "(--max-running-requests, --chunked-prefill-size)"
        ),
        mem_fraction_static=FractionMove.RAISE,
        retry_unchanged=True,
        automatic_remedy=False,
    ),
    FailureClass.DISTRIBUTED_INIT: ClassSpec(
        summary="the distributed (NCCL/gloo) setup or communication failed",
        advice=(
            "no flag change in SGLang's memory helps: check NCCL/gloo setup, /dev/shm size, "
            "the peers and the network, then retry"
        ),
        mem_fraction_static=FractionMove.UNCHANGED,
        retry_unchanged=True,
        automatic_remedy=False,
    ),
    FailureClass.PORT_IN_USE: ClassSpec(
        summary="an address SGLang needed was already in use",
        advice="free the port (stop whatever listens on it) or choose another --port",
        mem_fraction_static=FractionMove.UNCHANGED,
        retry_unchanged=True,
        automatic_remedy=False,
    ),
    FailureClass.INVALID_ARGUMENT: ClassSpec(
        summary="SGLang rejected its arguments",
        advice=(
            "fix the flags for the installed SGLang version: retrying unchanged fails the same way"
        ),
        mem_fraction_static=FractionMove.UNCHANGED,
        retry_unchanged=False,
        automatic_remedy=False,
    ),
    FailureClass.MODEL_LOAD_ERROR: ClassSpec(
        summary="the model could not be loaded",
        advice=(
            "fix the model path, its config or its weight files: retrying unchanged "
            "fails the same way"
        ),
        mem_fraction_static=FractionMove.UNCHANGED,
        retry_unchanged=False,
        automatic_remedy=False,
    ),
    FailureClass.UNSUPPORTED_MODEL: ClassSpec(
        summary="this SGLang does not support the model's architecture",
        advice="use an SGLang (and transformers) version that supports this architecture",
        mem_fraction_static=FractionMove.UNCHANGED,
        retry_unchanged=False,
        automatic_remedy=False,
    ),
    FailureClass.KERNEL_ERROR: ClassSpec(
        summary="a GPU kernel could not be built or launched",
        advice=(
            "no memory flag helps: install the kernels for this GPU (or a toolchain for JIT), "
            "or choose another --attention-backend"
        ),
        mem_fraction_static=FractionMove.UNCHANGED,
        retry_unchanged=False,
        automatic_remedy=False,
    ),
    FailureClass.CUDA_ERROR: ClassSpec(
        summary="the GPU reported an error",
        advice=(
            "no memory flag helps: check the device, the driver and the kernels; restart the server"
        ),
        mem_fraction_static=FractionMove.UNCHANGED,
        retry_unchanged=True,
        automatic_remedy=False,
    ),
    FailureClass.HANG_TIMEOUT: ClassSpec(
        summary="the server stopped making progress",
        advice="restart; if it recurs, check NCCL/peers and what the stuck process was doing",
        mem_fraction_static=FractionMove.UNCHANGED,
        retry_unchanged=True,
        automatic_remedy=False,
    ),
    FailureClass.KILLED_BY_SIGNAL: ClassSpec(
        summary="a process was killed by a signal without a Python error",
        advice="find who sent the signal (host OOM killer: dmesg) and reduce host memory pressure",
        mem_fraction_static=FractionMove.UNCHANGED,
        retry_unchanged=True,
        automatic_remedy=False,
    ),
    FailureClass.DEPENDENCY_ERROR: ClassSpec(
        summary="a package is missing or does not match",
        advice=(
            "install the missing or matching package versions: retrying unchanged "
            "fails the same way"
        ),
        mem_fraction_static=FractionMove.UNCHANGED,
        retry_unchanged=False,
        automatic_remedy=False,
    ),
    FailureClass.OTHER: ClassSpec(
        summary="SGLang failed",
        advice="read the root-cause line; no automatic remedy is known",
        mem_fraction_static=FractionMove.UNCHANGED,
        retry_unchanged=True,
        automatic_remedy=False,
    ),
    FailureClass.NONE: ClassSpec(
        summary="no failure",
        advice="nothing to fix",
        mem_fraction_static=FractionMove.UNCHANGED,
        retry_unchanged=True,
        automatic_remedy=False,
    ),
}
# Failures that repeat identically when the same command is run again.
DETERMINISTIC = frozenset(c for c, spec in SPECS.items() if not spec.retry_unchanged)
# The classes an automatic change can address (supervisor/remedies.py); the others need a
# human or a retry.
REMEDIED = frozenset(c for c, spec in SPECS.items() if spec.automatic_remedy)
