"""Tests for exporter.supervisor.processes, on real process trees that mimic SGLang's.

Every process a test starts is recorded (role, pid, start time) by a helper script; the
``procs`` fixture SIGKILLs, identity checked, whatever a test left behind, then fails it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from exporter.identity import ProcessIdentity, describe, identify, this_boot
from exporter.supervisor.processes import (
    AttemptProcesses,
    SpawnError,
    port_free,
    spawn,
    wait_port_free,
)

DEADLINE_S = 10.0

# One script, many roles. Members install their SIGTERM handler before recording themselves,
# so a test that saw the record can count on the handler.
HELPER = r"""
import multiprocessing, os, signal, subprocess, sys, time


def record(records, role):
    with open("/proc/self/stat", "rb") as fh:  # the start in clock ticks since boot
        stat = fh.read()
    line = f"{role} {os.getpid()} {int(stat[stat.rfind(b')') + 2:].split()[19])}\n"
    with open(records, "a") as fh:  # one small O_APPEND write: lines never interleave
        fh.write(line)


def member(records, role, stubborn=False, leave_on=None):
    def on_term(signum, frame):
        with open(f"{os.path.dirname(records)}/signals-{os.getpid()}", "a") as fh:
            fh.write(f"{signum}\n")
        if not stubborn:
            os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    record(records, role)
    while True:
        if leave_on and os.path.exists(leave_on):
            os.setsid()
            leave_on = None
            record(records, role + ":left")
        time.sleep(0.02)


def launcher(records, scheduler_flags):
    record(records, "launcher")
    me = [sys.executable, __file__]
    subprocess.Popen([*me, "member", records, "sglang::scheduler_TP0", *scheduler_flags])
    # Spawned like SGLang's detokenizer: also brings up the resource tracker.
    multiprocessing.set_start_method("spawn")
    multiprocessing.Process(target=member, args=(records, "sglang::detokenizer")).start()
    subprocess.Popen([*me, "middle", records]).wait()
    while True:
        time.sleep(1)


if __name__ == "__main__":
    role, records, *rest = sys.argv[1:]
    if role == "launcher":
        launcher(records, scheduler_flags=rest)
    elif role == "middle":
        # Double fork: the grandchild outlives its parent, is reparented, keeps the session.
        subprocess.Popen([sys.executable, __file__, "member", records, "grandchild"])
        record(records, "middle")
        os._exit(0)
    else:
        leave_on = rest[rest.index("leave-on") + 1] if "leave-on" in rest else None
        member(records, rest[0], stubborn="stubborn" in rest, leave_on=leave_on)
"""

TREE_ROLES = {"launcher", "sglang::scheduler_TP0", "sglang::detokenizer", "middle", "grandchild"}


class Procs:
    """What one test started: the helper script, its records, the Popens it holds."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.script = root / "helper.py"
        self.script.write_text(HELPER)
        self.records = root / "records"
        self.records.touch()
        self.popens: list[subprocess.Popen] = []

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, str(self.script), *args]

    def start(self, *args: str) -> subprocess.Popen:
        """Start a helper in a session of its own (not through the code under test)."""
        popen = subprocess.Popen(self.argv(*args), start_new_session=True)
        self.popens.append(popen)
        return popen

    def launch(self, *args: str) -> subprocess.Popen:
        """Start a fake SGLang launcher the way the daemon does; ``args`` go to its scheduler."""
        popen = spawn(
            self.argv("launcher", str(self.records), *args),
            env=os.environ,
            cwd=None,
            log_path=self.root / "attempt.log",
        )
        self.popens.append(popen)
        return popen

    def identities(self) -> dict[str, ProcessIdentity]:
        found = {}
        for line in self.records.read_text().splitlines():
            role, pid, start_ticks = line.split()
            found[role] = ProcessIdentity(int(pid), int(start_ticks))
        return found

    def wait_for(self, roles: set[str]) -> dict[str, ProcessIdentity]:
        wait_until(lambda: roles <= self.identities().keys(), f"roles {sorted(roles)}")
        return self.identities()

    def signals(self, identity: ProcessIdentity) -> list[int]:
        path = self.root / f"signals-{identity.pid}"
        return [int(s) for s in path.read_text().split()] if path.exists() else []

    def live(self) -> list[ProcessIdentity]:
        return [i for i in self.identities().values() if i.alive()]

    def cleanup(self) -> list[str]:
        """SIGKILL (identity checked) all that is left; return what was."""
        left: list[str] = []
        for _ in range(3):  # a member killed while starting another: look again
            found = [(r, p) for r, i in self.identities().items() if (p := _same_process(i))]
            if not found:
                break
            for role, proc in found:
                left.append(role)
                proc.kill()
            time.sleep(0.2)
        for popen in self.popens:
            if popen.poll() is None:
                left.append(f"popen {popen.pid}")
                popen.kill()
            popen.wait()
        return left


