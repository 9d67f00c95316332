"""A daemon starting over a history: what the last one left and what to do about it.
``resumed`` reads the history, stops the launches no record tracks (as conclude.stop stops
an attempt), records the end of one that ended unwatched and returns one plan: adopt the
server still running, continue after a failure as the policy decides, or launch.
``adopted_healthy`` asks an adopted server's /health. The daemon carries out the plan."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from exporter.attempt.attempt_log import AttemptLog
from exporter.diagnosis.classify import Classification, Confidence, Outcome
from exporter.diagnosis.taxonomy import FailureClass
from exporter.history import AttemptRecord, History, Record, lost_record
from exporter.identity import ProcessIdentity, identify
from exporter.sglang.flags import FlagValue, server_url
from exporter.supervisor.attempt import Attempt
from exporter.supervisor.conclude import classified_file, masked, next_launch
from exporter.supervisor.ladder import Ladder
from exporter.supervisor.launch import ATTEMPT_MARKER
from exporter.supervisor.policy import Decision
from exporter.supervisor.processes import AttemptProcesses
from exporter.supervisor.remedies import Remedy
from exporter.telemetry.probes import ProbeCollector
from exporter.termination import FailureReport

log = logging.getLogger("sglang_sentinel.resume")

Patch = tuple[int, Remedy]  # a profile index and the automatic change it ran with


@dataclass(frozen=True)
class Adopt:
    """The last attempt's launcher still runs: follow it instead of launching."""

    record: AttemptRecord
    leader: ProcessIdentity
    patch: Patch | None


@dataclass(frozen=True)
class RecordLost:
    """The last attempt ended while no daemon watched: record its end, then plan again."""

    record: AttemptRecord


@dataclass(frozen=True)
class Continue:
    """The last attempt failed: the policy decides as if this daemon had seen it end
    (backoff, ladder and crash-loop limit survive a restart of the daemon)."""

    failure_class: FailureClass
    decision: Decision
    report: FailureReport
    patch: Patch | None


@dataclass(frozen=True)
class Launch:
    index: int
    patch: Patch | None


ResumePlan = Adopt | RecordLost | Continue | Launch


@dataclass(frozen=True)
class Untracked:
    """A launch nobody recorded (a daemon killed between spawning and recording it)."""

    leader: ProcessIdentity
    marker: str
    attempt: int  # the id in its marker: never to be reused


def resumed(
    history: History, ladder: Ladder, clock: Callable[[], float], record: Callable[[Record], None]
) -> tuple[Adopt | Continue | Launch, int]:
    """The plan a starting daemon carries out, and the highest attempt id of the untracked
    launches it stopped first. An attempt that ended unwatched gets its end record
    (``record``), and the plan is made again past it."""
    read = history.read()
    for warning in read.warnings:
        log.warning("history: %s", warning)
    paths, policy = ladder.config.paths, ladder.config.policy
    stopped = stop_untracked(read.attempts, paths.state_dir, policy.stop_grace_s)
    plan = resume_plan(read.attempts, ladder, clock())
    if isinstance(plan, RecordLost):
        record(lost_end(plan.record, ladder, clock()))
        plan = resume_plan(history.read().attempts, ladder, clock(), lost_recorded=True)
    assert not isinstance(plan, RecordLost)  # lost_recorded plans past it
    return plan, stopped


def resume_plan(
    attempts: Sequence[AttemptRecord], ladder: Ladder, now: float, lost_recorded: bool = False
) -> ResumePlan:
    """``lost_recorded``: the caller tried to record the lost end already (a history that
    cannot be written still shows the attempt unended); plan past it."""
    last = attempts[-1] if attempts else None
    if last is not None and not last.ended and last.processes:
        leader = ProcessIdentity.from_json(last.processes[0])
        if leader.alive():
            return Adopt(last, leader, restored_patch(last, ladder))
        if not lost_recorded:
            return RecordLost(last)
    patch = restored_patch(last, ladder)
    if last is None or not last.failed or last.profile_index is None:
        first = ladder.clamp(last.profile_index) if last and last.profile_index is not None else 0
        return Launch(first, patch)
    if patch is not None:  # the decision weighs the profile as it last ran
        ladder = ladder.with_patch(*patch)
    try:
        failure_class = FailureClass(last.failure_class)
    except ValueError:
        failure_class = FailureClass.OTHER
    index = ladder.clamp(last.profile_index)
    confidence = Confidence(last.confidence or Confidence.HIGH)
    decision = next_launch(ladder, failure_class, index, attempts, now, (), confidence)
    log.warning(
        "resuming after attempt %d (%s): %s", last.attempt, last.failure_class, decision.reason
    )
    report = FailureReport(
        last.attempt,
        last.profile or ladder.label(index),
        failure_class.value,
        last.root_cause_line,
        last.diagnosis or "",
        decision.reason,
        last.log,
        last.ended_at or now,
    )
    return Continue(failure_class, decision, report, patch)


