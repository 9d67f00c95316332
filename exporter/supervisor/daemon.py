"""The daemon's main loop: the only writer of the server's state, the attempt, the ladder's
changes and the counters. It applies what its steps return (supervisor/launch.py, watch.py,
conclude.py, resume.py, reload.py). One thread owns the state machine and the attempt; the
tailer folds log lines into them under the lock, under which scrapes read; the sources and
the reaper read the attempt through host.py; signals only set flags and wake the loop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from exporter.attempt.counters import Counters
from exporter.attempt.snapshot import Snapshot
from exporter.attempt.states import LIVE, ServerState, check_transition
from exporter.config import Config
from exporter.diagnosis.classify import Classification, Outcome
from exporter.diagnosis.taxonomy import FailureClass
from exporter.endpoints import DaemonStatus, Heartbeat
from exporter.history import AttemptRecord, History, HistoryWriteError, Record, ready_record
from exporter.identity import ProcessIdentity
from exporter.logs.events import Event
from exporter.logs.tailer import LogTailer
from exporter.notify import Notifier
from exporter.supervisor import conclude, launch, reload, resume, views, watch
from exporter.supervisor.attempt import Attempt
from exporter.supervisor.exits import ExitWatch
from exporter.supervisor.host import DaemonHost
from exporter.supervisor.ladder import Ladder
from exporter.supervisor.launch import LaunchSpec, NotLaunched
from exporter.supervisor.policy import Decision
from exporter.supervisor.preflight import Preflight
from exporter.supervisor.reaper import Reaper
from exporter.telemetry.registry import Sources
from exporter.termination import ExitCode, FailureReport

log = logging.getLogger("sglang_sentinel")

TAIL_POLL_S = 2.0  # inotify wakes the tailer; this poll is only its safety net


class Daemon:
    def __init__(
        self,
        config: Config,
        sources: Callable[[DaemonHost], Sources],
        clock: Callable[[], float] = time.time,
        notifier: Notifier | None = None,
    ) -> None:
        """``sources`` builds the daemon's telemetry, each source wired to its host."""
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
        self._backoff_until: float | None = None  # then launch as last_decision says
        self._last_id = 0
        self._planned: Preflight | None = None  # the pre-flight of the next or current launch
        self._planned_at: float | None = None
        # What the sources and the reaper read of the daemon, from their own threads.
        self.host = DaemonHost(lambda: self.attempt, lambda: self.config, clock, self._exits.wake)
        self.sources = sources(self.host)  # every registered source (telemetry/registry.py)
        self.probes = self.sources.probes  # by type: readiness and hangs
        self.gpus = self.sources.gpus  # by type: their release before a relaunch
        self.gave_up_reason: str | None = None
        self.last_decision: Decision | None = None
        # PID 1 or a subreaper inherits SGLang's orphans: reaped on SIGCHLD (signals.py).
        self.reaper = Reaper(sessions=self.host.attempt_sessions)
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

    def snapshot(self) -> Snapshot:
        with self._lock:
            values = (self.state, self.attempt, self.counters, self.ladder, self._planned)
            reaped, sources = dict(self.reaper.counts), self.sources.snapshots()
            return views.snapshot(*values, reaped=reaped, sources=sources)

    def status(self) -> DaemonStatus:
        """What /healthz, /readyz and /status answer from."""
        with self._lock:
            decision, failure, age_s = self.last_decision, self.last_failure, self.heartbeat.age_s()
            return views.status(self.state, self.attempt, self.ladder, decision, failure, age_s)

    # --- the loop ----------------------------------------------------------------------
    def run(self) -> int:
        """Supervise until asked to stop; returns the process exit status."""
        self.sources.start()
        try:
            self._resume()
            self._notifier.ready(self._status_text())
            while not self._stop_requested:
                wait_s = watch.until_next_tick(
                    self.state, self._backoff_until, self.attempt, self._clock()
                )
                self._noticed(self._exits.wait(wait_s))
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

    def tick(self) -> None:
        """One pass of the loop: launch after backoff, notice an end, a stall, readiness.
        An attempt that ends goes on to BACKOFF or GAVE_UP as the policy decides (_apply)."""
        # Only the main loop pings systemd's watchdog: if it stalls, the pings stop.
        self._notifier.watchdog()
        self.heartbeat.beat()
        now = self._clock()
        if self.state is ServerState.BACKOFF and self._backoff_until is not None:
            if now >= self._backoff_until:
                decided = self.last_decision
                assert decided is not None  # set with _backoff_until (_apply)
                self._launch(decided.profile_index or 0, decided.reason)  # BACKOFF -> STARTING
            return
        attempt = self.attempt
        if attempt is None or self.state not in LIVE:
            return
        if (outcome := watch.ended(attempt, now)) is not None:
            self._end(outcome)  # exited, doomed by a fatal line, lost a scheduler -> BACKOFF
        elif self.state is ServerState.STARTING:
            if watch.member_scan_due(attempt, now):
                attempt.scanned_at = now
                self._watch_members(attempt)
            if (evidence := watch.startup_hang(attempt, now, self.config.policy)) is not None:
                self._end(Outcome(stalled=True, stall_evidence=evidence))  # STARTING -> BACKOFF
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
        started = launch.begin(spec, self.config, self.probes, self._clock)
        if isinstance(started, NotLaunched):
            self._not_launched(spec, started)
            return
        # Its exit wakes the loop: a crash is decided in milliseconds, not at the next tick.
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
        if verdict.target is ServerState.READY and self.state is ServerState.STARTING:
            log.info("attempt %d: serving after %.1f s", attempt.number, now - attempt.started_at)
            self._served(attempt, now, ServerState.READY)  # STARTING -> READY
        elif verdict.target is not None:
            with self._lock:
                self._set_state(verdict.target)  # UNHEALTHY -> READY, READY -> UNHEALTHY
        planned = self._planned.planned_tokens if self._planned else None
        checked = watch.cross_check(attempt, probes.max_total_num_tokens, planned)
        attempt.tokens_checked, attempt.prediction_checked = checked.tokens, checked.prediction
        evidence = watch.hang_evidence(attempt, probes, now, self.config.policy.hang_timeout_s)
        if evidence is not None:
            log.warning("attempt %d: hung: %s", attempt.number, evidence)
            self._end(Outcome(stalled=True, stall_evidence=evidence))  # READY/UNHEALTHY -> BACKOFF

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

    # --- ending -----------------------------------------------------------------------------
    def _end(self, outcome: Outcome, stopped_by: str | None = None) -> None:
        """The attempt ended (or is being ended): clean up, classify, record, decide."""
        attempt = self.attempt
        assert attempt is not None
        if outcome.stalled:  # a hang, at startup or while serving
            with self._lock:
                self.counters = self.counters.hung()
        self._exits.forget_all()  # what it leaves is stopped below, not waited for
        grace = self.config.policy.stop_grace_s
        stop_s = 0.0 if self._stop_now else grace
        outcome = conclude.wind_down(attempt, outcome, self.probes, self.gpus, stop_s, grace)
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
        step = conclude.applied(decision, failure_class.value, self.ladder, self.counters, now)
        self.last_decision, self.ladder, self.counters = decision, step.ladder, step.counters
        self._backoff_until, self.gave_up_reason = step.backoff_until, step.gave_up_reason
        # STARTING/READY/UNHEALTHY/STOPPED -> BACKOFF, or any -> GAVE_UP (a human or a reload)
        self._set_state(step.state)
        if step.state is ServerState.GAVE_UP:
            code = conclude.give_up(self.config, decision, self.last_failure)
            if code is not None:
                self.exit_code, self._stop_requested = code, True

    # --- daemon life ------------------------------------------------------------------------
    def _resume(self) -> None:
        """Stop launches nobody recorded, then carry out the plan the history makes."""
        plan, stopped = resume.resumed(self.history, self.ladder, self._clock, self._record)
        self._last_id = max(self._last_id, stopped)
        if plan.patch is not None:
            self.ladder = self.ladder.with_patch(*plan.patch)
        if isinstance(plan, resume.Adopt):
            self._adopt(plan.record, plan.leader)  # STOPPED -> READY or STARTING
        elif isinstance(plan, resume.Launch):
            self._launch(plan.index, "first launch")  # STOPPED -> STARTING
        elif isinstance(plan, resume.Continue):
            with self._lock:  # STOPPED -> BACKOFF/GAVE_UP
                self.last_failure = plan.report
                self._apply(plan.decision, plan.failure_class, self._clock())

    def _adopt(self, record: AttemptRecord, leader: ProcessIdentity) -> None:
        attempt = resume.adopted(record, leader, self.ladder, self._clock)
        self._last_id = max(self._last_id, record.attempt)
        # Its log so far, read once from the start before the probe (pool metrics, the
        # excerpt its classification will need), then followed from there: no line lost.
        self._follow(attempt, catch_up=True)
        # Had it said it was ready before this daemon came? A ready line that arrives while
        # the probe below runs is a server becoming ready, not one gone bad.
        was_ready = attempt.log.progress.ready
        healthy = resume.adopted_healthy(self.probes, self.ladder.args(attempt.profile_index))
        with self._lock:
            self.attempt = attempt
            self.counters = self.counters.launched()
            self._set_state(ServerState.READY if healthy else ServerState.STARTING)
        if not healthy and was_ready:
            log.warning("attempt %d: adopted server is not healthy; replacing it", record.attempt)
            self._replace(attempt.profile_index, "adopted server was unhealthy")
            return
        log.info("attempt %d: adopted the running server (pid %d)", record.attempt, leader.pid)
        self._exits.watch(leader)
        self._watch_members(attempt)
        if healthy and attempt.ready_at is None:
            # It became ready while no daemon watched: record it, or healthy_reset_s and
            # served_s would count from this adoption.
            self._served(attempt, self._clock())

    def _served(self, attempt: Attempt, now: float, state: ServerState | None = None) -> None:
        """The attempt serves from ``now`` on: counted (with ``state`` entered in the same
        step, so that no scrape sees one without the other), then recorded in the history."""
        with self._lock:
            attempt.ready_at = now
            self.counters = self.counters.served(now - attempt.started_at)
            if state is not None:
                self._set_state(state)
        self._record(ready_record(attempt.number, now, now - attempt.started_at))

    def _reload(self) -> None:
        self._reload_requested = False
        config = reload.read(self.config)
        if config is None:
            return
        old, attempt = self.config, self.attempt
        running = attempt.profile_index if attempt else None
        with self._lock:  # a scrape must never see the new ladder with an old index
            self.ladder = self.ladder.reloaded(config)
            step = reload.decide(self.state, old, self.ladder, running)
            if attempt is not None:
                attempt.profile_index = step.index
        if step.action is reload.Action.RELAUNCH:
            self.gave_up_reason = None
            self._launch(0, "config reloaded after giving up")  # GAVE_UP -> STARTING
        elif step.action is reload.Action.RESTART:
            with self._lock:
                self._set_state(ServerState.STOPPING)  # STARTING/READY/UNHEALTHY -> STOPPING
                self.counters = self.counters.restarted("config_reload")
            self._replace(step.index, "config reload")

    def _replace(self, index: int, reason: str) -> None:
        """Stop the attempt (no failure) and launch profile ``index`` in its place."""
        self._end(Outcome(), stopped_by="daemon")
        with self._lock:
            self._set_state(ServerState.BACKOFF)  # STOPPING or STARTING (adopted) -> BACKOFF
        self._launch(index, reason)  # BACKOFF -> STARTING

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
        why = (self.last_decision, self.gave_up_reason)
        return views.status_text(self.state, self.attempt, self.ladder, self.counters, *why)

    def _record(self, record: Record) -> None:
        try:
            self.history.append(record)
        except HistoryWriteError as error:
            # Keep supervising: the server matters more than our notes about it.
            log.error("history: %s", error)


__all__ = ["Daemon"]
