"""The daemon's main loop: the only place that starts or stops SGLang.

One thread owns the state machine and the attempt. The tailer thread turns new log lines
into events and progress under the lock; the metrics server's threads read snapshots under
the same lock. Signals only set flags and wake the loop.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import psutil

from exporter.attempt.attempt_log import AttemptLog
from exporter.attempt.progress import Step
from exporter.attempt.snapshot import Snapshot
from exporter.attempt.states import ServerState, check_transition
from exporter.config import Config, ConfigError, load_config, nnodes, node_rank
from exporter.diagnosis.classify import Classification, Confidence, Outcome, classify
from exporter.diagnosis.planner import FITS, Plan, PlanError, calibrate, plan
from exporter.diagnosis.taxonomy import REMEDIED, FailureClass
from exporter.endpoints import DaemonStatus, Heartbeat, liveness_limit_s
from exporter.history import (
    AttemptRecord,
    History,
    HistoryWriteError,
    Record,
    end_record,
    lost_record,
    ready_record,
    start_record,
)
from exporter.identity import ProcessIdentity, describe, identify
from exporter.logs.events import Event
from exporter.logs.excerpt import Excerpt
from exporter.logs.lines import LogLine
from exporter.logs.reader import read_excerpt
from exporter.logs.tailer import LogTailer
from exporter.notify import Notifier, status_line
from exporter.plan_inputs import gather
from exporter.redact import mask_text, redact_command, secret_values
from exporter.sglang.flags import render_flags, server_address, server_url
from exporter.sglang.help import unknown_flags
from exporter.sglang.roles import role_of
from exporter.sglang.versions import DEFAULT_VERSION
from exporter.supervisor.exits import ExitWatch
from exporter.supervisor.flags import read_known_flags
from exporter.supervisor.group import group_exit, worker_ready
from exporter.supervisor.policy import Decision, decide
from exporter.supervisor.preflight import Preflight, check, disagreement
from exporter.supervisor.processes import AttemptProcesses, SpawnError, spawn, wait_port_free
from exporter.supervisor.reaper import Reaper
from exporter.supervisor.remedies import Remedy, remedy_for
from exporter.supervisor.startup import startup_overdue
from exporter.telemetry.gpu import wait_gpu_released
from exporter.telemetry.processes import Members
from exporter.telemetry.registry import Sources
from exporter.termination import ExitCode, FailureReport, message, write_message

log = logging.getLogger("sglang_sentinel")

# The loop is woken by what matters (a watched process's exit, a ready or fatal log line,
# a probe result, a signal); the tick only paces timeouts, the startup scan for SGLang's
# children and the watchdog, so it can be slow, and slower still while serving.
TICK_S = 1.0
SERVING_TICK_S = 5.0
TAIL_POLL_S = 2.0  # inotify wakes the tailer; this poll is only its safety net
PORT_WAIT_S = 10.0
MEMBER_SCAN_S = 1.0
# A member that vanished gets this long for the launcher to notice and exit by itself
# (SGLang's own crash path) before the daemon calls it lost.
LOST_MEMBER_GRACE_S = 3.0
ATTEMPT_MARKER = "SGLANG_SENTINEL_ATTEMPT"  # in each launch's environment: "<state_dir>:<id>"


@dataclass
class Attempt:
    """One launch of SGLang and what the daemon follows of it."""

    number: int
    profile_index: int
    command: list[str]
    log_path: Path
    started_at: float
    processes: AttemptProcesses
    log: AttemptLog  # what its log has said so far
    tailer: LogTailer | None = None
    ready_at: float | None = None
    probe_seen: float = 0.0  # taken_at of the last probe snapshot acted on
    tokens_checked: bool = False  # /server_info cross-checked against the log
    prediction_checked: bool = False  # the pre-flight's KV tokens against the log's
    titled: dict[ProcessIdentity, str] = field(default_factory=dict)  # sglang:: members
    scanned_at: float = 0.0
    member_lost: tuple[str, float] | None = None  # (description, when noticed)

    def batch_silence(self, now: float) -> float:
        """How long the scheduler has shown no work: since its last batch line, else since
        the log said ready, else since launch."""
        return now - (self.log.last_batch_at or self.log.ready_at or self.started_at)


class Daemon:
    def __init__(
        self,
        config: Config,
        sources: Callable[[Daemon], Sources],
        clock: Callable[[], float] = time.time,
        notifier: Notifier | None = None,
    ) -> None:
        """``sources`` builds the daemon's telemetry: the sources call back into the daemon
        they serve (wake, scheduler_quiet, attempt_members)."""
        self.config = config
        self._notifier = notifier or Notifier.disabled()
        self._clock = clock
        self._lock = threading.Lock()
        self._exits = ExitWatch()  # the loop sleeps here: exits, signals, news wake it
        self._stop_requested = False
        self._reload_requested = False
        self.history = History(config.paths.state_dir)
        self.state = ServerState.STOPPED
        self.attempt: Attempt | None = None
        self._backoff_until: float | None = None
        self._next_profile = 0
        self._next_reason = "first launch"
        self._attempts_total = 0
        self._restarts: Counter[str] = Counter()
        self._failures: Counter[str] = Counter()
        self._last_failure: dict[str, float] = {}
        self._startup_s: float | None = None
        self._log_lines: Counter[bool] = Counter()
        self._hangs = 0
        self._patches: dict[int, Remedy] = {}  # profile index -> automatic changes so far
        self._last_id = 0
        self._remedies: Counter[str] = Counter()
        self._planned: Preflight | None = None  # the pre-flight of the next or current launch
        self._planned_at: float | None = None
        self.sources = sources(self)  # every registered source (telemetry/registry.py)
        self.probes = self.sources.probes  # by type: readiness and hangs
        self.gpus = self.sources.gpus  # by type: their release before a relaunch
        self.gave_up_reason: str | None = None
        self.last_decision: Decision | None = None
        # PID 1 or a subreaper inherits SGLang's orphans: reaped on SIGCHLD (signals.py).
        self.reaper = Reaper(sessions=self._attempt_sessions)
        self.heartbeat = Heartbeat()  # /healthz: the loop's ticks, as the watchdog sees them
        self.last_failure: FailureReport | None = None
        self.exit_code = ExitCode.STOPPED
        self._stop_now = False  # SIGQUIT: stop SGLang without its drain

    # --- outside world -------------------------------------------------------------
    def request_stop(self, now: bool = False) -> None:
        """Stop SGLang and end the loop; ``now`` skips SGLang's drain (SIGKILL at once)."""
        self._stop_now = self._stop_now or now
        self._stop_requested = True
        self._exits.wake()

    def wake_on(self, fd: int) -> None:
        """Wake the loop whenever ``fd`` turns readable (signals.py: the signal wakeup pipe)."""
        self._exits.wake_on(fd)

    def request_reload(self) -> None:
        self._reload_requested = True
        self._exits.wake()

    def wake(self) -> None:
        """Wake the loop to look at news (the probes: a new snapshot)."""
        self._exits.wake()

    def snapshot(self) -> Snapshot:
        with self._lock:
            attempt = self.attempt
            # A profile is "current" only while the daemon means to serve with it.
            current = attempt is not None and self.state not in (
                ServerState.STOPPED,
                ServerState.GAVE_UP,
            )
            return Snapshot(
                state=self.state,
                profile=self._profile_label(attempt.profile_index) if current else None,
                profile_index=attempt.profile_index if current else None,
                attempts_total=self._attempts_total,
                restarts=dict(self._restarts),
                failures=dict(self._failures),
                last_failure_time=dict(self._last_failure),
                startup_duration_s=self._startup_s,
                progress=attempt.log.progress.copy() if attempt else None,
                log_lines=dict(self._log_lines),
                last_line_time=attempt.log.last_line_at if attempt else None,
                last_batch_time=attempt.log.last_batch_at if attempt else None,
                last_progress_time=attempt.log.last_progress_at if attempt else None,
                preflight=self._planned,
                hangs=self._hangs,
                remedies=dict(self._remedies),
                reaped=dict(self.reaper.counts),
                sources=self.sources.snapshots(),
            )

    def attempt_members(self) -> Members | None:
        """The current attempt's launcher and live members, for the process collector (on
        its thread): finding new members is the daemon's, as often as the collector looks."""
        attempt = self.attempt
        if attempt is None:
            return None
        return attempt.processes.leader, attempt.processes.refresh()

    def status(self) -> DaemonStatus:
        """What /healthz, /readyz and /status answer from."""
        with self._lock:
            attempt = self.attempt
            args = self.config.sglang.args
            return DaemonStatus(
                state=self.state,
                attempt=attempt.number if attempt else None,
                profile=self._profile_label(attempt.profile_index) if attempt else None,
                nnodes=nnodes(args),
                node_rank=node_rank(args),
                group=self.config.policy.group,
                decision=self.last_decision.reason if self.last_decision else None,
                last_failure=self.last_failure,
                loop_age_s=self.heartbeat.age_s(),
                loop_limit_s=liveness_limit_s(self.config.policy.stop_grace_s),
            )

    def _attempt_sessions(self) -> set[int]:
        attempt = self.attempt
        return {attempt.processes.session_id} if attempt else set()

    # --- the loop ----------------------------------------------------------------------
    def run(self) -> int:
        """Supervise until asked to stop; returns the process exit status."""
        self.sources.start()
        try:
            self._resume_from_history()
            self._notifier.ready(self._status_text())
            while not self._stop_requested:
                self._noticed(self._exits.wait(self._until_next_tick()))
                if self._reload_requested:
                    self._notifier.reloading("reloading config")
                    self._reload()
                    self._notifier.ready(self._status_text())
                self.tick()
            self._notifier.stopping(self._status_text())
            self._shutdown()
        finally:
            self.sources.stop()
            self._exits.close()
        return int(self.exit_code)

    def _until_next_tick(self) -> float:
        if self.state is ServerState.BACKOFF and self._backoff_until is not None:
            return max(0.0, min(TICK_S, self._backoff_until - self._clock()))
        if self.state in (ServerState.READY, ServerState.UNHEALTHY):
            lost = self.attempt.member_lost if self.attempt else None
            if lost is not None:  # wake when its grace ends
                return max(0.0, min(SERVING_TICK_S, lost[1] + LOST_MEMBER_GRACE_S - self._clock()))
            return SERVING_TICK_S
        return TICK_S

    def tick(self) -> None:
        """One pass of the loop: launch after backoff, notice an end, a stall, readiness."""
        # Only the main loop pings systemd's watchdog: if it stalls, the pings stop.
        self._notifier.watchdog()
        self.heartbeat.beat()
        now = self._clock()
        if self.state is ServerState.BACKOFF and self._backoff_until is not None:
            if now >= self._backoff_until:
                self._launch(self._next_profile, self._next_reason)
            return
        attempt = self.attempt
        if attempt is None or self.state not in (
            ServerState.STARTING,
            ServerState.READY,
            ServerState.UNHEALTHY,
        ):
            return
        if not attempt.processes.leader_running():
            self._end(Outcome(exit_code=attempt.processes.exit_code()))
        elif attempt.log.doomed_by is not None:
            log.warning(
                "attempt %d: cannot recover after: %s", attempt.number, attempt.log.doomed_by
            )
            self._end(Outcome())
        elif (lost := self._lost_member(attempt, now)) is not None:
            self._end(Outcome(lost_process=lost))
        elif self.state is ServerState.STARTING:
            policy = self.config.policy
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
                self._hung(Outcome(stalled=True, stall_evidence=evidence))
            elif attempt.log.progress.ready or self._worker_ready(attempt, now):
                self._watch_health(attempt, now)
        else:
            self._watch_health(attempt, now)

    # --- launching ------------------------------------------------------------------------
    def _args(self, index: int) -> dict:
        """A profile's flags, with the automatic remedies applied to it so far."""
        args = self.config.profile_args(index)
        patch = self._patches.get(index)
        return patch.apply(args) if patch else args

    def _command(self, index: int) -> list[str]:
        sglang = self.config.sglang
        return [sglang.python, "-m", sglang.module, *render_flags(self._args(index))]

    def _profile_label(self, index: int) -> str:
        name = self.config.profiles[index].name
        return f"{name}+auto" if index in self._patches else name

    def _next_attempt_id(self) -> int:
        """Never reused: not while the history cannot be written (the ids in memory), nor
        after a start record was cut by kill -9 (the log files already named)."""
        logged = [
            int(path.stem.split("-")[1])
            for path in self.config.paths.log_dir.glob("attempt-*.log")
            if path.stem.split("-")[1].isdigit()
        ]
        number = max(self.history.next_attempt_id(), self._last_id + 1, max(logged, default=0) + 1)
        self._last_id = number
        return number

    def _launch(self, index: int, reason: str) -> None:
        config = self.config
        number = self._next_attempt_id()
        self._preflight(number, index)
        command = self._command(index)
        log_dir = config.paths.log_dir
        log_path = log_dir / f"attempt-{number:06d}.log"
        args = self._args(index)
        # Unbuffered: SGLang SIGKILLs itself on failure, and buffered stdout would die with it.
        # The marker lets a restarted daemon find a launch it could not record (kill -9).
        env = {
            "PYTHONUNBUFFERED": "1",
            **os.environ,
            **config.sglang.env,
            ATTEMPT_MARKER: f"{config.paths.state_dir}:{number}",
        }
        try:
            log_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            self._not_launched(number, index, command, log_path, self._clock(), str(error))
            return
        rejected = self._unknown_flags(args, env)
        if rejected:
            self._not_launched(number, index, command, log_path, self._clock(), rejected)
            return
        self.probes.target(server_url(args), sglang_metrics=args.get("enable-metrics") is True)
        host, port = server_address(args)
        if not wait_port_free(host, port, PORT_WAIT_S):
            log.warning("attempt %d: port %s:%d is in use before launch", number, host, port)
        started = self._clock()
        try:
            popen = spawn(command, env=env, cwd=config.sglang.workdir, log_path=log_path)
        except SpawnError as error:
            self._not_launched(number, index, command, log_path, started, str(error))
            return
        leader = identify(popen.pid) or ProcessIdentity(popen.pid, started)
        # The loop wakes the moment the launcher exits: a crash is decided in milliseconds,
        # not at the next tick.
        self._exits.watch(leader)
        attempt = Attempt(
            number=number,
            profile_index=index,
            command=command,
            log_path=log_path,
            started_at=started,
            processes=AttemptProcesses(leader, popen),
            log=AttemptLog(config.sglang.version, self._clock),
        )
        _point_current(log_dir, log_path)
        self._record_start(number, index, started, command, log_path, [leader], reason)
        with self._lock:
            self.attempt = attempt
            self._attempts_total += 1
            self._set_state(ServerState.STARTING)
        log.info(
            "attempt %d: launched profile '%s' (%s), log %s",
            number,
            self._profile_label(index),
            reason,
            log_path,
        )
        self._follow(attempt, start_at_end=False)

    def _preflight(self, number: int, index: int) -> None:
        """Plan the command about to launch (policy.preflight); in "fix" mode a predicted
        sizing failure gets the planner's cheapest fitting change first, as a patch that
        later remedies build on. Whatever goes wrong here, the launch goes ahead."""
        policy = self.config.policy
        self._planned = self._planned_at = None
        if policy.preflight == "off":
            return
        self._planned_at = self._clock()
        args = self._args(index)
        version = self.config.sglang.version or DEFAULT_VERSION
        try:
            previous = next((a.log for a in reversed(self.history.read().attempts) if a.log), None)
            env = {**os.environ, **self.config.sglang.env}
            inputs: object = gather(args, env, previous, version)
        except Exception as error:  # no input problem may block a launch
            inputs = str(error) or type(error).__name__
        result = check(policy.preflight, args, inputs, version, policy.max_mem_fraction_static)
        with self._lock:
            if result.applied and result.change is not None:
                earlier = self._patches.get(index)
                self._patches[index] = earlier.then(result.change) if earlier else result.change
                self._remedies[result.verdict] += 1
            self._planned = result
        say = log.info if result.verdict == FITS else log.warning
        say("attempt %d: %s", number, result.sentence())

    def _record_start(
        self,
        number: int,
        index: int,
        at: float,
        command: list[str],
        log_path: Path,
        processes: list[ProcessIdentity],
        reason: str,
    ) -> None:
        self._record(
            start_record(
                number,
                at,
                profile=self.config.profiles[index].name,
                profile_index=index,
                command=redact_command(command),
                log=log_path,
                processes=[process.to_json() for process in processes],
                reason=reason,
                patch=self._patch_record(index),
                preflight=self._preflight_record(),
            )
        )

    def _preflight_record(self) -> dict | None:
        planned = self._planned
        if planned is None:
            return None
        return planned.record(self._planned_at or 0.0)["preflight"]

    def _patch_record(self, index: int) -> dict | None:
        """The automatic change a launch carries, so a restarted daemon keeps it."""
        patch = self._patches.get(index)
        if patch is None:
            return None
        return {"set": patch.set, "remove": list(patch.remove), "reason": patch.reason}

    def _unknown_flags(self, args: dict, env: dict) -> str | None:
        """Flags this SGLang's --help does not list: a launch would fail after seconds."""
        sglang = self.config.sglang
        known = read_known_flags(
            [sglang.python, "-m", sglang.module], env, self.config.paths.state_dir, sglang.version
        )
        rejected = unknown_flags(args, known) if known else []
        if not rejected:
            return None
        flags = ", ".join(f"--{name}" for name in rejected)
        version = f"SGLang {sglang.version}" if sglang.version else "the installed SGLang"
        return f"{flags}: not a flag of {version} (checked against its --help before launch)"

    def _follow(self, attempt: Attempt, start_at_end: bool, catch_up: bool = False) -> None:
        def on_lines(lines: list[str]) -> None:
            with self._lock:
                fed = attempt.log.feed(lines)
                self._log_lines[True] += fed.matched
                self._log_lines[False] += fed.unknown
            if fed.turned:  # ready or doomed: the loop acts on it now, not at its next tick
                self._exits.wake()

        attempt.tailer = LogTailer(
            attempt.log_path, on_lines, start_at_end=start_at_end, poll_interval=TAIL_POLL_S
        )
        attempt.tailer.start(catch_up=catch_up)

    def _not_launched(
        self, number: int, index: int, command: list[str], log_path: Path, at: float, error: str
    ) -> None:
        """An attempt that never started (bad flags, missing interpreter): recorded all the
        same, so the policy moves on and the history says why."""
        log.error("attempt %d: could not start SGLang: %s", number, error)
        self._record_start(number, index, at, command, log_path, [], "not launched")
        result = Classification(
            FailureClass.INVALID_ARGUMENT, error, None, None, [error], f"could not start: {error}"
        )
        with self._lock:
            self._attempts_total += 1
        self._conclude(number, index, at, None, result, Outcome(), stopped_by=None)

    # --- watching ---------------------------------------------------------------------------
    def _watch_health(self, attempt: Attempt, now: float) -> None:
        """Act on a new probe snapshot: ready, unhealthy, recovered, or hung."""
        probes = self.probes.snapshot()
        if self.state is ServerState.STARTING and probes.taken_at < (attempt.log.ready_at or now):
            self.probes.request()  # the log says ready: confirm over HTTP now
            return
        if probes.taken_at <= attempt.probe_seen:
            return
        attempt.probe_seen = probes.taken_at
        health = probes.results.get("health")
        healthy = health is not None and health.ok
        if not healthy and self.state is ServerState.STARTING:
            # The log says ready but /health is not yet 200 (warmup racing the probe):
            # ask again at the next tick rather than after a whole health interval.
            self.probes.request()
        with self._lock:
            if healthy and self.state is not ServerState.READY:
                first = self.state is ServerState.STARTING
                if first:
                    attempt.ready_at = now
                    self._startup_s = now - attempt.started_at
                self._set_state(ServerState.READY)
            elif not healthy and self.state is ServerState.READY:
                first = False
                self._set_state(ServerState.UNHEALTHY)
                log.warning("attempt %d: health probe failed: %s", attempt.number, health)
            else:
                first = False
        if first:
            log.info("attempt %d: serving after %.1f s", attempt.number, self._startup_s)
            self._record(ready_record(attempt.number, now, self._startup_s))
        self._cross_check(attempt, probes.max_total_num_tokens)
        self._check_prediction(attempt)
        evidence = self._hang_evidence(attempt, probes, now)
        if evidence is not None:
            log.warning("attempt %d: hung: %s", attempt.number, evidence)
            self._hung(Outcome(stalled=True, stall_evidence=evidence))

    def _worker_ready(self, attempt: Attempt, now: float) -> bool:
        """A non-leader rank prints no ready line and answers a dummy /health: it is ready
        when its log shows its schedulers started and they are alive (group.py)."""
        if not node_rank(self._args(attempt.profile_index)):  # the leader (or not rendered)
            return False
        alive = sum(
            1
            for member, title in attempt.titled.items()
            if title == "sglang::scheduler" and member.alive()
        )
        if not worker_ready(attempt.log.progress, alive):
            return False
        with self._lock:
            if attempt.log.ready_at is None:
                attempt.log.ready_at = now
        return True

    def _hang_evidence(self, attempt: Attempt, probes, now: float) -> str | None:
        """Alive but not progressing for hang_timeout_s: health probes failing all along, or
        requests waiting while no batch line comes (other lines do: uvicorn logs each of our
        probes). A long prefill logs its chunks and /health answers, so it is no hang."""
        timeout = self.config.policy.hang_timeout_s
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

    def scheduler_quiet(self) -> bool:
        """No batch line for two probe intervals. Only then can requests be stuck waiting,
        so only then is /v1/loads asked: SGLang logs a prefill batch for each /health it
        answers (its one-token generation), so a working scheduler is never that quiet.
        Called from the probes' thread: reads one attempt's times, no lock needed."""
        attempt = self.attempt
        if attempt is None:
            return True
        return attempt.batch_silence(self._clock()) >= 2 * self.config.policy.health_interval_s

    def _cross_check(self, attempt: Attempt, reported: int | None) -> None:
        """SGLang's /server_info and its log must agree on the pool; say so once if not."""
        logged = attempt.log.progress.max_total_num_tokens
        if attempt.tokens_checked or reported is None or logged is None:
            return
        attempt.tokens_checked = True
        if reported != logged:
            log.warning(
                "attempt %d: /server_info reports max_total_num_tokens=%d, the log %d",
                attempt.number,
                reported,
                logged,
            )

    def _check_prediction(self, attempt: Attempt) -> None:
        """The pre-flight's KV tokens against SGLang's logged ones; say so once if apart."""
        logged = attempt.log.progress.max_total_num_tokens
        planned = self._planned.planned_tokens if self._planned else None
        if attempt.prediction_checked or logged is None:
            return
        attempt.prediction_checked = True
        sentence = disagreement(planned, logged)
        if sentence is not None:
            log.warning("attempt %d: %s", attempt.number, sentence)

    def _hung(self, outcome: Outcome) -> None:
        with self._lock:
            self._hangs += 1
        self._end(outcome)

    def _lost_member(self, attempt: Attempt, now: float) -> str | None:
        """A long-lived SGLang child that died while the launcher lives on (0.5.9 does not
        notice a killed scheduler: it keeps answering HTTP and hangs every request)."""
        if attempt.member_lost is not None:
            description, noticed = attempt.member_lost
            return description if now - noticed >= LOST_MEMBER_GRACE_S else None
        # SGLang starts its children during startup: scan the system for them then, once a
        # second, and watch each for its exit (see _noticed).
        if self.state is ServerState.STARTING and now - attempt.scanned_at >= MEMBER_SCAN_S:
            attempt.scanned_at = now
            self._watch_members(attempt)
        return None

    def _watch_members(self, attempt: Attempt) -> None:
        """Find the attempt's schedulers and detokenizer and watch each for its exit."""
        for member in attempt.processes.refresh():
            if member not in attempt.titled:
                role, _rank = role_of(describe(member).get("cmdline") or "", False)
                if role in ("scheduler", "detokenizer"):
                    attempt.titled[member] = f"sglang::{role}"
                    self._exits.watch(member)

    def _noticed(self, gone: list[ProcessIdentity]) -> None:
        """Watched processes that exited: a scheduler's or detokenizer's exit starts the
        lost-member grace (the launcher's own exit is seen by the tick)."""
        attempt = self.attempt
        for identity in gone:
            title = attempt.titled.get(identity) if attempt else None
            if title is not None and attempt.member_lost is None:
                attempt.member_lost = (f"{title} (pid {identity.pid})", self._clock())
                log.warning("attempt %d: %s is gone", attempt.number, title)

    # --- ending -----------------------------------------------------------------------------
    def _end(self, outcome: Outcome, stopped_by: str | None = None) -> None:
        """The attempt ended (or is being ended): clean up, classify, record, decide."""
        attempt = self.attempt
        assert attempt is not None
        report = attempt.processes.stop(0.0 if self._stop_now else self.config.policy.stop_grace_s)
        if report.survivors:
            log.error(
                "attempt %d: %d process(es) survived SIGKILL: %s",
                attempt.number,
                len(report.survivors),
                report.survivors,
            )
        if attempt.tailer is not None:
            attempt.tailer.stop()
        self._exits.forget_all()
        self.probes.target(None)
        self._wait_gpus_released(attempt)
        if outcome.exit_code is None and not outcome.stalled:
            outcome = replace(outcome, exit_code=attempt.processes.exit_code())
        events: list[Event] = []
        if stopped_by == "daemon":
            result = Classification(
                FailureClass.NONE, None, None, None, [], "stopped by the daemon"
            )
        else:
            with self._lock:  # the tailer has stopped: the excerpt holds the whole log's say
                attempt.log.close()
                excerpt = attempt.log.excerpt.read()
            result, events = _classify(excerpt, outcome, self.config.sglang.version)
        self._conclude(
            attempt.number,
            attempt.profile_index,
            attempt.started_at,
            attempt,
            result,
            outcome,
            stopped_by,
            events,
        )

    def _masked(self, result: Classification, index: int) -> Classification:
        """SGLang echoes its arguments into its log; a secret among them must not reach
        the history or the daemon's log through a root-cause line or a diagnosis."""
        secrets = secret_values(self._args(index), self.config.sglang.env)
        if not secrets:
            return result
        return replace(
            result,
            root_cause_line=mask_text(result.root_cause_line, secrets),
            diagnosis=mask_text(result.diagnosis, secrets) or "",
            evidence=[mask_text(line, secrets) or "" for line in result.evidence],
        )

    def _wait_gpus_released(self, attempt: Attempt) -> None:
        """A relaunch must not race a dying server for device memory (bounded wait)."""
        pids = {member.pid for member in attempt.processes.known}
        report = wait_gpu_released(self.gpus, pids, self.config.policy.stop_grace_s)
        if report.verified and not report.released:
            holders = ", ".join(
                f"pid {h.pid} holds {(h.used_bytes or 0) / (1 << 30):.2f} GiB on GPU {h.gpu}"
                for h in report.holders
            )
            log.error("attempt %d: GPU memory not released: %s", attempt.number, holders)

    def _conclude(
        self,
        number: int,
        index: int,
        started_at: float,
        attempt: Attempt | None,
        result: Classification,
        outcome: Outcome,
        stopped_by: str | None,
        events: Sequence[Event] = (),
    ) -> None:
        now = self._clock()
        result = self._masked(result, index)
        failed = result.failure_class is not FailureClass.NONE or stopped_by is None
        failure_class = result.failure_class
        if failed and failure_class is FailureClass.NONE:
            # It exited on its own and its log shows nothing: that is still a failure.
            failure_class = FailureClass.OTHER
        decision = None
        if stopped_by is None:
            decision = self._decide(
                number, index, started_at, attempt, failure_class, now, events, result.confidence
            )
        self._record(
            end_record(
                number,
                now,
                exit_code=outcome.exit_code,
                phase=result.phase.value if result.phase else None,
                phase_reached=attempt.log.progress.step.label if attempt else None,
                failure_class=failure_class.value,
                confidence=result.confidence.value,
                root_cause_line=result.root_cause_line,
                diagnosis=result.diagnosis,
                decision=decision.reason if decision else None,
                stopped_by=stopped_by,
                served_s=now - attempt.ready_at if attempt and attempt.ready_at else None,
            )
        )
        with self._lock:
            if failed:
                self._failures[failure_class.value] += 1
                self._last_failure[failure_class.value] = now
                self.last_failure = FailureReport(
                    number,
                    self._profile_label(index),
                    failure_class.value,
                    result.root_cause_line,
                    result.diagnosis,
                    decision.reason if decision else None,
                    str(attempt.log_path) if attempt else None,
                    now,
                )
            if decision is not None:
                self._apply(decision, failure_class, now)
        if decision is not None:
            log.warning("attempt %d: %s %s", number, result.diagnosis, decision.reason)

    def _apply(self, decision: Decision, failure_class: FailureClass, now: float) -> None:
        """Go to backoff toward the decided launch, or give up. Called under the lock."""
        self.last_decision = decision
        if decision.remedy is not None and decision.profile_index is not None:
            earlier = self._patches.get(decision.profile_index)
            self._patches[decision.profile_index] = (
                earlier.then(decision.remedy) if earlier else decision.remedy
            )
            self._remedies[failure_class.value] += 1
        if decision.relaunch:
            self._restarts[failure_class.value] += 1
            self._next_profile = decision.profile_index or 0
            self._next_reason = decision.reason
            self._backoff_until = now + decision.delay_s
            self._set_state(ServerState.BACKOFF)
        else:
            self.gave_up_reason = decision.reason
            self._set_state(ServerState.GAVE_UP)
            self._gave_up(decision)

    def _gave_up(self, decision: Decision) -> None:
        """The termination message, and the exit where the config asks for one (a rank of a
        group always exits: the group controller recreates the group)."""
        code = ExitCode.GROUP_MEMBER_FAILED if decision.group_exit else ExitCode.GAVE_UP
        write_message(self.config.paths.termination_log, message(code, self.last_failure))
        policy = self.config.policy
        if decision.group_exit or policy.group == "exit" or policy.on_give_up == "exit":
            log.error("exiting with status %d: %s", code, decision.reason)
            self.exit_code = code
            self._stop_requested = True

    def _decide(
        self,
        number: int,
        index: int,
        started_at: float,
        attempt: Attempt | None,
        failure_class: FailureClass,
        now: float,
        events: Sequence[Event] = (),
        confidence: Confidence = Confidence.HIGH,
    ) -> Decision:
        attempts = [a for a in self.history.read().attempts if a.attempt != number]
        attempts.append(
            AttemptRecord(
                attempt=number,
                profile_index=index,
                started_at=started_at,
                ready_at=attempt.ready_at if attempt else None,
                ended_at=now,
                failure_class=failure_class.value,
            )
        )
        decision = self._policy_decision(failure_class, index, attempts, now, events, confidence)
        if self.config.policy.group == "exit" and decision.relaunch:
            return group_exit(failure_class.value, decision)
        return decision

    def _policy_decision(
        self,
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
        config = self.config
        remedy = None
        if config.policy.automatic_remedies and failure_class in REMEDIED:
            remedy = remedy_for(
                failure_class,
                self._args(index),
                self._plan_for(index, events),
                config.policy.max_mem_fraction_static,
            )

        def decided(remedy: Remedy | None) -> Decision:
            commands = [self._command(i) for i in range(len(config.profiles))]
            names = [p.name for p in config.profiles]
            return decide(
                failure_class, index, commands, names, config.policy, attempts, now, remedy
            )

        decision = decided(remedy)
        if decision.remedy is not None and confidence is not Confidence.HIGH:
            decision = decided(None)
            reason = f"{decision.reason} (no automatic remedy: {failure_class} is a {confidence}"
            decision = replace(decision, reason=f"{reason}-confidence reading of the log)")
        return decision

    def _plan_for(self, index: int, events: Sequence[Event]) -> Plan | None:
        """SGLang's pool arithmetic for this profile, calibrated from the failed attempt's
        own log; None when the model's config.json or the device size is not at hand."""
        args = self._args(index)
        version = self.config.sglang.version or DEFAULT_VERSION
        try:
            inputs = gather(args, {**os.environ, **self.config.sglang.env}, None, version)
            return plan(
                inputs.model_config,
                inputs.device_memory_bytes,
                inputs.devices,
                args,
                version,
                calibrate(events, version),
                self.config.policy.max_mem_fraction_static,
            )
        except PlanError as error:
            log.warning("planner: %s", error)
            return None

    # --- daemon life ------------------------------------------------------------------------
    def _resume_from_history(self) -> None:
        """Adopt a server a previous daemon left running; else continue where the history
        stopped: after a failure the policy decides (backoff, ladder and crash-loop limit
        survive a restart of the daemon), otherwise launch."""
        read = self.history.read()
        for warning in read.warnings:
            log.warning("history: %s", warning)
        self._stop_untracked(read.attempts)
        last = read.attempts[-1] if read.attempts else None
        if last is not None and not last.ended and last.processes:
            leader = ProcessIdentity.from_json(last.processes[0])
            if leader.alive():
                self._restore_patch(last)
                self._adopt(last, leader)
                return
            self._record_lost(last)
        attempts = self.history.read().attempts
        last = attempts[-1] if attempts else None
        self._restore_patch(last)
        if last is None or not last.failed or last.profile_index is None:
            self._launch(self._first_profile(attempts), "first launch")
            return
        try:
            failure_class = FailureClass(last.failure_class)
        except ValueError:
            failure_class = FailureClass.OTHER
        index = min(last.profile_index, len(self.config.profiles) - 1)
        now = self._clock()
        confidence = Confidence(last.confidence or Confidence.HIGH)
        decision = self._policy_decision(failure_class, index, attempts, now, (), confidence)
        log.warning(
            "resuming after attempt %d (%s): %s", last.attempt, last.failure_class, decision.reason
        )
        with self._lock:
            self.last_failure = FailureReport(
                last.attempt,
                last.profile or self._profile_label(index),
                failure_class.value,
                last.root_cause_line,
                last.diagnosis or "",
                decision.reason,
                last.log,
                last.ended_at or now,
            )
            self._apply(decision, failure_class, now)

    def _stop_untracked(self, attempts: Sequence[AttemptRecord]) -> None:
        """A daemon killed between spawning SGLang and recording it left a launch nobody
        tracks: find it by the marker in its environment and stop it, identity-checked."""
        tracked = {
            ProcessIdentity.from_json(p).pid for a in attempts if not a.ended for p in a.processes
        }
        prefix = f"{self.config.paths.state_dir}:"
        for proc in psutil.process_iter(["pid", "environ"]):
            marker = (proc.info.get("environ") or {}).get(ATTEMPT_MARKER, "")
            pid = proc.info["pid"]
            if not marker.startswith(prefix) or pid in tracked or _session_of(pid) != pid:
                continue
            leader = identify(pid)
            if leader is None:
                continue
            self._last_id = max(self._last_id, _int_or_zero(marker[len(prefix) :]))
            log.warning("stopping an unrecorded launch (%s, pid %d)", marker, pid)
            AttemptProcesses(leader).stop(self.config.policy.stop_grace_s)

    def _restore_patch(self, record: AttemptRecord | None) -> None:
        """The automatic change the last attempt ran with survives a daemon restart."""
        patch = record.extra.get("patch") if record is not None else None
        if not isinstance(patch, dict) or record.profile_index is None:
            return
        index = min(record.profile_index, len(self.config.profiles) - 1)
        self._patches[index] = Remedy(
            dict(patch.get("set") or {}),
            tuple(patch.get("remove") or ()),
            str(patch.get("reason") or ""),
        )

    def _first_profile(self, attempts: list[AttemptRecord]) -> int:
        """After a daemon restart, continue the ladder where the last attempt was."""
        if attempts and attempts[-1].profile_index is not None:
            return min(attempts[-1].profile_index, len(self.config.profiles) - 1)
        return 0

    def _adopt(self, record: AttemptRecord, leader: ProcessIdentity) -> None:
        index = min(record.profile_index or 0, len(self.config.profiles) - 1)
        log_path = Path(record.log) if record.log else None
        attempt = Attempt(
            number=record.attempt,
            profile_index=index,
            command=list(record.command),
            log_path=log_path or self.config.paths.log_dir / f"attempt-{record.attempt:06d}.log",
            started_at=record.started_at or self._clock(),
            processes=AttemptProcesses(leader),
            log=AttemptLog(self.config.sglang.version, self._clock),
            ready_at=record.ready_at,
        )
        self._last_id = max(self._last_id, record.attempt)
        # Its log so far, read once from the start before the probe (pool metrics, the
        # excerpt its classification will need), then followed from there: no line lost.
        self._follow(attempt, start_at_end=False, catch_up=True)
        # Had it said it was ready before this daemon came? A ready line that arrives while
        # the probe below runs is a server becoming ready, not one gone bad.
        was_ready = attempt.log.progress.ready
        self.probes.target(server_url(self._args(index)))
        health = self.probes.collect().results.get("health")
        healthy = health is not None and health.ok
        with self._lock:
            self.attempt = attempt
            self._attempts_total += 1
            self._set_state(ServerState.READY if healthy else ServerState.STARTING)
        if not healthy and was_ready:
            log.warning("attempt %d: adopted server is not healthy; replacing it", record.attempt)
            self._end(Outcome(), stopped_by="daemon")
            with self._lock:
                self._set_state(ServerState.BACKOFF)
            self._launch(index, "adopted server was unhealthy")
            return
        log.info("attempt %d: adopted the running server (pid %d)", record.attempt, leader.pid)
        self._exits.watch(leader)
        self._watch_members(attempt)
        if healthy and attempt.ready_at is None:
            # It became ready while no daemon watched: record it, or healthy_reset_s and
            # served_s would count from this adoption.
            now = self._clock()
            attempt.ready_at = now
            self._startup_s = now - attempt.started_at
            self._record(ready_record(attempt.number, now, self._startup_s))

    def _record_lost(self, record: AttemptRecord) -> None:
        """The last attempt ended while no daemon watched it: classify it from its log."""
        if record.log and Path(record.log).exists():
            result, _events = _classify_file(
                Path(record.log), Outcome(), self.config.sglang.version
            )
        else:
            result = Classification(FailureClass.OTHER, None, None, None, [], "log missing")
        result = self._masked(result, min(record.profile_index or 0, len(self.config.profiles) - 1))
        self._record(
            lost_record(
                record.attempt,
                self._clock(),
                phase=result.phase.value if result.phase else None,
                failure_class=result.failure_class.value,
                root_cause_line=result.root_cause_line,
                diagnosis=result.diagnosis,
            )
        )

    def _reload(self) -> None:
        self._reload_requested = False
        source = self.config.source
        try:
            config = load_config(source) if source else self.config
        except ConfigError as error:
            log.error("reload: keeping the running config: %s", error)
            return
        old = self.config
        attempt = self.attempt
        index = 0
        with self._lock:  # a scrape must never see the new ladder with an old index
            self.config = config
            if attempt is not None:
                index = min(attempt.profile_index, len(config.profiles) - 1)
                previous, attempt.profile_index = attempt.profile_index, index
        log.info("reload: config re-read from %s", source)
        if self.state is ServerState.GAVE_UP:
            self.gave_up_reason = None
            self._launch(0, "config reloaded after giving up")
        elif (
            attempt is not None
            and self.state
            in (
                ServerState.STARTING,
                ServerState.READY,
                ServerState.UNHEALTHY,
            )
            and config.command(index) != old.command(previous)
        ):
            self._restart(index, "config_reload")

    def _restart(self, index: int, reason: str) -> None:
        with self._lock:
            self._set_state(ServerState.STOPPING)
            self._restarts[reason] += 1
        self._end(Outcome(), stopped_by="daemon")
        with self._lock:
            self._set_state(ServerState.BACKOFF)
        self._launch(index, reason.replace("_", " "))

    def _shutdown(self) -> None:
        attempt = self.attempt
        if attempt is not None and self.state in (
            ServerState.STARTING,
            ServerState.READY,
            ServerState.UNHEALTHY,
        ):
            with self._lock:
                self._set_state(ServerState.STOPPING)
            log.info("stopping attempt %d", attempt.number)
            self._end(Outcome(), stopped_by="daemon")
        with self._lock:
            self._set_state(ServerState.STOPPED)

    # --- helpers ------------------------------------------------------------------------------
    def _set_state(self, target: ServerState) -> None:
        check_transition(self.state, target)
        self.state = target
        self._notifier.status(self._status_text())

    def _status_text(self) -> str:
        """systemd's STATUS= line: state, profile, attempt, failures, and why when waiting."""
        attempt = self.attempt
        detail = None
        if self.state is ServerState.BACKOFF and self.last_decision is not None:
            detail = self.last_decision.reason
        elif self.state is ServerState.GAVE_UP:
            detail = self.gave_up_reason
        return status_line(
            self.state.value,
            self._profile_label(attempt.profile_index) if attempt else None,
            attempt.number if attempt else None,
            sum(self._failures.values()),
            detail,
        )

    def _record(self, record: Record) -> None:
        try:
            self.history.append(record)
        except HistoryWriteError as error:
            # Keep supervising: the server matters more than our notes about it.
            log.error("history: %s", error)


def _classify(
    excerpt: tuple[list[LogLine], list[Event]], outcome: Outcome, version: str | None
) -> tuple[Classification, list[Event]]:
    """The attempt's classification, and its events (the planner calibrates from them)."""
    lines, events = excerpt
    return classify(lines, events, outcome, version), events


def _classify_file(
    path: Path, outcome: Outcome, version: str | None
) -> tuple[Classification, list[Event]]:
    """An attempt no daemon followed: its log read once, in bounded memory."""
    try:
        with open(path, "rb") as handle:
            excerpt = read_excerpt(handle)[0]
    except OSError as error:
        log.error("cannot read %s: %s", path, error)
        excerpt = Excerpt()
    return _classify(excerpt.read(), outcome, version)


def _session_of(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def _int_or_zero(text: str) -> int:
    return int(text) if text.isdigit() else 0


def _point_current(log_dir: Path, target: Path) -> None:
    """`current` always names the live attempt's log; replaced atomically."""
    link = log_dir / "current"
    temporary = log_dir / f".current-{os.getpid()}"
    try:
        temporary.unlink(missing_ok=True)
        temporary.symlink_to(target.name)
        temporary.replace(link)
    except OSError as error:
        log.warning("cannot update %s: %s", link, error)


__all__ = ["Attempt", "Daemon", "Step"]
