"""The daemon's main loop: the only place that starts or stops SGLang, and the only writer
of the server's state, the attempt, the ladder's changes and the counters.

Launching, watching, concluding and resuming are values computed beside it
(supervisor/launch.py, watch.py, conclude.py, resume.py); the daemon applies them. One
thread owns the state machine and the attempt. The tailer thread folds new log lines into
the attempt and the counters under the lock; the metrics server's threads read snapshots
under the same lock. Signals only set flags and wake the loop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from exporter.attempt.counters import Counters
from exporter.attempt.snapshot import Snapshot
from exporter.attempt.states import ServerState, check_transition
from exporter.config import Config, ConfigError, load_config
from exporter.diagnosis.classify import Classification, Outcome
from exporter.diagnosis.taxonomy import FailureClass
from exporter.endpoints import DaemonStatus, Heartbeat
from exporter.history import AttemptRecord, History, HistoryWriteError, Record, ready_record
from exporter.identity import ProcessIdentity
from exporter.logs.events import Event
from exporter.logs.tailer import LogTailer
from exporter.notify import Notifier
from exporter.sglang.flags import server_url
from exporter.supervisor import conclude, launch, resume, views, watch
from exporter.supervisor.attempt import Attempt
from exporter.supervisor.exits import ExitWatch
from exporter.supervisor.ladder import Ladder
from exporter.supervisor.launch import LaunchSpec, NotLaunched
from exporter.supervisor.policy import Decision
from exporter.supervisor.preflight import Preflight
from exporter.supervisor.processes import AttemptProcesses
from exporter.supervisor.reaper import Reaper
from exporter.supervisor.watch import LOST_MEMBER_GRACE_S
from exporter.telemetry.processes import Members
from exporter.telemetry.registry import Sources
from exporter.termination import ExitCode, FailureReport

log = logging.getLogger("sglang_sentinel")

# The loop is woken by what matters (a watched process's exit, a ready or fatal log line,
# a probe result, a signal); the tick only paces timeouts, the startup scan for SGLang's
# children and the watchdog, so it can be slow, and slower still while serving.
TICK_S = 1.0
SERVING_TICK_S = 5.0
TAIL_POLL_S = 2.0  # inotify wakes the tailer; this poll is only its safety net
LIVE = (ServerState.STARTING, ServerState.READY, ServerState.UNHEALTHY)  # an attempt runs


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
        self.ladder = Ladder(config)  # the config, and the automatic changes to its profiles
        self._notifier = notifier or Notifier.disabled()
        self._clock = clock
        self._lock = threading.Lock()
        self._exits = ExitWatch()  # the loop sleeps here: exits, signals, news wake it
        self._stop_requested = False
        self._reload_requested = False
        self._stop_now = False  # SIGQUIT: stop SGLang without its drain
        self.history = History(config.paths.state_dir)
        self.state = ServerState.STOPPED
        self.attempt: Attempt | None = None
        self.counters = Counters()
        self._backoff_until: float | None = None
        self._next_profile = 0
        self._next_reason = "first launch"
        self._last_id = 0
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

    @property
    def config(self) -> Config:
        return self.ladder.config

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
            return views.snapshot(
                self.state,
                self.attempt,
                self.counters,
                self.ladder,
                self._planned,
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
            decision = self.last_decision.reason if self.last_decision else None
            failure, age_s = self.last_failure, self.heartbeat.age_s()
            return views.status(self.state, self.attempt, self.ladder, decision, failure, age_s)

    def scheduler_quiet(self) -> bool:
        """No batch line for two probe intervals. Only then can requests be stuck waiting,
        so only then is /v1/loads asked: SGLang logs a prefill batch for each /health it
        answers (its one-token generation), so a working scheduler is never that quiet.
        Called from the probes' thread: reads one attempt's times, no lock needed."""
        attempt = self.attempt
        if attempt is None:
            return True
        return attempt.batch_silence(self._clock()) >= 2 * self.config.policy.health_interval_s

    def _attempt_sessions(self) -> set[int]:
        attempt = self.attempt
        return {attempt.processes.session_id} if attempt else set()

    # --- the loop ----------------------------------------------------------------------
    def run(self) -> int:
        """Supervise until asked to stop; returns the process exit status."""
        self.sources.start()
        try:
            self._resume()
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
        """One pass of the loop: launch after backoff, notice an end, a stall, readiness.
        An attempt that ends goes on to BACKOFF or GAVE_UP as the policy decides (_apply)."""
        # Only the main loop pings systemd's watchdog: if it stalls, the pings stop.
        self._notifier.watchdog()
        self.heartbeat.beat()
        now = self._clock()
        if self.state is ServerState.BACKOFF and self._backoff_until is not None:
            if now >= self._backoff_until:
                self._launch(self._next_profile, self._next_reason)  # BACKOFF -> STARTING
            return
        attempt = self.attempt
        if attempt is None or self.state not in LIVE:
            return
        if not attempt.processes.leader_running():
            self._end(Outcome(exit_code=attempt.processes.exit_code()))  # it exited -> BACKOFF
        elif attempt.log.doomed_by is not None:
            log.warning(
                "attempt %d: cannot recover after: %s", attempt.number, attempt.log.doomed_by
            )
            self._end(Outcome())  # a fatal line, whatever it does next -> BACKOFF
        elif (lost := watch.lost_member(attempt, now)) is not None:
            self._end(Outcome(lost_process=lost))  # a scheduler died under it -> BACKOFF
        elif self.state is ServerState.STARTING:
            if watch.member_scan_due(attempt, now):
                attempt.scanned_at = now
                self._watch_members(attempt)
            if (evidence := watch.startup_hang(attempt, now, self.config.policy)) is not None:
                self._hung(Outcome(stalled=True, stall_evidence=evidence))  # STARTING -> BACKOFF
            elif attempt.log.progress.ready or self._worker_ready(attempt, now):
                self._watch_health(attempt, now)  # STARTING -> READY
        else:
            self._watch_health(attempt, now)  # READY <-> UNHEALTHY, or hung -> BACKOFF

    # --- launching ------------------------------------------------------------------------
    def _launch(self, index: int, reason: str) -> None:
        """Launch profile ``index``: STOPPED, BACKOFF or GAVE_UP -> STARTING, or, when it
        cannot start, concluded as a failure like any other."""
        number = launch.next_attempt_id(self.history, self._last_id, self.config.paths.log_dir)
        self._last_id = number
        self._preflight(number, index)
        spec = launch.launch_spec(self.ladder, number, index, self._planned, self._planned_at)
        refused = launch.refusal(spec, self.config.sglang, self.config.paths.state_dir)
        if refused is not None:
            self._not_launched(spec, NotLaunched(refused, self._clock()))
            return
        self.probes.target(
            server_url(spec.args), sglang_metrics=spec.args.get("enable-metrics") is True
        )
        started = launch.start(spec, self._clock)
        if isinstance(started, NotLaunched):
            self._not_launched(spec, started)
            return
        # The loop wakes the moment the launcher exits: a crash is decided in milliseconds,
        # not at the next tick.
        self._exits.watch(started.leader)
        attempt = launch.attempt(spec, started, self.config.sglang.version, self._clock)
        self._record(spec.start_record(started.at, [started.leader], reason))
        with self._lock:
            self.attempt = attempt
            self.counters = self.counters.launched()
            self._set_state(ServerState.STARTING)
        label = self.ladder.label(index)
        log.info(
            "attempt %d: launched profile '%s' (%s), log %s", number, label, reason, spec.log_path
        )
        self._follow(attempt)

    def _preflight(self, number: int, index: int) -> None:
        """Plan the launch; a change the pre-flight made is a patch later remedies build on."""
        self._planned = self._planned_at = None
        planned_at = self._clock()
        result = launch.preflight(self.config, self.ladder.args(index), self.history)
        if result is None:
            return
        with self._lock:
            if result.applied and result.change is not None:
                self.ladder = self.ladder.patched(index, result.change)
                self.counters = self.counters.remedied(result.verdict)
            self._planned, self._planned_at = result, planned_at
        launch.log_preflight(number, result)

    def _not_launched(self, spec: LaunchSpec, refused: NotLaunched) -> None:
        """Recorded all the same, so that the policy moves on and the history says why."""
        log.error("attempt %d: could not start SGLang: %s", spec.number, refused.error)
        self._record(spec.start_record(refused.at, [], "not launched"))
        with self._lock:
            self.counters = self.counters.launched()
        ended = conclude.Ended(spec.number, spec.profile_index, refused.at)
        self._conclude(ended, conclude.not_launched(refused.error), Outcome(), stopped_by=None)

    def _follow(self, attempt: Attempt, catch_up: bool = False) -> None:
        def on_lines(lines: list[str]) -> None:
            with self._lock:
                fed = attempt.log.feed(lines)
                self.counters = self.counters.read(fed.matched, fed.unknown)
            if fed.turned:  # ready or doomed: the loop acts on it now, not at its next tick
                self._exits.wake()

        attempt.tailer = LogTailer(attempt.log_path, on_lines, poll_interval=TAIL_POLL_S)
        attempt.tailer.start(catch_up=catch_up)

    # --- watching ---------------------------------------------------------------------------
    def _watch_health(self, attempt: Attempt, now: float) -> None:
        """Act on a new probe snapshot: ready, unhealthy, recovered, or hung."""
        probes = self.probes.snapshot()
        verdict = watch.health(self.state, attempt, probes, now)
        if verdict.ask_again:
            self.probes.request()
        if not verdict.fresh:
            return
        attempt.probe_seen = probes.taken_at
        first = verdict.target is ServerState.READY and self.state is ServerState.STARTING
        with self._lock:
            if first:
                self._served(attempt, now)
            if verdict.target is not None:
                self._set_state(verdict.target)  # STARTING/UNHEALTHY -> READY, READY -> UNHEALTHY
        if first:
            log.info("attempt %d: serving after %.1f s", attempt.number, now - attempt.started_at)
            self._record(ready_record(attempt.number, now, now - attempt.started_at))
        planned = self._planned.planned_tokens if self._planned else None
        checked = watch.cross_check(attempt, probes.max_total_num_tokens, planned)
        attempt.tokens_checked, attempt.prediction_checked = checked.tokens, checked.prediction
        evidence = watch.hang_evidence(attempt, probes, now, self.config.policy.hang_timeout_s)
        if evidence is not None:
            log.warning("attempt %d: hung: %s", attempt.number, evidence)
            self._hung(Outcome(stalled=True, stall_evidence=evidence))  # READY/UNHEALTHY -> BACKOFF

    def _worker_ready(self, attempt: Attempt, now: float) -> bool:
        if not watch.is_worker_ready(attempt, self.ladder.args(attempt.profile_index)):
            return False
        with self._lock:
            if attempt.log.ready_at is None:
                attempt.log.ready_at = now
        return True

    def _watch_members(self, attempt: Attempt) -> None:
        for member, title in watch.new_members(attempt).items():
            attempt.titled[member] = title
            self._exits.watch(member)

    def _noticed(self, gone: list[ProcessIdentity]) -> None:
        lost = watch.gone_member(self.attempt, gone, self._clock())
        if lost is not None and self.attempt is not None:
            self.attempt.member_lost = lost

    def _hung(self, outcome: Outcome) -> None:
        with self._lock:
            self.counters = self.counters.hung()
        self._end(outcome)

    # --- ending -----------------------------------------------------------------------------
    def _end(self, outcome: Outcome, stopped_by: str | None = None) -> None:
        """The attempt ended (or is being ended): clean up, classify, record, decide."""
        attempt = self.attempt
        assert attempt is not None
        grace = self.config.policy.stop_grace_s
        conclude.stop(attempt, 0.0 if self._stop_now else grace)
        self._exits.forget_all()
        self.probes.target(None)
        conclude.wait_gpus_released(self.gpus, attempt, grace)
        outcome = conclude.completed(outcome, attempt)
        result, events = conclude.STOPPED_BY_DAEMON, []
        if stopped_by != "daemon":
            with self._lock:  # the tailer has stopped: the excerpt holds the whole log's say
                attempt.log.close()
                excerpt = attempt.log.excerpt.read()
            result, events = conclude.classified(excerpt, outcome, self.config.sglang.version)
        self._conclude(conclude.Ended.of(attempt), result, outcome, stopped_by, events)

    def _conclude(
        self,
        ended: conclude.Ended,
        result: Classification,
        outcome: Outcome,
        stopped_by: str | None,
        events: Sequence[Event] = (),
    ) -> None:
        now = self._clock()
        args = (self.ladder, self.history, ended, result, outcome, stopped_by, now, events)
        done = conclude.conclude(*args)
        self._record(done.end_record)
        with self._lock:
            if done.report is not None:
                self.counters = self.counters.failed(done.failure_class.value, now)
                self.last_failure = done.report
            if done.decision is not None:
                self._apply(done.decision, done.failure_class, now)
        if done.decision is not None and done.report is not None:
            log.warning(
                "attempt %d: %s %s", ended.number, done.report.diagnosis, done.decision.reason
            )

    def _apply(self, decision: Decision, failure_class: FailureClass, now: float) -> None:
        """Go to backoff toward the decided launch, or give up. Called under the lock."""
        self.last_decision = decision
        if decision.remedy is not None and decision.profile_index is not None:
            self.ladder = self.ladder.patched(decision.profile_index, decision.remedy)
            self.counters = self.counters.remedied(failure_class.value)
        if decision.relaunch:
            self.counters = self.counters.restarted(failure_class.value)
            self._next_profile = decision.profile_index or 0
            self._next_reason = decision.reason
            self._backoff_until = now + decision.delay_s
            self._set_state(ServerState.BACKOFF)  # STARTING/READY/UNHEALTHY/STOPPED -> BACKOFF
        else:
            self.gave_up_reason = decision.reason
            self._set_state(ServerState.GAVE_UP)  # any -> GAVE_UP: needs a human or a reload
            code = conclude.give_up(self.config, decision, self.last_failure)
            if code is not None:
                self.exit_code, self._stop_requested = code, True

    # --- daemon life ------------------------------------------------------------------------
    def _resume(self) -> None:
        """Stop launches nobody recorded, then carry out the plan the history makes."""
        read = self.history.read()
        for warning in read.warnings:
            log.warning("history: %s", warning)
        for found in resume.untracked(read.attempts, self.config.paths.state_dir):
            self._last_id = max(self._last_id, found.attempt)
            log.warning(
                "stopping an unrecorded launch (%s, pid %d)", found.marker, found.leader.pid
            )
            AttemptProcesses(found.leader).stop(self.config.policy.stop_grace_s)
        plan = resume.resume_plan(read.attempts, self.ladder, self._clock())
        if isinstance(plan, resume.RecordLost):
            self._record(resume.lost_end(plan.record, self.ladder, self._clock()))
            attempts = self.history.read().attempts
            plan = resume.resume_plan(attempts, self.ladder, self._clock(), lost_recorded=True)
        if not isinstance(plan, resume.RecordLost) and plan.patch is not None:
            self.ladder = self.ladder.with_patch(*plan.patch)
        if isinstance(plan, resume.Adopt):
            self._adopt(plan.record, plan.leader)  # STOPPED -> READY or STARTING
        elif isinstance(plan, resume.Launch):
            self._launch(plan.index, "first launch")  # STOPPED -> STARTING
        elif isinstance(plan, resume.Continue):
            with self._lock:
                self.last_failure = plan.report
                self._apply(
                    plan.decision, plan.failure_class, self._clock()
                )  # STOPPED -> BACKOFF/GAVE_UP

    def _adopt(self, record: AttemptRecord, leader: ProcessIdentity) -> None:
        attempt = resume.adopted(record, leader, self.ladder, self._clock)
        self._last_id = max(self._last_id, record.attempt)
        # Its log so far, read once from the start before the probe (pool metrics, the
        # excerpt its classification will need), then followed from there: no line lost.
        self._follow(attempt, catch_up=True)
        # Had it said it was ready before this daemon came? A ready line that arrives while
        # the probe below runs is a server becoming ready, not one gone bad.
        was_ready = attempt.log.progress.ready
        self.probes.target(server_url(self.ladder.args(attempt.profile_index)))
        health = self.probes.collect().results.get("health")
        healthy = health is not None and health.ok
        with self._lock:
            self.attempt = attempt
            self.counters = self.counters.launched()
            self._set_state(ServerState.READY if healthy else ServerState.STARTING)
        if not healthy and was_ready:
            log.warning("attempt %d: adopted server is not healthy; replacing it", record.attempt)
            self._end(Outcome(), stopped_by="daemon")
            with self._lock:
                self._set_state(ServerState.BACKOFF)  # STARTING -> BACKOFF
            self._launch(attempt.profile_index, "adopted server was unhealthy")
            return
        log.info("attempt %d: adopted the running server (pid %d)", record.attempt, leader.pid)
        self._exits.watch(leader)
        self._watch_members(attempt)
        if healthy and attempt.ready_at is None:
            # It became ready while no daemon watched: record it, or healthy_reset_s and
            # served_s would count from this adoption.
            now = self._clock()
            with self._lock:
                self._served(attempt, now)
            self._record(ready_record(attempt.number, now, now - attempt.started_at))

    def _served(self, attempt: Attempt, now: float) -> None:
        """The attempt serves from ``now`` on. Called under the lock."""
        attempt.ready_at = now
        self.counters = self.counters.served(now - attempt.started_at)

    def _reload(self) -> None:
        self._reload_requested = False
        source = self.config.source
        try:
            config = load_config(source) if source else self.config
        except ConfigError as error:
            log.error("reload: keeping the running config: %s", error)
            return
        old, attempt = self.config, self.attempt
        index = previous = 0
        with self._lock:  # a scrape must never see the new ladder with an old index
            self.ladder = self.ladder.reloaded(config)
            if attempt is not None:
                index = self.ladder.clamp(attempt.profile_index)
                previous, attempt.profile_index = attempt.profile_index, index
        log.info("reload: config re-read from %s", source)
        if self.state is ServerState.GAVE_UP:
            self.gave_up_reason = None
            self._launch(0, "config reloaded after giving up")  # GAVE_UP -> STARTING
        elif self.state in LIVE and config.command(index) != old.command(previous):
            self._restart(index, "config_reload")

    def _restart(self, index: int, reason: str) -> None:
        with self._lock:
            self._set_state(ServerState.STOPPING)  # STARTING/READY/UNHEALTHY -> STOPPING
            self.counters = self.counters.restarted(reason)
        self._end(Outcome(), stopped_by="daemon")
        with self._lock:
            self._set_state(ServerState.BACKOFF)  # STOPPING -> BACKOFF
        self._launch(index, reason.replace("_", " "))  # BACKOFF -> STARTING

    def _shutdown(self) -> None:
        attempt = self.attempt
        if attempt is not None and self.state in LIVE:
            with self._lock:
                self._set_state(ServerState.STOPPING)  # STARTING/READY/UNHEALTHY -> STOPPING
            log.info("stopping attempt %d", attempt.number)
            self._end(Outcome(), stopped_by="daemon")
        with self._lock:
            self._set_state(ServerState.STOPPED)  # STOPPING, BACKOFF or GAVE_UP -> STOPPED

    # --- helpers ------------------------------------------------------------------------------
    def _set_state(self, target: ServerState) -> None:
        check_transition(self.state, target)
        self.state = target
        self._notifier.status(self._status_text())

    def _status_text(self) -> str:
        """systemd's STATUS= line, with why it waits in backoff or gave up."""
        why = None
        if self.state is ServerState.BACKOFF and self.last_decision is not None:
            why = self.last_decision.reason
        elif self.state is ServerState.GAVE_UP:
            why = self.gave_up_reason
        failures = self.counters.failures_total
        return views.status_text(self.state, self.attempt, self.ladder, failures, why)

    def _record(self, record: Record) -> None:
        try:
            self.history.append(record)
        except HistoryWriteError as error:
            # Keep supervising: the server matters more than our notes about it.
            log.error("history: %s", error)


__all__ = ["Daemon"]
