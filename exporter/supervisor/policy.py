"""What to launch after an attempt ends: a pure function of the failure, the profiles,
the policy and the history. The plain ladder: retry the same profile when the class may
succeed on another try, otherwise move to the next profile that changes the command, and
give up at the crash-loop limit or at the end of the ladder."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from exporter.config import Policy
from exporter.diagnosis.taxonomy import DETERMINISTIC, FailureClass
from exporter.history import AttemptRecord, consecutive_failures, recent_failures


@dataclass(frozen=True)
class Decision:
    relaunch: bool
    profile_index: int | None  # None when giving up
    delay_s: float
    reason: str  # one sentence a human can act on


def may_retry_unchanged(failure_class: FailureClass, policy: Policy) -> bool:
    """A deterministic failure repeats with the same command; the config may say otherwise."""
    return policy.retry.get(failure_class.value, failure_class not in DETERMINISTIC)


def backoff_delay(failures_in_a_row: int, policy: Policy) -> float:
    exponent = max(0, failures_in_a_row - 1)
    return min(policy.backoff_cap_s, policy.backoff_base_s * 2**exponent)


def decide(
    failure_class: FailureClass,
    current: int,
    commands: Sequence[Sequence[str]],
    names: Sequence[str],
    policy: Policy,
    attempts: Sequence[AttemptRecord],
    now: float,
) -> Decision:
    """``commands[i]``/``names[i]`` describe profile i; ``attempts`` include the one that ended."""
    recent = recent_failures(attempts, now, policy.window_s)
    if len(recent) >= policy.max_attempts:
        return Decision(
            False,
            None,
            0.0,
            f"{failure_class.value}: {len(recent)} failed attempts in the last "
            f"{policy.window_s:g} s reached the crash-loop limit ({policy.max_attempts}); "
            "giving up",
        )
    if may_retry_unchanged(failure_class, policy):
        target = current
        how = f"retrying profile '{names[current]}'"
    else:
        target = next(
            (
                i
                for i in range(current + 1, len(commands))
                if list(commands[i]) != list(commands[current])
            ),
            None,
        )
        if target is None:
            return Decision(
                False,
                None,
                0.0,
                f"{failure_class.value} repeats with an unchanged command and no later profile "
                f"changes it; giving up on profile '{names[current]}'",
            )
        how = f"falling back from profile '{names[current]}' to '{names[target]}'"
    delay = backoff_delay(consecutive_failures(attempts, policy.healthy_reset_s), policy)
    return Decision(True, target, delay, f"{failure_class.value}: {how} in {delay:g} s")