def _same_process(ident: ProcessIdentity) -> psutil.Process | None:
    try:
        proc = psutil.Process(ident.pid)
        if ident.alive():
            return proc
    except psutil.Error:
        pass
    return None


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    started = Procs(tmp_path)
    try:
        yield started
    finally:
        left = started.cleanup()
    assert not left, f"processes left running: {left}"


def wait_until(cond: Callable[[], bool], what: str, timeout: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def start_tree(procs: Procs, *args: str) -> tuple[AttemptProcesses, dict[str, ProcessIdentity]]:
    popen = procs.launch(*args)
    leader = identify(popen.pid)
    assert leader is not None
    tree = procs.wait_for(TREE_ROLES)
    wait_until(lambda: not tree["middle"].alive(), "the middle process to exit")
    return AttemptProcesses(leader, popen), tree


# --- identity ---------------------------------------------------------------------------


def test_identity_round_trips_through_json() -> None:
    ident = identify(os.getpid())
    assert ident is not None and ident.alive()
    assert ProcessIdentity.from_json(json.loads(json.dumps(ident.to_json()))) == ident


def test_identity_with_another_start_time_is_not_alive_nor_signalled(procs: Procs) -> None:
    target = procs.start("member", str(procs.records), "stranger")
    real = procs.wait_for({"stranger"})["stranger"]
    assert real == identify(target.pid)
    # Older than the real one: as if the launcher's pid went to a stranger leading a session.
    impostor = ProcessIdentity(real.pid, real.start_ticks - 100)
    assert real.alive() and not impostor.alive()

    report = AttemptProcesses(impostor).stop(grace_s=0.2, kill_wait_s=0.2)

    assert (report.terminated, report.killed, report.survivors) == (0, 0, [])
    assert real.alive() and procs.signals(real) == []
    target.terminate()
    assert target.wait(timeout=DEADLINE_S) == 0


def test_a_stepped_clock_hides_no_process_from_stop(
    procs: Procs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Breaks: the kernel keeps a process's start as ticks since boot and the boot's
    wall-clock time apart, and moves the latter when the clock is stepped (NTP, a resumed
    VM, a starved guest catching up). A start compared in wall-clock seconds read 3 s off
    after such a step: the launcher looked gone, no signal reached it, and SGLang outlived
    its daemon (seen in a full run on a loaded machine). Must hold: the identity taken
    before the step still names the process, and stop() ends it."""
    target = procs.start("member", str(procs.records), "launcher")
    real = procs.wait_for({"launcher"})["launcher"]
    before = real.create_time
    boot = psutil.boot_time()
    # psutil's reading of the kernel's btime is where a step shows: move it, as a step would.
    monkeypatch.setattr(psutil._pslinux, "boot_time", lambda: boot + 3.0)
    assert psutil.Process(real.pid).create_time() == pytest.approx(before + 3.0)
    assert identify(real.pid) == real and real.alive()

    report = AttemptProcesses(real, target).stop(grace_s=5.0)

    assert (report.terminated, report.survivors) == (1, [])
    assert procs.signals(real) == [signal.SIGTERM] and target.returncode == 0


def test_an_identity_from_another_boot_or_an_old_record_names_no_process() -> None:
    me = identify(os.getpid())
    assert me is not None and me.boot == this_boot()
    assert not replace(me, boot="a-boot-before-the-last-reboot").alive()
    assert not ProcessIdentity.from_json({"pid": me.pid, "create_time": me.create_time}).alive()


def test_an_ended_session_adopts_no_stranger_that_reuses_its_id(
    procs: Procs, monkeypatch: pytest.MonkeyPatch
) -> None:
    short = procs.start("member", str(procs.records), "short")
    ended = procs.wait_for({"short"})["short"]
    short.kill()
    short.wait()
    attempt = AttemptProcesses(ended)
    assert attempt.refresh() == [] and attempt.refresh() == []  # seen over, twice
    target = procs.start("member", str(procs.records), "stranger", "stubborn")
    stranger = procs.wait_for({"stranger"})["stranger"]
    # As if the pid went to a stranger's session leader that left this member behind.
    real_getsid = os.getsid
    monkeypatch.setattr(
        os, "getsid", lambda pid: ended.pid if pid == target.pid else real_getsid(pid)
    )

    report = attempt.stop(grace_s=0.1, kill_wait_s=0.1)

    assert (report.terminated, report.killed) == (0, 0) and stranger not in attempt.known
    assert stranger.alive() and procs.signals(stranger) == []
    target.kill()
    target.wait()


def test_zombie_has_an_identity_but_is_not_alive(procs: Procs) -> None:
    child = procs.start("member", str(procs.records), "doomed")
    procs.wait_for({"doomed"})
    child.kill()
    wait_until(lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE, "a zombie")
    ident = identify(child.pid)  # not reaped yet: the pid is still the child's
    assert ident is not None and not ident.alive()
    child.wait()
    assert not ident.alive()


def test_identify_unknown_pid_is_none() -> None:
    assert identify(2**31 - 1) is None


# --- spawn ------------------------------------------------------------------------------

REPORT_SESSION = (
    "import os, sys; print('out', os.getpid(), os.getsid(0), os.getpgrp(), flush=True); "
    "print('err', repr(sys.stdin.read()), file=sys.stderr)"
)


def _fds_to(path: Path) -> list[str]:
    fds = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                fds.append(fd)
        except OSError:
            pass
    return fds


def test_spawn_appends_both_streams_in_a_new_session(tmp_path: Path) -> None:
    log_path = tmp_path / "attempt.log"
    log_path.write_text("earlier attempt\n")
    pids = []
    for _ in range(2):
        popen = spawn(
            [sys.executable, "-c", REPORT_SESSION], env=os.environ, cwd=None, log_path=log_path
        )
        assert _fds_to(log_path) == []  # our copy of the log fd is closed
        assert popen.wait(timeout=DEADLINE_S) == 0
        pids.append(popen.pid)

    lines = log_path.read_text().splitlines()
    assert lines[0] == "earlier attempt"
    outs = [line.split()[1:] for line in lines if line.startswith("out")]
    # pid == session id == process group id: a session and a group of its own
    assert outs == [[str(pid)] * 3 for pid in pids]
    assert [line for line in lines if line.startswith("err")] == ["err ''"] * 2  # stdin empty


def test_spawn_creates_the_log_without_group_write_or_world_access(tmp_path: Path) -> None:
    log_path = tmp_path / "new.log"
    popen = spawn([sys.executable, "-c", "pass"], env=os.environ, cwd=None, log_path=log_path)
    assert popen.wait(timeout=DEADLINE_S) == 0
    assert log_path.stat().st_mode & 0o777 & ~0o640 == 0


def test_spawn_runs_in_cwd_with_env(tmp_path: Path) -> None:
    log_path = tmp_path / "attempt.log"
    code = "import os; print(os.getcwd(), os.environ['SENTINEL_TEST'])"
    env = {**os.environ, "SENTINEL_TEST": "yes"}
    popen = spawn([sys.executable, "-c", code], env=env, cwd=str(tmp_path), log_path=log_path)
    assert popen.wait(timeout=DEADLINE_S) == 0
    assert log_path.read_text().split() == [str(tmp_path), "yes"]


def test_spawn_missing_executable_raises_spawn_error(tmp_path: Path) -> None:
    log_path = tmp_path / "attempt.log"
    with pytest.raises(SpawnError, match="/nonexistent/sglang-python") as info:
        spawn(["/nonexistent/sglang-python", "-m", "x"], env={}, cwd=None, log_path=log_path)
    assert isinstance(info.value.__cause__, OSError)
    assert _fds_to(log_path) == []


# --- AttemptProcesses -------------------------------------------------------------------


def test_refresh_finds_the_reparented_grandchild_by_session(procs: Procs) -> None:
    attempt, tree = start_tree(procs)
    grandchild = tree["grandchild"]
    assert psutil.Process(grandchild.pid).ppid() != attempt.leader.pid  # left the tree

    members = attempt.refresh()

    assert attempt.leader == tree["launcher"] and attempt.session_id == attempt.leader.pid
    assert {grandchild, tree["sglang::scheduler_TP0"], tree["sglang::detokenizer"]} <= set(members)
    assert tree["launcher"] in members and tree["middle"] not in members
    cmdlines = [describe(m)["cmdline"] for m in members]
    assert any("resource_tracker" in c for c in cmdlines)  # spawn's helper: ours too
    assert attempt.leader_running() and attempt.exit_code() is None

    report = attempt.stop(grace_s=5.0)
    assert report.survivors == [] and procs.live() == []


def test_stop_cooperative_tree_exits_on_sigterm(procs: Procs) -> None:
    attempt, tree = start_tree(procs)
    members = attempt.refresh()

    report = attempt.stop(grace_s=5.0)

    assert report.terminated == len(members) and report.killed == 0
    assert report.survivors == [] and attempt.alive() == []
    assert attempt.exit_code() == -signal.SIGTERM and not attempt.leader_running()
    assert procs.signals(tree["grandchild"]) == [signal.SIGTERM]
    assert report.duration_s < 5.0
    assert procs.live() == []


def test_stop_kills_a_member_that_ignores_sigterm_after_the_grace(procs: Procs) -> None:
    attempt, tree = start_tree(procs, "stubborn")
    members = attempt.refresh()

    report = attempt.stop(grace_s=0.5)

    # The scheduler; on a busy machine the resource tracker too, which ignores SIGTERM and
    # leaves only once EOF on its pipe reaches it.
    assert report.terminated == len(members) and report.killed >= 1
    assert report.survivors == [] and report.duration_s >= 0.5
    assert procs.signals(tree["sglang::scheduler_TP0"]) == [signal.SIGTERM]
    assert attempt.exit_code() == -signal.SIGTERM
    assert procs.live() == []


def test_stop_never_signals_a_lookalike_in_another_session(procs: Procs) -> None:
    decoy_argv = ("member", str(procs.records), "decoy", "stubborn")
    decoy_popen = procs.start(*decoy_argv, "sglang", "sglang::scheduler", "-m", "sglang.launch")
    decoy = procs.wait_for({"decoy"})["decoy"]
    attempt, _ = start_tree(procs)

    report = attempt.stop(grace_s=0.5)

    assert decoy not in attempt.known
    assert decoy.alive() and procs.signals(decoy) == []
    assert report.survivors == []
    assert [i for i in procs.live() if i != decoy] == []
    decoy_popen.kill()
    decoy_popen.wait()
    assert not decoy.alive()


def test_a_member_that_left_the_session_is_still_stopped(procs: Procs) -> None:
    flag = procs.root / "leave"
    attempt, tree = start_tree(procs, "leave-on", str(flag))
    scheduler = tree["sglang::scheduler_TP0"]
    assert scheduler in attempt.refresh()
    flag.touch()
    procs.wait_for({"sglang::scheduler_TP0:left"})
    assert os.getsid(scheduler.pid) == scheduler.pid != attempt.session_id

    report = attempt.stop(grace_s=5.0)

    assert procs.signals(scheduler) == [signal.SIGTERM]
    assert report.killed == 0 and report.survivors == [] and procs.live() == []


def test_adopted_attempt_is_refreshed_and_stopped(procs: Procs) -> None:
    # Started by "a previous daemon" that is gone: the launcher is not our child.
    detach = "import subprocess, sys; subprocess.Popen(sys.argv[1:], start_new_session=True)"
    previous = subprocess.Popen(
        [sys.executable, "-c", detach, *procs.argv("launcher", str(procs.records), "stubborn")],
        start_new_session=True,
    )
    procs.popens.append(previous)
    assert previous.wait(timeout=DEADLINE_S) == 0
    tree = procs.wait_for(TREE_ROLES)
    saved = json.dumps(tree["launcher"].to_json())

    attempt = AttemptProcesses(ProcessIdentity.from_json(json.loads(saved)))
    members = attempt.refresh()
    assert tree["grandchild"] in members and tree["sglang::scheduler_TP0"] in members
    assert attempt.leader_running() and attempt.exit_code() is None

    report = attempt.stop(grace_s=0.5)

    assert report.terminated == len(members) and report.killed >= 1  # the stubborn scheduler
    assert procs.signals(tree["sglang::scheduler_TP0"]) == [signal.SIGTERM]
    assert report.survivors == [] and not attempt.leader_running()
    assert attempt.exit_code() is None  # not our child: its status went to its new parent
    assert procs.live() == []


def test_signals_are_identity_checked_without_pidfd(
    procs: Procs, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_pidfd(pid: int, flags: int = 0) -> int:
        raise OSError(38, "Function not implemented")

    target = procs.start("member", str(procs.records), "stranger")
    real = procs.wait_for({"stranger"})["stranger"]
    monkeypatch.setattr(os, "pidfd_open", no_pidfd)

    impostor = AttemptProcesses(ProcessIdentity(real.pid, real.start_ticks + 100))
    assert impostor.stop(grace_s=0.1, kill_wait_s=0.1).terminated == 0
    assert real.alive() and procs.signals(real) == []

    report = AttemptProcesses(real, target).stop(grace_s=5.0)
    assert (report.terminated, report.killed) == (1, 0)
    assert procs.signals(real) == [signal.SIGTERM] and target.returncode == 0


# --- ports ------------------------------------------------------------------------------


def test_port_free_sees_a_real_listener() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert not port_free("127.0.0.1", port)
        assert not wait_port_free("127.0.0.1", port, timeout_s=0.3)
    assert port_free("127.0.0.1", port)


def test_port_free_sees_a_bound_socket_that_does_not_listen() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
        assert not port_free("127.0.0.1", port)
    assert port_free("127.0.0.1", port)


def test_wait_port_free_returns_once_the_listener_goes() -> None:
    listener = socket.socket()
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        closer = threading.Timer(0.3, listener.close)
        closer.start()
        started = time.monotonic()
        assert wait_port_free("127.0.0.1", port, timeout_s=DEADLINE_S)
        assert 0.2 < time.monotonic() - started < DEADLINE_S
        closer.join()
    finally:
        listener.close()


def test_stop_signals_the_orphans_at_once_when_the_launcher_dies_first(procs: Procs) -> None:
    """The launcher dies of its SIGTERM without stopping its tree: what is left is orphaned,
    with no drain to wait for, so it gets SIGTERM at once rather than after half the grace."""
    attempt, tree = start_tree(procs)
    attempt.refresh()

    report = attempt.stop(grace_s=20.0)

    assert report.survivors == [] and report.killed == 0 and procs.live() == []
    assert procs.signals(tree["sglang::scheduler_TP0"]) == [signal.SIGTERM]
    assert report.duration_s < 5.0  # half the grace would be 10 s
