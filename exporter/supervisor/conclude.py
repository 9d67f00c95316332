"""Ending an attempt: stop what is left of it (``wind_down``), classify its log, and
conclude: the failure class, the history's end record, the report of a failure and the
policy's decision (with the automatic remedy it carries). ``conclude`` returns all of it as
one ``Conclusion``; the daemon writes the record, counts the failure and assigns what
``applied`` makes of the decision."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from exporter.attempt.counters import Counters
from exporter.attempt.states import ServerState
from exporter.config import Config
from exporter.diagnosis.classify import Classification, Confidence, Outcome, classify
from exporter.diagnosis.planner import Plan, PlanError, calibrate, plan
from exporter.diagnosis.taxonomy import REMEDIED, FailureClass
from exporter.history import AttemptRecord, History, Record, end_record
from exporter.logs.events import Event
from exporter.logs.excerpt import Excerpt
from exporter.logs.lines import LogLine
from exporter.logs.reader import read_excerpt
from exporter.plan_inputs import gather
from exporter.redact import mask_classification, secret_values
from exporter.sglang.versions import DEFAULT_VERSION
from exporter.supervisor.attempt import Attempt
from exporter.supervisor.group import group_exit
from exporter.supervisor.ladder import Ladder
from exporter.supervisor.policy import Decision, decide
from exporter.supervisor.remedies import Remedy, remedy_for
from exporter.telemetry.gpu import GpuCollector, wait_gpu_released
from exporter.telemetry.probes import ProbeCollector
from exporter.termination import ExitCode, FailureReport, message, write_message

log = logging.getLogger("sglang_sentinel.conclude")

STOPPED_BY_DAEMON = Classification(FailureClass.NONE, None, None, None, [], "stopped by the daemon")


@dataclass(frozen=True)
class Ended:
    """What concluding needs of an attempt: which it was, when, and how far it got."""

    number: int
    profile_index: int
    started_at: float
    ready_at: float | None = None
    phase_reached: str | None = None
    log_path: str | None = None

    @classmethod
    def of(cls, attempt: Attempt) -> Ended:
        return cls(
            attempt.number,
            attempt.profile_index,
            attempt.started_at,
            attempt.ready_at,
            attempt.log.progress.step.label,
            str(attempt.log_path),
        )


@dataclass(frozen=True)
class Conclusion:
    failure_class: FailureClass
    end_record: Record
    report: FailureReport | None  # when it failed: for /status and the termination message
    decision: Decision | None  # when it ended by itself: relaunch what, when, or give up


def wind_down(
    attempt: Attempt,
    outcome: Outcome,
    probes: ProbeCollector,
    gpus: GpuCollector,
    stop_grace_s: float,
    release_s: float,
) -> Outcome:
    """Stop the attempt (``stop_grace_s``), stop probing it, wait at most ``release_s`` for
    its GPU memory; the outcome with the launcher's exit status, once it is known."""
    stop(attempt, stop_grace_s)
    probes.target(None)
    wait_gpus_released(gpus, attempt, release_s)
    return completed(outcome, attempt)


def stop(attempt: Attempt, grace_s: float) -> None:
    """Stop the attempt's processes (SIGTERM, then SIGKILL) and its tailer."""
    report = attempt.processes.stop(grace_s)
    if report.survivors:
        log.error(
            "attempt %d: %d process(es) survived SIGKILL: %s",
            attempt.number,
            len(report.survivors),
            report.survivors,
        )
    if attempt.tailer is not None:
        attempt.tailer.stop()


def wait_gpus_released(gpus: GpuCollector, attempt: Attempt, timeout_s: float) -> None:
    """A relaunch must not race a dying server for device memory (bounded wait)."""
    pids = {member.pid for member in attempt.processes.known}
    report = wait_gpu_released(gpus, pids, timeout_s)
    if report.verified and not report.released:
        holders = ", ".join(
            f"pid {h.pid} holds {(h.used_bytes or 0) / (1 << 30):.2f} GiB on GPU {h.gpu}"
            for h in report.holders
        )
        log.error("attempt %d: GPU memory not released: %s", attempt.number, holders)


def completed(outcome: Outcome, attempt: Attempt) -> Outcome:
    """The outcome with the launcher's exit status, once it is known (a hang has none)."""
    if outcome.exit_code is None and not outcome.stalled:
        return replace(outcome, exit_code=attempt.processes.exit_code())
    return outcome


def classified(
    excerpt: tuple[list[LogLine], list[Event]], outcome: Outcome, version: str | None
) -> tuple[Classification, list[Event]]:
    """The attempt's classification, and its events (the planner calibrates from them)."""
    lines, events = excerpt
    return classify(lines, events, outcome, version), events


def classified_file(path: Path, outcome: Outcome, version: str | None) -> Classification:
    """An attempt no daemon followed: its log read once, in bounded memory."""
    try:
        with open(path, "rb") as handle:
            excerpt = read_excerpt(handle)[0]
    except OSError as error:
        log.error("cannot read %s: %s", path, error)
        excerpt = Excerpt()
    return classified(excerpt.read(), outcome, version)[0]


def not_launched(error: str) -> Classification:
    return Classification(
        FailureClass.INVALID_ARGUMENT, error, None, None, [error], f"could not start: {error}"
    )


def masked(ladder: Ladder, result: Classification, index: int) -> Classification:
    """Without the secrets of the profile's flags and SGLang's environment (redact.py)."""
    return mask_classification(result, secret_values(ladder.args(index), ladder.config.sglang.env))