def restored_patch(record: AttemptRecord | None, ladder: Ladder) -> Patch | None:
    """The automatic change the last attempt ran with survives a daemon restart."""
    patch = record.extra.get("patch") if record is not None else None
    if not isinstance(patch, dict) or record.profile_index is None:
        return None
    change = Remedy(
        dict(patch.get("set") or {}),
        tuple(patch.get("remove") or ()),
        str(patch.get("reason") or ""),
    )
    return ladder.clamp(record.profile_index), change


def lost_end(record: AttemptRecord, ladder: Ladder, at: float) -> Record:
    """The end record of an attempt that ended unwatched, classified from its log."""
    if record.log and Path(record.log).exists():
        result = classified_file(Path(record.log), Outcome(), ladder.config.sglang.version)
    else:
        result = Classification(FailureClass.OTHER, None, None, None, [], "log missing")
    result = masked(ladder, result, ladder.clamp(record.profile_index or 0))
    return lost_record(
        record.attempt,
        at,
        phase=result.phase.value if result.phase else None,
        failure_class=result.failure_class.value,
        root_cause_line=result.root_cause_line,
        diagnosis=result.diagnosis,
    )


def adopted(
    record: AttemptRecord, leader: ProcessIdentity, ladder: Ladder, clock: Callable[[], float]
) -> Attempt:
    """The attempt a running server is, as its start record tells it."""
    config = ladder.config
    log_path = Path(record.log) if record.log else None
    return Attempt(
        number=record.attempt,
        profile_index=ladder.clamp(record.profile_index or 0),
        command=list(record.command),
        log_path=log_path or config.paths.log_dir / f"attempt-{record.attempt:06d}.log",
        started_at=record.started_at or clock(),
        processes=AttemptProcesses(leader),
        log=AttemptLog(config.sglang.version, clock),
        ready_at=record.ready_at,
    )


def adopted_healthy(probes: ProbeCollector, args: dict[str, FlagValue]) -> bool:
    """Whether the adopted server (launched with ``args``) answers /health now; the probes
    target it from here on."""
    probes.target(server_url(args))
    health = probes.collect().results.get("health")
    return health is not None and health.ok


def stop_untracked(attempts: Sequence[AttemptRecord], state_dir: Path, grace_s: float) -> int:
    """Stop the launches no record tracks (by identity: SIGTERM, then SIGKILL); the highest
    attempt id in their markers (0 for none), never to be reused."""
    highest = 0
    for found in untracked(attempts, state_dir):
        highest = max(highest, found.attempt)
        log.warning("stopping an unrecorded launch (%s, pid %d)", found.marker, found.leader.pid)
        AttemptProcesses(found.leader).stop(grace_s)
    return highest


def untracked(attempts: Sequence[AttemptRecord], state_dir: Path) -> list[Untracked]:
    """Launches of this state directory, found by the marker in their environment, that
    no unended record tracks: each a session leader, identity-checked."""
    tracked = {
        ProcessIdentity.from_json(p).pid for a in attempts if not a.ended for p in a.processes
    }
    prefix = f"{state_dir}:"
    found = []
    for proc in psutil.process_iter(["pid", "environ"]):
        marker = (proc.info.get("environ") or {}).get(ATTEMPT_MARKER, "")
        pid = proc.info["pid"]
        if not marker.startswith(prefix) or pid in tracked or _session_of(pid) != pid:
            continue
        leader = identify(pid)
        if leader is not None:
            number = marker[len(prefix) :]
            found.append(Untracked(leader, marker, int(number) if number.isdigit() else 0))
    return found


def _session_of(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None
