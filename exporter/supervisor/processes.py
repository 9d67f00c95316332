"""The processes of one attempt: start them, find them all, stop them all and nothing else.

SGLang's launcher is started in a session of its own, so its session id is its pid. Its
children (schedulers, detokenizer, the multiprocessing resource tracker, a ``g++`` forked by
torch) inherit that session even when their parent dies and they are reparented to PID 1,
so the session, not the parent chain, is what finds them. A process is named by its
identity (exporter/identity.py: pid and start time), and the daemon never signals a process
it did not start.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from exporter.identity import ProcessIdentity, identify

__all__ = [
    "AttemptProcesses",
    "SpawnError",
    "StopReport",
    "port_free",
    "spawn",
    "wait_port_free",
    "waited_pids",
]

log = logging.getLogger(__name__)

POLL_S = 0.05  # how often stop() looks again while waiting for processes to go
_SCANS_TO_CLOSE = 2  # empty scans in a row after which an attempt's session is over
_SPAWNED: weakref.WeakSet[subprocess.Popen] = weakref.WeakSet()  # see waited_pids()


class SpawnError(Exception):
    """The launcher could not be started at all (missing executable, unwritable log)."""


def spawn(
    argv: Sequence[str], *, env: Mapping[str, str], cwd: str | None, log_path: Path
) -> subprocess.Popen:
    """Start ``argv`` in a new session, stdout and stderr appended to ``log_path``.

    Both streams go to the log: SGLang writes nearly everything to stderr.
    """
    try:
        # CLOEXEC: nothing another thread starts meanwhile may inherit the log.
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
    except OSError as exc:
        raise SpawnError(f"cannot open the log {log_path}: {exc}") from exc
    try:
        popen = subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            start_new_session=True,
        )
    except OSError as exc:
        raise SpawnError(f"cannot start {argv[0]}: {exc}") from exc
    finally:
        os.close(fd)
    _SPAWNED.add(popen)
    _unprotect_from_oom_killer(popen.pid)
    return popen


def waited_pids() -> set[int]:
    """The launchers spawn() started whose exit status their Popen has not collected yet:
    a reaper must leave them to it (the status classifies the attempt). Registered before
    spawn() returns, so even a launcher that dies at once is never taken from its Popen."""
    return {popen.pid for popen in list(_SPAWNED) if popen.returncode is None}


def _unprotect_from_oom_killer(pid: int) -> None:
    """The unit protects the daemon (OOMScoreAdjust=-500) so that it outlives SGLang under
    host memory pressure; SGLang inherits that, so hand it back the default score. Raising a
    score needs no privilege; SGLang forks its children seconds later, after its imports."""
    try:
        with open("/proc/self/oom_score_adj") as own:
            if int(own.read()) >= 0:
                return
        with open(f"/proc/{pid}/oom_score_adj", "w") as child:
            child.write("0")
    except (OSError, ValueError):
        pass


@dataclass
class StopReport:
    terminated: int  # members SIGTERM was delivered to
    killed: int  # members SIGKILL was delivered to
    survivors: list[ProcessIdentity]  # still alive when stop() gave up
    duration_s: float


class AttemptProcesses:
    """Every process of one attempt: the launcher and all members of its session, as identities.

    ``popen`` is None when adopting an attempt started by a previous daemon. Safe to use
    from two threads (the supervisor's refresh loop and a shutdown).
    """

    def __init__(self, leader: ProcessIdentity, popen: subprocess.Popen | None = None) -> None:
        self.leader = leader
        self.session_id = leader.pid  # start_new_session made the launcher a session leader
        self._popen = popen
        self._lock = threading.Lock()
        self._known: set[ProcessIdentity] = {leader}
        self._empty_scans = 0

    @property
    def known(self) -> frozenset[ProcessIdentity]:
        """Every member ever seen; one that later left the session is still ours."""
        with self._lock:
            return frozenset(self._known)

    def refresh(self) -> list[ProcessIdentity]:
        """Scan the system for new members of the session; return the live known members."""
        with self._lock:
            if self._empty_scans >= _SCANS_TO_CLOSE:
                # The session grows only by fork from a live member: with none seen alive
                # twice it is over for good, and its id may yet go to a stranger's session.
                return []
        # A pid held by a live known member (identity-checked) cannot be a new member: only
        # the other pids need identifying, two reads of /proc each.
        live = self.alive()
        held = {member.pid for member in live}
        found = [
            m
            for pid in psutil.pids()
            if pid not in held and (m := self._session_member(pid)) is not None
        ]
        holder = identify(self.session_id)
        if holder is not None and holder != self.leader:
            # The kernel reuses a pid only once no process has it as session id either: if a
            # stranger holds the launcher's pid, our session is gone and any with its id is
            # the stranger's.
            found = []
        # A new member found dead (a zombie nobody waited for yet) is the attempt's, and dead:
        # no stop waits for it.
        found_alive = [member for member in found if member.alive()]
        with self._lock:
            self._known.update(found)
            live = sorted({*live, *found_alive})
            self._empty_scans = 0 if live else self._empty_scans + 1
        return live

    def _session_member(self, pid: int) -> ProcessIdentity | None:
        try:
            if os.getsid(pid) != self.session_id:  # one cheap syscall for every process
                return None
            ident = identify(pid)
            # An older session with the same id (the pid was reused) is not ours.
            if ident is None or ident.start_ticks < self.leader.start_ticks:
                return None
            # The pid may have changed hands between the calls: only if the same process
            # holds it before and after did the session id belong to it.
            if os.getsid(pid) != self.session_id or identify(pid) != ident:
                return None
        except OSError:  # gone meanwhile
            return None
        return ident

    def alive(self) -> list[ProcessIdentity]:
        """Known members still alive (identity checked), in pid order."""
        return sorted(member for member in self.known if member.alive())

    def exit_code(self) -> int | None:
        """The launcher's returncode (negative: killed by that signal) once it ended, if ours."""
        return None if self._popen is None else self._popen.poll()

    def leader_running(self) -> bool:
        if self._popen is not None:
            return self._popen.poll() is None  # an unreaped child's pid cannot be reused
        return self.leader.alive()

    def stop(self, grace_s: float, kill_wait_s: float = 10.0) -> StopReport:
        """SIGTERM the attempt, SIGKILL whatever is left after ``grace_s``.

        The launcher gets SIGTERM first and half the grace to drain: SGLang then stops its
        own tree, and a scheduler that received SIGTERM itself would die mid-drain and take
        the crash path. Members still alive at half time, or once the launcher is gone
        (orphans), get SIGTERM too.
        """
        started = time.monotonic()
        live = self._live()
        leader_first = self.leader in live
        terminated = sum(
            _send(m, signal.SIGTERM) for m in live if m == self.leader or not leader_first
        )
        deadline = time.monotonic() + grace_s
        members_at = time.monotonic() + (grace_s / 2 if leader_first else 0.0)
        while live and time.monotonic() < deadline:
            time.sleep(POLL_S)
            live = self._live()
            # Once the launcher is gone, what is left of its tree is orphaned: no drain to
            # wait for any more.
            if leader_first and (time.monotonic() >= members_at or self.leader not in live):
                terminated += sum(_send(m, signal.SIGTERM) for m in live if m != self.leader)
                leader_first = False
        killed: set[ProcessIdentity] = set()
        deadline = time.monotonic() + kill_wait_s
        while live:
            # Again on every pass: a member may have forked since the last one.
            killed.update(m for m in live if m not in killed and _send(m, signal.SIGKILL))
            if time.monotonic() >= deadline:
                break
            time.sleep(POLL_S)
            live = self._live()
        survivors = [member for member in live if member.alive()]
        # The last look may have seen the launcher gone (a zombie counts as gone) before its
        # Popen collected it, and a poll() that meets another thread's poll() collects
        # nothing: wait for it, or it stays a zombie that nobody else may reap.
        if self._popen is not None and not self.leader.alive():
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._popen.wait(timeout=kill_wait_s)
        return StopReport(terminated, len(killed), survivors, time.monotonic() - started)

    def _live(self) -> list[ProcessIdentity]:
        self.exit_code()  # reap our launcher, or it stays a zombie
        return self.refresh()


def _send(identity: ProcessIdentity, sig: signal.Signals) -> bool:
    """Signal the process iff it still is ``identity``; True when the signal was sent."""
    try:
        pidfd: int | None = os.pidfd_open(identity.pid)
    except ProcessLookupError:
        return False
    except OSError:  # no pidfd (kernel < 5.3, seccomp): check, then kill
        pidfd = None
    try:
        # The pidfd holds the process that had the pid when it was opened. If the pid still
        # carries our start time now, that process is ours, and a successor reusing the pid
        # cannot receive the signal.
        if not identity.alive():
            return False
        if pidfd is None:
            os.kill(identity.pid, sig)
        else:
            signal.pidfd_send_signal(pidfd, sig)
    except ProcessLookupError:
        return False
    except PermissionError as exc:
        log.warning("not allowed to signal pid %d: %s", identity.pid, exc)
        return False
    finally:
        if pidfd is not None:
            os.close(pidfd)
    return True


def port_free(host: str, port: int) -> bool:
    """True when nothing listens on (or holds) ``host:port``: a plain bind succeeds."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR on, as uvicorn binds: a previous server's connections left in
        # TIME_WAIT do not block it, while a live listener still does.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def wait_port_free(host: str, port: int, timeout_s: float) -> bool:
    """Wait until :func:`port_free`; False if ``timeout_s`` passed first."""
    deadline = time.monotonic() + timeout_s
    while not port_free(host, port):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True
