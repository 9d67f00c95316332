"""What the daemon shows of itself, built from its values (under its lock): the Snapshot
a scrape renders, the DaemonStatus that /healthz, /readyz and /status answer from, and
systemd's STATUS= line. Readers only: nothing here changes the daemon."""

from __future__ import annotations

from collections.abc import Mapping

from exporter.attempt.counters import Counters
from exporter.attempt.snapshot import Snapshot
from exporter.attempt.states import ServerState
from exporter.config import nnodes, node_rank
from exporter.endpoints import DaemonStatus, liveness_limit_s
from exporter.notify import status_line
from exporter.supervisor.attempt import Attempt
from exporter.supervisor.ladder import Ladder
from exporter.supervisor.policy import Decision
from exporter.supervisor.preflight import Preflight
from exporter.termination import FailureReport


def snapshot(
    state: ServerState,
    attempt: Attempt | None,
    counters: Counters,
    ladder: Ladder,
    planned: Preflight | None,
    reaped: Mapping[str, int],
    sources: Mapping[str, object],  # each telemetry source's snapshot, by name
) -> Snapshot:
    # A profile is "current" only while the daemon means to serve with it.
    current = attempt is not None and state not in (ServerState.STOPPED, ServerState.GAVE_UP)
    return Snapshot(
        state=state,
        profile=ladder.label(attempt.profile_index) if current else None,
        profile_index=attempt.profile_index if current else None,
        attempts_total=counters.attempts_total,
        restarts=counters.restarts,
        failures=counters.failures,
        last_failure_time=counters.last_failure_time,
        startup_duration_s=counters.startup_duration_s,
        progress=attempt.log.progress.copy() if attempt else None,
        log_lines=counters.log_lines,
        last_line_time=attempt.log.last_line_at if attempt else None,
        last_batch_time=attempt.log.last_batch_at if attempt else None,
        last_progress_time=attempt.log.last_progress_at if attempt else None,
        preflight=planned,
        hangs=counters.hangs,
        remedies=counters.remedies,
        reaped=reaped,
        sources=sources,
    )


def status(
    state: ServerState,
    attempt: Attempt | None,
    ladder: Ladder,
    decision: Decision | None,
    failure: FailureReport | None,
    loop_age_s: float,
) -> DaemonStatus:
    config = ladder.config
    return DaemonStatus(
        state=state,
        attempt=attempt.number if attempt else None,
        profile=ladder.label(attempt.profile_index) if attempt else None,
        nnodes=nnodes(config.sglang.args),
        node_rank=node_rank(config.sglang.args),
        group=config.policy.group,
        decision=decision.reason if decision else None,
        last_failure=failure,
        loop_age_s=loop_age_s,
        loop_limit_s=liveness_limit_s(config.policy.stop_grace_s),
    )


def status_text(
    state: ServerState,
    attempt: Attempt | None,
    ladder: Ladder,
    counters: Counters,
    decision: Decision | None,
    gave_up_reason: str | None,
) -> str:
    """State, profile, attempt, failures so far, and why it waits in backoff or gave up."""
    why = None
    if state is ServerState.BACKOFF and decision is not None:
        why = decision.reason
    elif state is ServerState.GAVE_UP:
        why = gave_up_reason
    return status_line(
        state.value,
        ladder.label(attempt.profile_index) if attempt else None,
        attempt.number if attempt else None,
        counters.failures_total,
        why,
    )
