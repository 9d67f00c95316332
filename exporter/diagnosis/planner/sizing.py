"""What one SGLang version's sizer is (``Sizer``), what its sizing reads (``Pools``) and
returns (``Sizing``), the two mamba rules every version shares the shape of, and what a
version without a rule fills in for it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from exporter.diagnosis.planner.model import Model
from exporter.diagnosis.planner.types import FITS, BudgetStep

if TYPE_CHECKING:
    from exporter.diagnosis.planner.launch import Launch
    from exporter.diagnosis.planner.memory import Memory

# What both versions raise when the KV budget holds no token.
NOT_ENOUGH_MEMORY = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."


@dataclass(frozen=True)
class Pools:
    """The budget one sizing run divides, per rank, in SGLang's own float GiB."""

    free: float  # P, before weights
    after: float  # A, less a draft loaded before sizing
    fraction: float  # --mem-fraction-static as resolved
    requests: int | None  # N, max_running_requests as given (or reset)


@dataclass
class Sizing:
    """One run of SGLang's sizing; reservations in SGLang's own float GiB."""

    verdict: str = FITS
    tokens: int = 0
    slots: int | None = None
    max_num_reqs: int = 0
    running: int = 0
    spec_reserve: float = 0.0
    mamba: float = 0.0
    multimodal: float = 0.0
    kv_budget: float = 0.0  # GiB SGLang turned into tokens
    capped: int | None = None  # max_running_requests capped by the state cache
    failure: str = ""


@dataclass(frozen=True, repr=False)
class Sizer:
    """One SGLang version's side of every rule that differs between versions. The shared
    modules ask it; only the ``sizer_*`` modules build one (``versions.SIZERS``)."""

    version: str
    # Flags whose name differs.
    mamba_strategy_flag: str
    cuda_graph_max_bs_flag: str
    # The draft model: loaded before the pools are sized (else after the target's graphs,
    # out of the headroom); its KV layers charged in the target's cell; its load peak
    # including its own embedding and LM head.
    loads_draft_before_sizing: bool
    draft_kv_in_target_cell: bool
    draft_builds_own_embedding: bool
    # The default fraction: the extra reserve per speculative algorithm, the
    # (chunked prefill, graph max bs at tp < 4, at tp >= 4) of a 20-35 GiB GPU, whether
    # --max-running-requests caps the graphs' batch size, whether the default reserves
    # graph memory with graphs disabled, and the graph reserve beyond the decode graphs.
    speculative_reserve_mib: Mapping[str, int]
    defaults_20_to_35_gib: tuple[int, int, int]
    graph_bs_capped_by_running: bool
    default_reserves_disabled_graphs: bool
    graph_reserve_mib: Callable[[Model, Launch, int], float]
    # Mamba state: slots per running request with the radix cache on, whether speculative
    # decoding turns the radix cache off, and whether slot 0 is inside the budget.
    slots_per_request: Callable[[Launch], int]
    radix_off_with_speculation: Callable[[Model, Launch], bool]
    budgets_slot_zero: bool
    # The sizing itself, and what comes out of the headroom without being budgeted.
    size: Callable[[Model, Launch, Pools], Sizing]
    unbudgeted: Callable[[Model, Launch, Memory, Sizing, int | None], list[BudgetStep]]

    def __repr__(self) -> str:
        return f"Sizer({self.version!r})"

    @property
    def flag_names(self) -> tuple[str, ...]:
        return self.mamba_strategy_flag, self.cuda_graph_max_bs_flag


def radix_off(model: Model, launch: Launch) -> bool:
    """Whether the radix cache is off: by the flag, or by the version for this model."""
    return launch.disable_radix_cache or launch.sizer.radix_off_with_speculation(model, launch)


def mamba_ratio(launch: Launch, radix_is_off: bool) -> int:
    """State slots per running request (§4.4 step 5, §4.5 step 4)."""
    return 1 if radix_is_off else launch.sizer.slots_per_request(launch)


# For a version without the rule.


def never_radix_off(model: Model, launch: Launch) -> bool:
    return False


def no_graph_reserve(model: Model, launch: Launch, chunked: int) -> float:
    return 0


def nothing_unbudgeted(
    model: Model, launch: Launch, memory: Memory, sizing: Sizing, n: int | None
) -> list[BudgetStep]:
    return []
