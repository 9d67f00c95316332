"""Watching a live attempt: verdicts read from the attempt, its probes and its processes,
never written to them. Whether it is over (``ended``), health (ready, unhealthy,
recovered), hang evidence, a lost member, a startup that hangs, a worker rank's readiness,
the pool cross-checks, and how long the loop may sleep before it looks again. The daemon
acts on each verdict; a fatal line, a startup hang and the cross-checks are logged here."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from exporter.attempt.states import ServerState
from exporter.config import Policy, node_rank
from exporter.diagnosis.classify import Outcome
from exporter.identity import ProcessIdentity, describe
from exporter.sglang.flags import FlagValue
from exporter.sglang.roles import role_of
from exporter.supervisor.attempt import Attempt
from exporter.supervisor.group import worker_ready
from exporter.supervisor.preflight import disagreement
from exporter.supervisor.startup import startup_overdue
from exporter.telemetry.probes import ProbeSnapshot

log = logging.getLogger("sglang_sentinel.watch")

# The loop is woken by what matters (a watched process's exit, a ready or fatal log line,
# a probe result, a signal); the tick only paces timeouts, the startup scan for SGLang's
# children and the watchdog, so it can be slow, and slower still while serving.
TICK_S = 1.0
SERVING_TICK_S = 5.0
MEMBER_SCAN_S = 1.0
# A member that vanished gets this long for the launcher to notice and exit by itself
# (SGLang's own crash path) before the daemon calls it lost.
LOST_MEMBER_GRACE_S = 3.0


def until_next_tick(
    state: ServerState, backoff_until: float | None, attempt: Attempt | None, now: float
) -> float:
    """How long the loop may sleep: a tick at most, less when a backoff or a lost member's
    grace ends sooner."""
    if state is ServerState.BACKOFF and backoff_until is not None:
        return max(0.0, min(TICK_S, backoff_until - now))
    if state in (ServerState.READY, ServerState.UNHEALTHY):
        lost = attempt.member_lost if attempt else None
        if lost is not None:  # wake when its grace ends
            return max(0.0, min(SERVING_TICK_S, lost[1] + LOST_MEMBER_GRACE_S - now))
        return SERVING_TICK_S
    return TICK_S


def ended(attempt: Attempt, now: float) -> Outcome | None:
    """How a live attempt is over, if it is: its launcher exited, its log showed a line
    after which SGLang cannot recover, or a member died under it (``lost_member``)."""
    if not attempt.processes.leader_running():
        return Outcome(exit_code=attempt.processes.exit_code())
    if attempt.log.doomed_by is not None:
        log.warning("attempt %d: cannot recover after: %s", attempt.number, attempt.log.doomed_by)
        return Outcome()
    lost = lost_member(attempt, now)
    return None if lost is None else Outcome(lost_process=lost)


@dataclass(frozen=True)
class Health:
    """What one look at the probes says: act on it (``fresh``), ask for a probe now, and
    the state the server is in by its health, when that is a change."""

    fresh: bool  # a snapshot not acted on yet: the caller marks it seen
    ask_again: bool = False
    target: ServerState | None = None  # READY or UNHEALTHY


def health(state: ServerState, attempt: Attempt, probes: ProbeSnapshot, now: float) -> Health:
    if state is ServerState.STARTING and probes.taken_at < (attempt.log.ready_at or now):
        return Health(fresh=False, ask_again=True)  # the log says ready: confirm over HTTP now
    if probes.taken_at <= attempt.probe_seen:
        return Health(fresh=False)
    result = probes.results.get("health")
    healthy = result is not None and result.ok
    target = None
    if healthy and state is not ServerState.READY:
        target = ServerState.READY
    elif not healthy and state is ServerState.READY:
        target = ServerState.UNHEALTHY
        log.warning("attempt %d: health probe failed: %s", attempt.number, result)
    # The log says ready but /health is not yet 200 (warmup racing the probe): ask again
    # at the next tick rather than after a whole health interval.
    return Health(True, not healthy and state is ServerState.STARTING, target)


def hang_evidence(
    attempt: Attempt, probes: ProbeSnapshot, now: float, timeout: float
) -> str | None:
    """Alive but not progressing for ``timeout``: health probes failing all along, or
    requests waiting while no batch line comes (other lines do: uvicorn logs each of our
    probes). A long prefill logs its chunks and /health answers, so it is no hang."""
    if probes.health_failing_since is not None and now - probes.health_failing_since >= timeout:
        last = probes.results.get("health")
        detail = f"HTTP {last.status}" if last and last.status else (last.error if last else "")
        failing = now - probes.health_failing_since
        return f"health probes failing for {failing:.0f} s (last: {detail})"
    # /v1/loads is now; the last batch line's queue may be long stale (0 is an answer).
    waiting = probes.waiting_requests
    if waiting is None:
        waiting = attempt.log.progress.runtime.queued_requests or 0
    silent = attempt.batch_silence(now)
    # With --enable-metrics, a generated-token counter that still moves is progress.
    moving = probes.generated_changed_at is not None and (
        now - probes.generated_changed_at < timeout
    )
    if waiting > 0 and silent >= timeout and not moving:
        frozen = " and generated tokens frozen" if probes.generated_tokens is not None else ""
        return f"{waiting} request(s) waiting, no batch line for {silent:.0f} s{frozen}"
    return None


def startup_hang(attempt: Attempt, now: float, policy: Policy) -> str | None:
    """The evidence that a startup not serving yet hangs (startup.py), said once here."""
    evidence = startup_overdue(
        attempt.log.progress,
        attempt.started_at,
        attempt.log.last_progress_at,
        now,
        policy.startup_stall_s,
        policy.startup_timeout_s,
    )
    if evidence is not None:
        log.warning("attempt %d: %s", attempt.number, evidence)
    return evidence


def is_worker_ready(attempt: Attempt, args: dict[str, FlagValue]) -> bool:
    """A non-leader rank prints no ready line and answers a dummy /health: it is ready
    when its log shows its schedulers started and they are alive (group.py)."""
    if not node_rank(args):  # the leader (or not rendered)
        return False
    alive = sum(
        1
        for member, title in attempt.titled.items()
        if title == "sglang::scheduler" and member.alive()
    )
    return worker_ready(attempt.log.progress, alive)


@dataclass(frozen=True)
class CrossCheck:
    """Which of the once-only pool checks are done now."""

    tokens: bool
    prediction: bool


def cross_check(attempt: Attempt, reported: int | None, planned: int | None) -> CrossCheck:
    """SGLang's /server_info and the pre-flight's KV tokens, each against the log's pool:
    a disagreement is said once, when both sides are known."""
    logged = attempt.log.progress.max_total_num_tokens
    tokens_checked = attempt.tokens_checked
    if not tokens_checked and reported is not None and logged is not None:
        tokens_checked = True
        if reported != logged:
            log.warning(
                "attempt %d: /server_info reports max_total_num_tokens=%d, the log %d",
                attempt.number,
                reported,
                logged,
            )
    prediction_checked = attempt.prediction_checked
    if not prediction_checked and logged is not None:
        prediction_checked = True
        sentence = disagreement(planned, logged)
        if sentence is not None:
            log.warning("attempt %d: %s", attempt.number, sentence)
    return CrossCheck(tokens_checked, prediction_checked)


def lost_member(attempt: Attempt, now: float) -> str | None:
    """A long-lived SGLang child that died while the launcher lives on, once its grace is
    over (0.5.9 does not notice a killed scheduler: it keeps answering HTTP and hangs every
    request)."""
    if attempt.member_lost is None:
        return None
    description, noticed = attempt.member_lost
    return description if now - noticed >= LOST_MEMBER_GRACE_S else None


def member_scan_due(attempt: Attempt, now: float) -> bool:
    """SGLang starts its children during startup: look for them then, once a second."""
    return attempt.member_lost is None and now - attempt.scanned_at >= MEMBER_SCAN_S


def new_members(attempt: Attempt) -> dict[ProcessIdentity, str]:
    """The attempt's schedulers and detokenizer not watched yet, with their titles."""
    found = {}
    for member in attempt.processes.refresh():
        if member not in attempt.titled:
            role, _rank = role_of(describe(member).get("cmdline") or "", False)
            if role in ("scheduler", "detokenizer"):
                found[member] = f"sglang::{role}"
    return found


def gone_member(
    attempt: Attempt | None, gone: list[ProcessIdentity], now: float
) -> tuple[str, float] | None:
    """The first watched scheduler or detokenizer among ``gone``, as (description, now):
    its exit starts the lost-member grace (the launcher's own exit is seen by the tick)."""
    if attempt is None or attempt.member_lost is not None:
        return None
    for identity in gone:
        title = attempt.titled.get(identity)
        if title is not None:
            log.warning("attempt %d: %s is gone", attempt.number, title)
            return (f"{title} (pid {identity.pid})", now)
    return None
