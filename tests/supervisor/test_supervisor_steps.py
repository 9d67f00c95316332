"""The daemon's steps as values, without a Daemon: the counters' folds, the ladder's
patches, a launch's spec, the watch's verdicts, an attempt's conclusion, the resume plan a
history makes, what a reload decides and what the host answers the sources. The daemon
applies these (tests/supervisor/test_daemon.py runs it whole)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

from exporter.attempt.attempt_log import AttemptLog
from exporter.attempt.counters import Counters
from exporter.attempt.states import ServerState
from exporter.config import load_config, parse_config
from exporter.diagnosis.classify import Classification, Confidence, Outcome
from exporter.diagnosis.taxonomy import FailureClass
from exporter.history import History, end_record, start_record
from exporter.identity import ProcessIdentity, identify
from exporter.redact import MASK, mask_classification
from exporter.supervisor import conclude, launch, reload, resume, views, watch
from exporter.supervisor.attempt import Attempt
from exporter.supervisor.conclude import Ended
from exporter.supervisor.host import DaemonHost
from exporter.supervisor.ladder import Ladder
from exporter.supervisor.policy import Decision
from exporter.supervisor.processes import AttemptProcesses
from exporter.supervisor.remedies import Remedy
from exporter.telemetry.probes import ProbeResult, ProbeSnapshot

T0 = 1_767_261_600.0
SECRET = "sk-very-secret"
HALF = Remedy({"mem-fraction-static": 0.5}, (), "more static memory")


def ladder_of(tmp_path: Path, policy: str = "", args: str = "") -> Ladder:
    text = (
        '[sglang]\npython = "python3"\n[sglang.args]\nport = 30000\n'
        f'api-key = "{SECRET}"\n{args}\n'
        '[[profiles]]\nname = "as-configured"\n'
        '[[profiles]]\nname = "more"\nset = { mem-fraction-static = 0.5 }\n'
        f'[policy]\nbackoff_base_s = 2.0\nmax_attempts = 2\npreflight = "off"\n{policy}\n'
        f'[paths]\nstate_dir = "{tmp_path}/state"\nlog_dir = "{tmp_path}/logs"\n'
    )
    return Ladder(parse_config(text))


def started(history: History, number: int, index: int = 0, processes=(), patch=None) -> None:
    history.append(
        start_record(
            number,
            T0 + number,
            profile="as-configured",
            profile_index=index,
            command=["python3"],
            log=f"/nowhere/attempt-{number:06d}.log",
            processes=[p.to_json() for p in processes],
            reason="first launch",
            patch=patch,
        )
    )


def ended(history: History, number: int, failure_class: str, stopped_by=None) -> None:
    history.append(
        end_record(
            number,
            T0 + number + 0.5,
            exit_code=1,
            phase="startup",
            phase_reached=None,
            failure_class=failure_class,
            confidence="high",
            root_cause_line="RuntimeError: boom",
            diagnosis="it broke",
            decision=None,
            stopped_by=stopped_by,
            served_s=None,
        )
    )


def live_attempt(tmp_path: Path, **fields) -> Attempt:
    me = identify(os.getpid())
    assert me is not None
    return Attempt(
        number=7,
        profile_index=0,
        command=["python3"],
        log_path=tmp_path / "attempt-000007.log",
        started_at=T0,
        processes=AttemptProcesses(me),
        log=AttemptLog(None, lambda: T0),
        **fields,
    )


# --- counters and ladder -------------------------------------------------------------------


def test_counters_fold_into_new_values_and_leave_the_old_ones_alone():
    before = Counters()
    after = before.launched().failed("pool_init_oom", T0).restarted("pool_init_oom").read(3, 0)
    assert before == Counters()
    assert after.attempts_total == 1 and after.failures_total == 1
    assert dict(after.last_failure_time) == {"pool_init_oom": T0}
    assert dict(after.log_lines) == {True: 3, False: 0}  # both keys, as soon as lines come
    assert after.hung().remedied("fits").hangs == 1
    assert dict(after.remedied("x").remedied("x").remedies) == {"x": 2}


def test_a_ladder_patch_builds_on_the_earlier_one_and_labels_the_profile(tmp_path):
    ladder = ladder_of(tmp_path)
    patched = ladder.patched(1, HALF).patched(1, Remedy({"chunked-prefill-size": 1024}, (), "x"))
    assert ladder.patches == {} and ladder.label(1) == "more"
    assert patched.label(1) == "more+auto" and patched.label(0) == "as-configured"
    assert patched.args(1)["chunked-prefill-size"] == 1024
    assert patched.patch_record(1)["set"] == {
        "mem-fraction-static": 0.5,
        "chunked-prefill-size": 1024,
    }
    assert patched.patch_record(0) is None and patched.clamp(9) == 1


def test_mask_classification_masks_every_line_a_secret_can_ride_in():
    result = Classification(
        FailureClass.OTHER, f"key={SECRET}", None, None, [f"a {SECRET}", "b"], f"d {SECRET}"
    )
    masked = mask_classification(result, {SECRET})
    assert (masked.root_cause_line, masked.diagnosis) == (f"key={MASK}", f"d {MASK}")
    assert masked.evidence == [f"a {MASK}", "b"]
    assert mask_classification(result, set()) is result


# --- launch ---------------------------------------------------------------------------------


def test_a_launch_spec_carries_the_marker_the_patch_and_a_redacted_start_record(tmp_path):
    ladder = ladder_of(tmp_path).patched(1, HALF)
    spec = launch.launch_spec(ladder, 4, 1, None, None)
    assert spec.env[launch.ATTEMPT_MARKER] == f"{tmp_path}/state:4"
    assert spec.log_path == tmp_path / "logs" / "attempt-000004.log"
    assert spec.args["mem-fraction-static"] == 0.5 and SECRET in spec.command
    me = identify(os.getpid())
    record = spec.start_record(T0, [me], "why")
    assert SECRET not in str(record) and record["patch"] == ladder.patch_record(1)
    assert record["processes"] == [me.to_json()] and "preflight" not in record


def test_attempt_ids_pass_every_id_the_history_or_the_log_files_used(tmp_path):
    history = History(tmp_path / "state")
    started(history, 3)
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "attempt-000009.log").touch()
    assert launch.next_attempt_id(history, 0, tmp_path / "logs") == 10
    assert launch.next_attempt_id(history, 12, tmp_path / "logs") == 13


def test_a_launch_whose_log_directory_cannot_exist_is_refused_before_it_runs(tmp_path):
    (tmp_path / "logs").write_text("a file, not a directory")
    ladder = ladder_of(tmp_path)
    spec = launch.launch_spec(ladder, 1, 0, None, None)
    assert launch.refusal(spec, ladder.config.sglang, tmp_path / "state")
    targets = []
    probes = SimpleNamespace(target=lambda *args, **flags: targets.append(args))
    refused = launch.begin(spec, ladder.config, probes, lambda: T0)
    assert isinstance(refused, launch.NotLaunched) and refused.at == T0
    assert targets == []  # a launch that never ran is never probed


# --- watch ----------------------------------------------------------------------------------


def probes(taken_at: float, ok: bool, **fields) -> ProbeSnapshot:
    health = ProbeResult(ok, 200 if ok else 503, 0.01)
    return ProbeSnapshot(taken_at=taken_at, results={"health": health}, **fields)


def test_health_verdicts_turn_ready_unhealthy_and_ignore_a_snapshot_already_seen(tmp_path):
    attempt = live_attempt(tmp_path)
    attempt.log.ready_at = T0 + 5
    early = watch.health(ServerState.STARTING, attempt, probes(T0 + 4, True), T0 + 6)
    assert (early.fresh, early.ask_again) == (False, True)  # older than the ready line
    ready = watch.health(ServerState.STARTING, attempt, probes(T0 + 6, True), T0 + 6)
    assert (ready.fresh, ready.target) == (True, ServerState.READY)
    warming = watch.health(ServerState.STARTING, attempt, probes(T0 + 6, False), T0 + 6)
    assert (warming.ask_again, warming.target) == (True, None)
    failing = watch.health(ServerState.READY, attempt, probes(T0 + 7, False), T0 + 7)
    assert failing.target is ServerState.UNHEALTHY
    attempt.probe_seen = T0 + 7
    assert not watch.health(ServerState.READY, attempt, probes(T0 + 7, True), T0 + 8).fresh


def test_hang_evidence_needs_the_timeout_of_failing_probes_or_of_silence(tmp_path):
    attempt = live_attempt(tmp_path)
    failing = probes(T0 + 400, False, health_failing_since=T0 + 50)
    assert watch.hang_evidence(attempt, failing, T0 + 400, 300) == (
        "health probes failing for 350 s (last: HTTP 503)"
    )
    assert watch.hang_evidence(attempt, failing, T0 + 300, 300) is None
    waiting = probes(T0 + 400, True, waiting_requests=2)
    assert "2 request(s) waiting" in watch.hang_evidence(attempt, waiting, T0 + 400, 300)
    assert watch.hang_evidence(attempt, probes(T0 + 400, True), T0 + 400, 300) is None


def test_a_gone_member_is_lost_only_once_its_grace_is_over(tmp_path):
    attempt = live_attempt(tmp_path)
    member = ProcessIdentity(999_999, 1)
    attempt.titled[member] = "sglang::scheduler"
    assert watch.gone_member(attempt, [ProcessIdentity(1, 1)], T0) is None
    attempt.member_lost = watch.gone_member(attempt, [member], T0)
    assert attempt.member_lost == ("sglang::scheduler (pid 999999)", T0)
    assert watch.gone_member(attempt, [member], T0 + 1) is None  # noticed once
    assert watch.lost_member(attempt, T0 + watch.LOST_MEMBER_GRACE_S - 0.1) is None
    assert watch.lost_member(attempt, T0 + watch.LOST_MEMBER_GRACE_S) == attempt.member_lost[0]
    assert not watch.member_scan_due(attempt, T0 + 10)


# --- conclude -------------------------------------------------------------------------------


def crash(line: str = "RuntimeError: boom") -> Classification:
    return Classification(FailureClass.OTHER, line, None, None, [line], "it broke")


def test_an_attempt_the_daemon_stopped_concludes_with_no_failure_and_no_decision(tmp_path):
    ladder = ladder_of(tmp_path)
    history = History(tmp_path / "state")
    done = conclude.conclude(
        ladder, history, Ended(1, 0, T0, ready_at=T0 + 10), conclude.STOPPED_BY_DAEMON,
        Outcome(exit_code=0), "daemon", T0 + 60,
    )  # fmt: skip
    assert done.failure_class is FailureClass.NONE and done.report is None
    assert done.decision is None
    assert (done.end_record["stopped_by"], done.end_record["served_s"]) == ("daemon", 50.0)


def test_an_attempt_that_exited_by_itself_failed_and_gets_the_policys_decision(tmp_path):
    ladder = ladder_of(tmp_path)
    history = History(tmp_path / "state")
    started(history, 1)
    nothing = Classification(FailureClass.NONE, None, None, None, [], "")
    done = conclude.conclude(
        ladder, history, Ended(1, 0, T0, log_path="/l"), nothing, Outcome(exit_code=1), None, T0
    )
    assert done.failure_class is FailureClass.OTHER  # a log that shows nothing is no excuse
    assert done.decision.relaunch and done.decision.delay_s == 2.0
    assert done.end_record["decision"] == done.decision.reason == done.report.decision
    assert (done.report.attempt, done.report.log, done.report.profile) == (1, "/l", "as-configured")


def test_a_secret_echoed_into_the_root_line_is_masked_in_the_record_and_report(tmp_path):
    done = conclude.conclude(
        ladder_of(tmp_path), History(tmp_path / "state"), Ended(1, 0, T0),
        crash(f"bad api_key='{SECRET}'"), Outcome(exit_code=1), None, T0,
    )  # fmt: skip
    assert SECRET not in str(done.end_record) and SECRET not in str(done.report)


def test_the_crash_loop_limit_and_a_groups_exit_are_decisions_to_stop(tmp_path):
    history = History(tmp_path / "state")
    for number in (1, 2):
        started(history, number)
        ended(history, number, "other")
    ladder = ladder_of(tmp_path)
    limit = conclude.conclude(
        ladder, history, Ended(3, 0, T0 + 3), crash(), Outcome(1), None, T0 + 4
    )
    assert not limit.decision.relaunch and "crash-loop limit" in limit.decision.reason
    group = ladder_of(tmp_path, 'group = "exit"')
    fresh = History(tmp_path / "other")
    exits = conclude.conclude(group, fresh, Ended(1, 0, T0), crash(), Outcome(1), None, T0)
    assert exits.decision.group_exit and not exits.decision.relaunch


def test_a_remedy_waits_for_a_class_read_with_high_confidence(tmp_path):
    ladder = ladder_of(tmp_path, "retry = { runtime_oom = false }")
    confident = conclude.next_launch(ladder, FailureClass.RUNTIME_OOM, 1, [], T0)
    assert confident.relaunch and confident.remedy.set == {"chunked-prefill-size": 4096}
    low = Confidence.LOW
    guessed = conclude.next_launch(ladder, FailureClass.RUNTIME_OOM, 1, [], T0, confidence=low)
    assert guessed.remedy is None and not guessed.relaunch
    assert "no automatic remedy: runtime_oom is a low-confidence reading" in guessed.reason


def test_applying_a_decision_patches_the_ladder_counts_and_backs_off_or_gives_up(tmp_path):
    ladder, counters = ladder_of(tmp_path), Counters()
    remedied = Decision(True, 1, 4.0, "fall back with a remedy", remedy=HALF)
    backoff = conclude.applied(remedied, "pool_init_oom", ladder, counters, T0)
    assert (backoff.state, backoff.backoff_until, backoff.gave_up_reason) == (
        ServerState.BACKOFF, T0 + 4.0, None,
    )  # fmt: skip
    assert backoff.ladder.args(1)["mem-fraction-static"] == 0.5
    assert backoff.counters.remedies == {"pool_init_oom": 1}
    assert backoff.counters.restarts == {"pool_init_oom": 1}
    assert counters.restarts == {} and ladder.args(1) == ladder_of(tmp_path).args(1)
    stop = conclude.applied(
        Decision(False, None, 0.0, "crash-loop limit"), "other", ladder, counters, T0
    )
    assert (stop.state, stop.backoff_until, stop.gave_up_reason) == (
        ServerState.GAVE_UP, None, "crash-loop limit",
    )  # fmt: skip
    assert stop.ladder is ladder and stop.counters.restarts == {}


# --- resume ---------------------------------------------------------------------------------


def test_an_empty_or_clean_history_resumes_with_a_launch_of_the_last_profile(tmp_path):
    ladder = ladder_of(tmp_path)
    assert resume.resume_plan([], ladder, T0) == resume.Launch(0, None)
    history = History(tmp_path / "state")
    started(history, 1, index=1, patch=ladder.patched(1, HALF).patch_record(1))
    ended(history, 1, "none", stopped_by="daemon")
    plan = resume.resume_plan(history.read().attempts, ladder, T0)
    assert plan == resume.Launch(1, (1, HALF))  # its automatic change survives


def test_a_failed_last_attempt_resumes_as_the_policy_decides(tmp_path):
    history = History(tmp_path / "state")
    started(history, 1)
    ended(history, 1, "a class of a newer daemon")
    plan = resume.resume_plan(history.read().attempts, ladder_of(tmp_path), T0 + 2)
    assert isinstance(plan, resume.Continue)
    assert plan.failure_class is FailureClass.OTHER and plan.decision.relaunch
    assert (plan.report.attempt, plan.report.root_cause_line) == (1, "RuntimeError: boom")
    assert plan.report.decision == plan.decision.reason


def test_an_unended_attempt_is_adopted_while_its_leader_lives_else_recorded_lost(tmp_path):
    ladder = ladder_of(tmp_path)
    me = identify(os.getpid())
    alive = History(tmp_path / "alive")
    started(alive, 1, processes=[me])
    plan = resume.resume_plan(alive.read().attempts, ladder, T0)
    assert plan == resume.Adopt(alive.read().attempts[0], me, None)
    gone = History(tmp_path / "gone")
    started(gone, 1, processes=[ProcessIdentity(me.pid, me.start_ticks - 1)])
    plan = resume.resume_plan(gone.read().attempts, ladder, T0)
    assert isinstance(plan, resume.RecordLost)
    record = resume.lost_end(plan.record, ladder, T0 + 9)
    assert (record["failure_class"], record["exit_code"]) == ("other", None)
    assert record["diagnosis"] == "log missing (ended while the daemon was down)"
    # A history that could not take the record still shows it unended: launch past it.
    after = resume.resume_plan(gone.read().attempts, ladder, T0, lost_recorded=True)
    assert after == resume.Launch(0, None)


def test_resuming_records_the_lost_end_then_plans_past_it(tmp_path):
    ladder = ladder_of(tmp_path)
    me = identify(os.getpid())
    history = History(tmp_path / "state")  # the ladder's state_dir
    started(history, 1, processes=[ProcessIdentity(me.pid, me.start_ticks - 1)])
    plan, stopped = resume.resumed(history, ladder, lambda: T0 + 9, history.append)
    (attempt,) = history.read().attempts
    assert (attempt.ended_at, attempt.failure_class, stopped) == (T0 + 9, "other", 0)
    assert isinstance(plan, resume.Continue) and plan.report.attempt == 1
    # A history that cannot take the record: the plan goes past the unended attempt.
    unwritable = History(tmp_path / "unwritable")
    started(unwritable, 1, processes=[ProcessIdentity(me.pid, me.start_ticks - 1)])
    plan, _ = resume.resumed(unwritable, ladder, lambda: T0 + 9, lambda record: None)
    assert plan == resume.Launch(0, None) and not unwritable.read().attempts[0].ended


def test_the_adopted_attempt_keeps_its_recorded_times_and_log(tmp_path):
    history = History(tmp_path / "state")
    started(history, 5, index=7)
    record = history.read().attempts[0]
    me = identify(os.getpid())
    attempt = resume.adopted(record, me, ladder_of(tmp_path), lambda: T0 + 100)
    assert (attempt.number, attempt.profile_index, attempt.started_at) == (5, 1, T0 + 5)
    assert attempt.log_path == Path("/nowhere/attempt-000005.log")


def test_a_process_without_this_state_dirs_marker_is_not_untracked(tmp_path):
    assert all(found.leader.pid != os.getpid() for found in resume.untracked([], tmp_path))


def test_stopping_the_untracked_launches_returns_the_highest_id_in_their_markers(tmp_path):
    marker = f"{tmp_path / 'state'}:41"
    env = {**os.environ, launch.ATTEMPT_MARKER: marker}
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    child = subprocess.Popen(sleeper, env=env, start_new_session=True)
    reaped = threading.Thread(target=child.wait)  # the daemon's reaper does this
    reaped.start()
    try:
        assert resume.stop_untracked([], tmp_path / "state", 5.0) == 41
        reaped.join(5.0)
        assert child.returncode is not None
        assert resume.stop_untracked([], tmp_path / "state", 5.0) == 0  # none left
    finally:
        child.kill()
        reaped.join()


# --- the loop's pace and an attempt's end ---------------------------------------------------


def test_the_loop_sleeps_a_tick_at_most_and_wakes_for_a_backoff_or_a_lost_members_grace(
    tmp_path,
):
    attempt = live_attempt(tmp_path)
    assert watch.until_next_tick(ServerState.STARTING, None, attempt, T0) == watch.TICK_S
    assert watch.until_next_tick(ServerState.BACKOFF, T0 + 0.25, None, T0) == 0.25
    assert watch.until_next_tick(ServerState.BACKOFF, T0 - 1, None, T0) == 0.0
    serving = watch.until_next_tick(ServerState.READY, None, attempt, T0)
    assert serving == watch.SERVING_TICK_S
    attempt.member_lost = ("sglang::scheduler (pid 1)", T0)
    grace = watch.until_next_tick(ServerState.UNHEALTHY, None, attempt, T0 + 1)
    assert grace == watch.LOST_MEMBER_GRACE_S - 1


def test_an_attempt_is_over_when_its_launcher_exits_its_log_dooms_it_or_a_member_is_lost(
    tmp_path,
):
    attempt = live_attempt(tmp_path)  # its launcher: this very process, alive
    assert watch.ended(attempt, T0) is None
    attempt.member_lost = ("sglang::scheduler (pid 1)", T0)
    assert watch.ended(attempt, T0 + 1) is None  # within its grace
    lost = watch.ended(attempt, T0 + watch.LOST_MEMBER_GRACE_S)
    assert lost == Outcome(lost_process="sglang::scheduler (pid 1)")
    attempt.log.doomed_by = "ERROR: [Errno 98] address already in use"
    assert watch.ended(attempt, T0) == Outcome()
    gone = replace(attempt, processes=AttemptProcesses(ProcessIdentity(os.getpid(), 1)))
    assert watch.ended(gone, T0) == Outcome(exit_code=None)  # not our child: no status


# --- reload ---------------------------------------------------------------------------------


def test_a_reload_relaunches_after_giving_up_and_restarts_only_a_changed_live_command(tmp_path):
    old = ladder_of(tmp_path)
    same = old.reloaded(old.config)
    changed = ladder_of(tmp_path, args="context-length = 1024")
    for state in (ServerState.STARTING, ServerState.READY, ServerState.UNHEALTHY):
        assert reload.decide(state, old.config, changed, 1) == reload.Reload(
            1, reload.Action.RESTART
        )
        assert reload.decide(state, old.config, same, 1) == reload.Reload(1, reload.Action.KEEP)
    for state in (ServerState.BACKOFF, ServerState.STOPPED):  # nothing runs to replace
        assert reload.decide(state, old.config, changed, None).action is reload.Action.KEEP
    gave_up = reload.decide(ServerState.GAVE_UP, old.config, same, None)
    assert gave_up == reload.Reload(0, reload.Action.RELAUNCH)


def test_a_reload_to_a_shorter_ladder_clamps_the_running_profile(tmp_path):
    old = ladder_of(tmp_path)
    shorter = Ladder(replace(old.config, profiles=old.config.profiles[:1]))
    # Profile 1 set mem-fraction-static, profile 0 does not: what runs now changes.
    assert reload.decide(ServerState.READY, old.config, shorter, 1) == reload.Reload(
        0, reload.Action.RESTART
    )


def test_reading_the_config_again_keeps_the_running_one_when_the_file_is_broken(tmp_path):
    path = tmp_path / "sentinel.toml"
    paths = f'[paths]\nstate_dir = "{tmp_path}/state"\nlog_dir = "{tmp_path}/logs"\n'
    path.write_text(f'[sglang]\npython = "python3"\n[[profiles]]\nname = "a"\n{paths}')
    running = load_config(path)
    path.write_text("[sglang\n")
    assert reload.read(running) is None
    path.write_text(f'[sglang]\npython = "python3"\n[[profiles]]\nname = "b"\n{paths}')
    assert [p.name for p in reload.read(running).profiles] == ["b"]
    unfiled = ladder_of(tmp_path).config  # parsed from text: nothing to read again
    assert reload.read(unfiled) is unfiled


# --- what the daemon shows and answers ------------------------------------------------------


def test_the_status_line_says_why_it_waits_only_in_backoff_or_after_giving_up(tmp_path):
    ladder = ladder_of(tmp_path)
    decision = Decision(True, 1, 2.0, "pool_init_oom: falling back")
    counters = Counters().failed("pool_init_oom", T0)
    backoff = views.status_text(ServerState.BACKOFF, None, ladder, counters, decision, None)
    assert "falling back" in backoff
    ready = views.status_text(ServerState.READY, None, ladder, counters, decision, None)
    assert "falling back" not in ready
    gave_up = views.status_text(ServerState.GAVE_UP, None, ladder, counters, decision, "limit")
    assert "limit" in gave_up and "falling back" not in gave_up


def host_of(attempt: Attempt | None, tmp_path: Path, now: float = T0) -> DaemonHost:
    config = ladder_of(tmp_path).config
    return DaemonHost(lambda: attempt, lambda: config, lambda: now, lambda: None)


def test_the_host_answers_the_sources_from_the_current_attempt(tmp_path):
    idle = host_of(None, tmp_path)
    assert idle.attempt_members() is None and idle.attempt_sessions() == set()
    assert idle.scheduler_quiet()  # nothing runs: nothing to keep quiet about
    attempt = live_attempt(tmp_path)
    leader, members = host_of(attempt, tmp_path).attempt_members()
    assert leader == attempt.processes.leader and leader in members
    assert host_of(attempt, tmp_path).attempt_sessions() == {attempt.processes.session_id}
    interval = ladder_of(tmp_path).config.policy.health_interval_s
    attempt.log.last_batch_at = T0
    assert not host_of(attempt, tmp_path, T0 + 2 * interval - 0.1).scheduler_quiet()
    assert host_of(attempt, tmp_path, T0 + 2 * interval).scheduler_quiet()


def test_the_host_reads_the_config_and_wakes_through_its_callables(tmp_path):
    configs = [ladder_of(tmp_path).config]
    woken = []
    host = DaemonHost(lambda: None, lambda: configs[-1], lambda: T0, lambda: woken.append(1))
    configs.append(ladder_of(tmp_path, policy="health_interval_s = 7.0").config)
    assert host.config is configs[-1]  # a reload is seen at once
    host.wake()
    assert woken == [1]
