"""What to launch after an attempt ends: a pure function of the failure, the profiles,
the policy and the history. The plain ladder: retry the same profile when the class may
succeed on another try, otherwise move to the next profile that changes the command, and
give up at the crash-loop limit or at the end of the ladder."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from exporter.config import Policy
from exporter.diagnosis.taxonomy import DETERMINISTIC, FailureClass
from exporter.history import AttemptRecord
from exporter.supervisor.remedies import Remedy


@dataclass(frozen=True)
class Decision:
    relaunch: bool
    profile_index: int | None  # None when giving up
    delay_s: float
    reason: str  # one sentence a human can act on
    remedy: Remedy | None = None  # an automatic flag change on top of the profile
    group_exit: bool = False  # a rank of a multi-node group exits instead (group.py)


def may_retry_unchanged(failure_class: FailureClass, policy: Policy) -> bool:
    """A deterministic failure repeats with the same command; the config may say otherwise."""
    return policy.retry.get(failure_class.value, failure_class not in DETERMINISTIC)


def _repeated(
    failure_class: FailureClass,
    current: int,
    attempts: Sequence[AttemptRecord],
    now: float,
    window_s: float,
) -> bool:
    """The attempt before the one that just ended failed the same way on the same profile,
    recently: a transient class (runtime_oom) that repeats gets its remedy, not a third try."""
    if len(attempts) < 2:
        return False
    before = attempts[-2]
    return (
        before.failure_class == failure_class.value
        and before.profile_index == current
        and before.ended_at is not None
        and now - before.ended_at <= window_s
    )


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
    remedy: Remedy | None = None,
) -> Decision:
    """``commands[i]``/``names[i]`` describe profile i; ``attempts`` include the one that ended.

    The user's ladder comes first; ``remedy`` (an automatic change the daemon worked out for
    this failure, when the config allows) only when no later profile changes the command."""
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
    if may_retry_unchanged(failure_class, policy) and not (
        remedy is not None and _repeated(failure_class, current, attempts, now, policy.window_s)
    ):
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
        if target is None and remedy is not None:
            delay = backoff_delay(consecutive_failures(attempts, policy.healthy_reset_s), policy)
            return Decision(True, current, delay, f"{remedy.reason}, in {delay:g} s", remedy)
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


def recent_failures(
    attempts: Iterable[AttemptRecord], now: float, window_s: float
) -> list[AttemptRecord]:
    """The attempts that count toward the crash-loop limit.

    An attempt counts when it ended, started no earlier than ``now - window_s`` (its end
    time stands in when its start record was lost) and was not stopped by the daemon: a
    server that exits by itself has crashed, whatever its exit status.
    """
    since = now - window_s
    return [
        record
        for record in attempts
        if record.ended
        and record.stopped_by != "daemon"
        and (record.started_at if record.started_at is not None else record.ended_at) >= since
    ]


def consecutive_failures(attempts: Iterable[AttemptRecord], healthy_reset_s: float) -> int:
    """Failed attempts at the end of the history: the backoff exponent.

    Counts from the newest attempt while it ended with a failure class other than "none";
    stops at one that has not ended or ended without a failure, and at one that served for
    at least ``healthy_reset_s`` (it worked, so its crash starts a new streak). A server
    that becomes ready and dies seconds later still counts: that is a crash loop too.
    """
    count = 0
    for record in reversed(list(attempts)):
        if not record.failed or _served_s(record) >= healthy_reset_s:
            break
        count += 1
    return count


def _served_s(record: AttemptRecord) -> float:
    if record.ready_at is None or record.ended_at is None:
        return 0.0
    return record.ended_at - record.ready_at
