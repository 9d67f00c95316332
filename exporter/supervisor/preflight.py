"""Pre-flight: the planner asked about the exact command before it is launched, so a launch
that would die in pool sizing is not paid for (a whole weight load each time).

Pure: the plan's inputs come in as data (exporter/plan_inputs.py finds them) and the result
is a value the daemon applies. Nothing here may stop a launch: inputs that cannot be had,
or a planner that refuses or fails, give the verdict "unknown" with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from exporter.diagnosis.planner import (
    FITS,
    UNKNOWN,
    VERDICTS,
    Plan,
    PlanError,
    PlanInputs,
    plan,
)
from exporter.sglang.flags import FlagValue
from exporter.supervisor.remedies import Remedy, cheapest_fit, what_ate

# Predicted failures that the cheapest fitting change of the planner averts.
SIZING_FAILURES = frozenset(VERDICTS[1:4])
DISAGREEMENT = 0.02  # prediction vs SGLang's logged KV tokens: more than this is worth a line


@dataclass(frozen=True)
class Preflight:
    """What the pre-flight found for one launch and what it did about it."""

    mode: str  # policy.preflight: "fix" or "warn"
    verdict: str  # the command as configured: FITS, a failure class, or UNKNOWN
    reason: str  # why: what ate the budget, or why it could not plan
    launch_verdict: str  # the command as launched (after a change in "fix" mode)
    planned_tokens: int | None  # KV cache tokens predicted for the command as launched
    change: Remedy | None = None  # the planner's cheapest fitting change, if one was needed
    change_words: str = ""  # that change as typed on SGLang's command line
    applied: bool = False  # the change is on the launched command
    calibrated: bool = False  # from an earlier attempt's log, not from the device size alone
    memory_source: str | None = None

    def to_json(self) -> dict[str, object]:
        change = None
        if self.change is not None:
            change = {
                "set": self.change.set,
                "remove": list(self.change.remove),
                "flags": self.change_words,
            }
        return {
            "mode": self.mode,
            "verdict": self.verdict,
            "reason": self.reason,
            "launch_verdict": self.launch_verdict,
            "planned_kv_cache_tokens": self.planned_tokens,
            "change": change,
            "applied": self.applied,
            "calibrated": self.calibrated,
            "memory_source": self.memory_source,
        }

    def record(self, at: float) -> dict[str, object]:
        """Its part of the attempt's start record in the history, planned at ``at``: in the
        record that says the launch happened, so a daemon killed between the two leaves no
        pre-flight of a launch that never was."""
        return {"preflight": {**self.to_json(), "time": at}}

    def sentence(self) -> str:
        """The one line the daemon logs for this pre-flight."""
        source = "calibrated from the last attempt" if self.calibrated else "from the device size"
        if self.verdict == UNKNOWN:
            return f"pre-flight cannot plan ({self.reason}); launching unchanged"
        if self.verdict == FITS:
            return f"pre-flight: fits, {self.planned_tokens:,} KV tokens ({source})"
        head = f"pre-flight predicts {self.verdict}: {self.reason} ({source})"
        if self.applied:
            return f"{head}; launching with {self.change_words} instead"
        if self.change is not None:
            return f"{head}; {self.change_words} would fit; launching unchanged (warn mode)"
        return f"{head}; no change within the bounds fits; launching unchanged"


def check(
    mode: str,
    args: Mapping[str, FlagValue],
    inputs: PlanInputs | str,
    version: str,
    max_fraction: float,
) -> Preflight:
    """Plan ``args`` as SGLang ``version`` would size them; ``inputs`` is the reason they
    could not be had when it is a string. In "fix" mode a predicted sizing failure carries
    the planner's cheapest change that fits within ``max_fraction``, applied."""
    if isinstance(inputs, str):
        return _unknown(mode, inputs)
    try:
        result = plan(
            inputs.model_config,
            inputs.device_memory_bytes,
            inputs.devices,
            args,
            version,
            inputs.calibration,
            max_fraction,
        )
    except PlanError as error:  # an architecture or a flag it does not model
        return _unknown(mode, f"the planner cannot size it: {error}")
    except Exception as error:  # a planner bug must not block a launch
        return _unknown(mode, f"the planner failed: {type(error).__name__}: {error}")
    return _judged(mode, result, inputs.memory_source, max_fraction)


def _judged(mode: str, result: Plan, memory_source: str | None, max_fraction: float) -> Preflight:
    """The pre-flight of one plan: fits, a failure with no change that fits, or one with
    the cheapest change (applied in "fix" mode)."""
    calibrated = bool(result.inputs.get("calibrated"))
    common = {"mode": mode, "calibrated": calibrated, "memory_source": memory_source}
    if result.fits:
        return Preflight(
            verdict=FITS,
            reason="the pools fit",
            launch_verdict=FITS,
            planned_tokens=result.max_total_num_tokens,
            **common,
        )
    reason = _reason(result)
    suggestion = cheapest_fit(result, max_fraction) if result.verdict in SIZING_FAILURES else None
    if suggestion is None:
        return Preflight(
            verdict=result.verdict,
            reason=reason,
            launch_verdict=result.verdict,
            planned_tokens=result.max_total_num_tokens,
            **common,
        )
    applied = mode == "fix"
    change = Remedy(
        dict(suggestion.set),
        tuple(suggestion.remove),
        f"pre-flight: {result.verdict} predicted ({reason}); launching with {suggestion.change}",
    )
    return Preflight(
        verdict=result.verdict,
        reason=reason,
        launch_verdict=suggestion.plan.verdict if applied else result.verdict,
        planned_tokens=(suggestion.plan if applied else result).max_total_num_tokens,
        change=change,
        change_words=suggestion.change,
        applied=applied,
        **common,
    )


def _reason(result: Plan) -> str:
    if result.verdict in SIZING_FAILURES:
        return what_ate(result)
    return next(iter(result.notes), result.verdict)


def _unknown(mode: str, reason: str) -> Preflight:
    return Preflight(
        verdict=UNKNOWN, reason=reason, launch_verdict=UNKNOWN, planned_tokens=None, mode=mode
    )


def disagreement(planned: int | None, logged: int | None) -> str | None:
    """A sentence when the prediction and SGLang's logged KV tokens differ by more than
    DISAGREEMENT (of the logged count); None when they agree or one is missing."""
    if planned is None or logged is None or logged <= 0:
        return None
    off = abs(planned - logged) / logged
    if off <= DISAGREEMENT:
        return None
    return (
        f"pre-flight predicted {planned:,} KV cache tokens, SGLang logged {logged:,} "
        f"({off:.1%} apart): the planner's inputs or arithmetic are off for this setup"
    )
