"""Automatic remedies: the flag change to try after a failure when no profile of the user's
ladder changes anything. Pure: the planner's prediction comes in as data.

Directions per class (see the taxonomy): a pool that could not be sized gets the planner's
cheapest change that fits (calibrated from the failed attempt's own log); a CUDA-graph OOM
lowers the static fraction, then --cuda-graph-max-bs, then disables CUDA graphs; a runtime
OOM lowers the chunked prefill, then the running requests. Every change is bounded (never
above policy.max_mem_fraction_static, never below a working floor) and carries its reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from exporter.diagnosis.planner import Plan, Suggestion
from exporter.diagnosis.taxonomy import FailureClass
from exporter.sglang.flags import FlagValue

GIB = 1 << 30
FRACTION_STEP = 0.05
FRACTION_FLOOR = 0.5  # below this the pools starve; a human should look instead
GRAPH_BS_FLOOR = 1
CHUNK_FLOOR = 256
REQUESTS_FLOOR = 1


@dataclass(frozen=True)
class Remedy:
    set: dict[str, FlagValue] = field(default_factory=dict)
    remove: tuple[str, ...] = ()
    reason: str = ""  # why this change, with the numbers

    def apply(self, args: Mapping[str, FlagValue]) -> dict[str, FlagValue]:
        patched = {**args, **self.set}
        for name in self.remove:
            patched.pop(name, None)
        return patched

    def then(self, later: Remedy) -> Remedy:
        """This change followed by a later one, as one patch on the profile's args."""
        remove = tuple(n for n in self.remove if n not in later.set) + later.remove
        kept = {k: v for k, v in self.set.items() if k not in later.remove}
        return Remedy({**kept, **later.set}, tuple(dict.fromkeys(remove)), later.reason)


def remedy_for(
    failure_class: FailureClass,
    args: Mapping[str, FlagValue],
    plan: Plan | None,
    max_fraction: float,
) -> Remedy | None:
    """The next change for this class and these (already patched) args, or None."""
    if failure_class in (FailureClass.POOL_INIT_OOM, FailureClass.MAMBA_CACHE_EXHAUSTED):
        return _from_plan(failure_class, plan, max_fraction)
    if failure_class is FailureClass.CUDA_GRAPH_OOM:
        return _less_graph_memory(args, plan)
    if failure_class is FailureClass.RUNTIME_OOM:
        return _less_activation_memory(args)
    return None


def _from_plan(
    failure_class: FailureClass, plan: Plan | None, max_fraction: float
) -> Remedy | None:
    suggestion = cheapest_fit(plan, max_fraction) if plan is not None else None
    if suggestion is None:
        return None
    tokens = suggestion.plan.max_total_num_tokens
    reason = (
        f"{failure_class.value}: {what_ate(plan)}; relaunching with {suggestion.change} "
        f"(planner: {tokens:,} KV tokens)"
    )
    return Remedy(dict(suggestion.set), tuple(suggestion.remove), reason)


def cheapest_fit(plan: Plan, max_fraction: float) -> Suggestion | None:
    """The planner's cheapest change that fits and stays within the fraction's bound."""
    for suggestion in plan.suggestions:
        fraction = suggestion.set.get("mem-fraction-static")
        if isinstance(fraction, (int, float)) and fraction > max_fraction:
            continue
        return suggestion
    return None


_RESERVATIONS = {
    "speculative_reservation": "speculative decoding reserved",
    "mamba_state": "linear-attention state took",
    "static_headroom": "the headroom --mem-fraction-static keeps out of the budget took",
    "multimodal_reservation": "the multimodal reservation took",
}


def what_ate(plan: Plan) -> str:
    """One clause naming what ate the budget, e.g. "speculative decoding reserved 13.8 GiB
    (intermediate recurrent state for 48 request slots x 4 draft tokens ...)"."""
    step = next((s for s in plan.budget if s.name == plan.what_ate_the_budget), None)
    if step is None:
        return "the static budget was too small"
    verb = _RESERVATIONS.get(step.name, f"{step.name} took")
    return f"{verb} {step.bytes / GIB:.1f} GiB ({step.explanation})"


def _less_graph_memory(args: Mapping[str, FlagValue], plan: Plan | None) -> Remedy | None:
    fraction = _number(args.get("mem-fraction-static"))
    if fraction is None and plan is not None:
        fraction = _number(plan.inputs.get("mem_fraction_static"))
    if fraction is not None and fraction - FRACTION_STEP >= FRACTION_FLOOR:
        lower = round(fraction - FRACTION_STEP, 3)
        return Remedy(
            {"mem-fraction-static": lower},
            reason=f"cuda_graph_oom: lowering --mem-fraction-static {fraction:g} -> {lower:g} "
            "to leave the graphs more headroom",
        )
    batch = _number(args.get("cuda-graph-max-bs"))
    if batch is None or batch > GRAPH_BS_FLOOR * 8:
        smaller = max(GRAPH_BS_FLOOR, int(batch // 2) if batch else 16)
        return Remedy(
            {"cuda-graph-max-bs": smaller},
            reason=f"cuda_graph_oom: capturing fewer batch sizes (--cuda-graph-max-bs {smaller})",
        )
    if args.get("disable-cuda-graph") is not True:
        return Remedy(
            {"disable-cuda-graph": True},
            reason="cuda_graph_oom: disabling CUDA graphs, the last resort (slower decoding)",
        )
    return None


def _less_activation_memory(args: Mapping[str, FlagValue]) -> Remedy | None:
    chunk = _number(args.get("chunked-prefill-size")) or 8192
    if chunk // 2 >= CHUNK_FLOOR:
        return Remedy(
            {"chunked-prefill-size": int(chunk // 2)},
            reason=f"runtime_oom: halving --chunked-prefill-size to {int(chunk // 2)} "
            "for smaller prefill activations",
        )
    requests = _number(args.get("max-running-requests"))
    if requests is not None and requests // 2 >= REQUESTS_FLOOR:
        return Remedy(
            {"max-running-requests": int(requests // 2)},
            reason=f"runtime_oom: halving --max-running-requests to {int(requests // 2)}",
        )
    return None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)