def conclude(
    ladder: Ladder,
    history: History,
    ended: Ended,
    result: Classification,
    outcome: Outcome,
    stopped_by: str | None,
    now: float,
    events: Sequence[Event] = (),
) -> Conclusion:
    """What an attempt's end means. One the daemon stopped is no failure and gets no
    decision; one that ended by itself failed, even with a log that shows nothing."""
    result = masked(ladder, result, ended.profile_index)
    failed = result.failure_class is not FailureClass.NONE or stopped_by is None
    failure_class = result.failure_class
    if failed and failure_class is FailureClass.NONE:
        failure_class = FailureClass.OTHER
    decision = None
    if stopped_by is None:
        decision = _decision(ladder, history, ended, failure_class, now, events, result.confidence)
    record = end_record(
        ended.number,
        now,
        exit_code=outcome.exit_code,
        phase=result.phase.value if result.phase else None,
        phase_reached=ended.phase_reached,
        failure_class=failure_class.value,
        confidence=result.confidence.value,
        root_cause_line=result.root_cause_line,
        diagnosis=result.diagnosis,
        decision=decision.reason if decision else None,
        stopped_by=stopped_by,
        served_s=now - ended.ready_at if ended.ready_at else None,
    )
    report = None
    if failed:
        report = FailureReport(
            ended.number,
            ladder.label(ended.profile_index),
            failure_class.value,
            result.root_cause_line,
            result.diagnosis,
            decision.reason if decision else None,
            ended.log_path,
            now,
        )
    return Conclusion(failure_class, record, report, decision)


@dataclass(frozen=True)
class Applied:
    """What a decision makes of the daemon's values; the daemon assigns them."""

    ladder: Ladder  # with the decision's remedy, when it carries one
    counters: Counters
    state: ServerState  # BACKOFF toward the decided launch, or GAVE_UP
    backoff_until: float | None = None
    gave_up_reason: str | None = None


def applied(
    decision: Decision, failure_class: str, ladder: Ladder, counters: Counters, now: float
) -> Applied:
    if decision.remedy is not None and decision.profile_index is not None:
        ladder = ladder.patched(decision.profile_index, decision.remedy)
        counters = counters.remedied(failure_class)
    if decision.relaunch:
        counters = counters.restarted(failure_class)
        return Applied(ladder, counters, ServerState.BACKOFF, backoff_until=now + decision.delay_s)
    return Applied(ladder, counters, ServerState.GAVE_UP, gave_up_reason=decision.reason)


def give_up(config: Config, decision: Decision, failure: FailureReport | None) -> ExitCode | None:
    """Write the termination message; the exit code when the daemon is to exit (the config
    asks for it, or a rank of a group: the group controller recreates the group)."""
    code = ExitCode.GROUP_MEMBER_FAILED if decision.group_exit else ExitCode.GAVE_UP
    write_message(config.paths.termination_log, message(code, failure))
    policy = config.policy
    if decision.group_exit or policy.group == "exit" or policy.on_give_up == "exit":
        log.error("exiting with status %d: %s", code, decision.reason)
        return code
    return None


def _decision(
    ladder: Ladder,
    history: History,
    ended: Ended,
    failure_class: FailureClass,
    now: float,
    events: Sequence[Event],
    confidence: Confidence,
) -> Decision:
    """The policy's decision over the history with this attempt's end in it; a rank of a
    multi-node group exits instead of relaunching in place (group.py)."""
    attempts = [a for a in history.read().attempts if a.attempt != ended.number]
    attempts.append(
        AttemptRecord(
            attempt=ended.number,
            profile_index=ended.profile_index,
            started_at=ended.started_at,
            ready_at=ended.ready_at,
            ended_at=now,
            failure_class=failure_class.value,
        )
    )
    decision = next_launch(
        ladder, failure_class, ended.profile_index, attempts, now, events, confidence
    )
    if ladder.config.policy.group == "exit" and decision.relaunch:
        return group_exit(failure_class.value, decision)
    return decision


def next_launch(
    ladder: Ladder,
    failure_class: FailureClass,
    index: int,
    attempts: Sequence[AttemptRecord],
    now: float,
    events: Sequence[Event] = (),
    confidence: Confidence = Confidence.HIGH,
) -> Decision:
    """The policy's decision, with the automatic remedy it may fall back on: only for a
    class the log shows with high confidence (a remedy for a guessed class can point the
    wrong way, e.g. lower a fraction that should rise)."""
    config = ladder.config
    remedy = None
    if config.policy.automatic_remedies and failure_class in REMEDIED:
        remedy = remedy_for(
            failure_class,
            ladder.args(index),
            _plan_for(ladder, index, events),
            config.policy.max_mem_fraction_static,
        )

    def decided(remedy: Remedy | None) -> Decision:
        names = [p.name for p in config.profiles]
        commands = ladder.commands()
        return decide(failure_class, index, commands, names, config.policy, attempts, now, remedy)

    decision = decided(remedy)
    if decision.remedy is not None and confidence is not Confidence.HIGH:
        decision = decided(None)
        reason = f"{decision.reason} (no automatic remedy: {failure_class} is a {confidence}"
        decision = replace(decision, reason=f"{reason}-confidence reading of the log)")
    return decision


def _plan_for(ladder: Ladder, index: int, events: Sequence[Event]) -> Plan | None:
    """SGLang's pool arithmetic for this profile, calibrated from the failed attempt's
    own log; None when the model's config.json or the device size is not at hand."""
    args = ladder.args(index)
    config = ladder.config
    version = config.sglang.version or DEFAULT_VERSION
    try:
        inputs = gather(args, {**os.environ, **config.sglang.env}, None, version)
        return plan(
            inputs.model_config,
            inputs.device_memory_bytes,
            inputs.devices,
            args,
            version,
            calibrate(events, version),
            config.policy.max_mem_fraction_static,
        )
    except PlanError as error:
        log.warning("planner: %s", error)
        return None
