"""The planner's values and units: what a plan says, step by step, and its one error."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from exporter.diagnosis.planner.calibration import Calibration
from exporter.diagnosis.taxonomy import FailureClass

GIB = 1 << 30
MIB = 1 << 20
FITS = "fits"
UNKNOWN = "unknown"  # the pre-flight's verdict when it could not plan
# What the planner can predict, plus "unknown": the closed set of planned_verdict's labels.
VERDICTS = (
    FITS,
    FailureClass.POOL_INIT_OOM.value,
    FailureClass.MAMBA_CACHE_EXHAUSTED.value,
    FailureClass.CUDA_GRAPH_OOM.value,
    FailureClass.INVALID_ARGUMENT.value,
    UNKNOWN,
)
DEFAULT_MAX_FRACTION = 0.95

# Free memory lost before weights load, when no log says: the CUDA context, and NCCL's
# buffers with more than one rank. 0.67 GiB is the reference's figure for 2x RTX A6000
# (47.53 GiB total, 46.86 free before weights, §4.10).
CUDA_CONTEXT_BYTES = GIB // 2
NCCL_BYTES = round(0.17 * GIB)
# What SGLang reads as "GB" is rounded to 0.01 GiB in the log: each calibrated value is
# known to within half of that.
LOG_ROUNDING_BYTES = round(0.005 * GIB)


class PlanError(ValueError):
    """The inputs describe no launch SGLang could attempt (a config without layers, more
    GPUs than given, a fraction outside (0, 1], ...)."""


@dataclass(frozen=True)
class PlanInputs:
    model_config: Mapping[str, object]
    device_memory_bytes: int
    devices: int
    memory_source: str
    calibration: Calibration | None  # from an earlier attempt of the same setup


@dataclass(frozen=True)
class BudgetStep:
    name: str
    bytes: int
    explanation: str

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "bytes": self.bytes, "explanation": self.explanation}


@dataclass(frozen=True)
class Suggestion:
    """A flag change (``set`` adds or overrides, ``remove`` drops, as a config profile)
    and what the planner predicts for it."""

    change: str  # as typed on SGLang's command line
    set: dict[str, object]
    remove: tuple[str, ...]
    plan: Plan

    def to_json(self) -> dict[str, object]:
        return {
            "change": self.change,
            "set": self.set,
            "remove": list(self.remove),
            "verdict": self.plan.verdict,
            "max_total_num_tokens": self.plan.max_total_num_tokens,
            "mamba_cache_slots": self.plan.mamba_cache_slots,
            "max_running_requests": self.plan.max_running_requests,
            "headroom_bytes": self.plan.headroom_bytes,
        }


@dataclass(frozen=True)
class Plan:
    verdict: str  # FITS, or the FailureClass value SGLang would end in
    version: str
    budget: list[BudgetStep]
    max_total_num_tokens: int  # as SGLang computes it: <= 0 when the pool cannot be sized
    mamba_cache_slots: int | None
    max_running_requests: int
    headroom_bytes: int  # left in the static headroom for CUDA graphs and activations
    what_ate_the_budget: str | None  # the largest reservation before the KV cache
    suggestions: list[Suggestion] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    inputs: dict[str, object] = field(default_factory=dict)  # what the arithmetic used

    @property
    def fits(self) -> bool:
        return self.verdict == FITS

    def to_json(self) -> dict[str, object]:
        return {
            "verdict": self.verdict,
            "sglang_version": self.version,
            "budget": [step.to_json() for step in self.budget],
            "max_total_num_tokens": self.max_total_num_tokens,
            "mamba_cache_slots": self.mamba_cache_slots,
            "max_running_requests": self.max_running_requests,
            "headroom_bytes": self.headroom_bytes,
            "what_ate_the_budget": self.what_ate_the_budget,
            "suggestions": [s.to_json() for s in self.suggestions],
            "notes": self.notes,
            "inputs": self.inputs,
        }


def gib(amount: float) -> str:
    return f"{amount / GIB:.2f} GiB"


def mib(amount: float) -> str:
    return f"{amount / MIB:.2f} MiB"
