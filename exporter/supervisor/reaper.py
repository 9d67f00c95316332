"""Reaping what is handed to the daemon: it may be PID 1 of a container, or a subreaper.

SGLang's children (schedulers, detokenizer, the multiprocessing resource tracker, a ``g++``
forked by torch) leave the launcher's tree when it dies. As a child subreaper
(``PR_SET_CHILD_SUBREAPER``) or as PID 1 the daemon inherits them, and whatever it
inherits stays a zombie until it waits for it. The reaper waits for every zombie child
except those someone else waits for: the launchers the daemon holds a ``Popen`` for (their
exit status classifies the attempt) and the short commands it runs in its own session
(``subprocess.run`` waits for those itself).
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from exporter.attempt.snapshot import REAPED_ORIGINS
from exporter.identity import ProcessIdentity, identify
from exporter.supervisor.processes import waited_pids

__all__ = ["Reaped", "Reaper", "become_subreaper", "is_subreaper", "reapable"]

log = logging.getLogger(__name__)

PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37


def _prctl(option: int, arg: int | ctypes.c_void_p) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(option, arg, 0, 0) != 0:
        return ctypes.get_errno()
    return 0


def become_subreaper() -> bool:
    """Make orphans of our descendants ours rather than init's; False where refused."""
    error = _prctl(PR_SET_CHILD_SUBREAPER, 1)
    if error:
        log.warning("cannot become a child subreaper: %s", os.strerror(error))
    return not error


def is_subreaper() -> bool:
    flag = ctypes.c_int(0)
    return _prctl(PR_GET_CHILD_SUBREAPER, ctypes.addressof(flag)) == 0 and flag.value == 1


@dataclass(frozen=True)
class Reaped:
    identity: ProcessIdentity
    session: int
    returncode: int  # as subprocess reports it: negative for a signal
    origin: str  # "attempt" when it belonged to a session of the daemon's attempts


def reapable(pid: int, session: int, own_session: int, waited_by_others: Collection[int]) -> bool:
    """Whether the daemon itself must wait for this zombie child."""
    return pid not in waited_by_others and session != own_session


class Reaper:
    """``reap()`` waits for every reapable zombie child; call it on SIGCHLD (one signal may
    stand for several exits). ``sessions()`` names the session ids of the daemon's attempts
    (what counts as theirs), ``claimed()`` the pids a ``Popen`` waits for (by default the
    launchers :func:`spawn` started)."""

    def __init__(
        self,
        sessions: Callable[[], Collection[int]],
        claimed: Callable[[], Collection[int]] = waited_pids,
    ) -> None:
        self._claimed = claimed
        self._sessions = sessions
        self.counts: Counter[str] = Counter({origin: 0 for origin in REAPED_ORIGINS})

    def reap(self) -> list[Reaped]:
        own_session = os.getsid(0)
        claimed = self._claimed()
        reaped = []
        for pid, session in _zombie_children():
            if not reapable(pid, session, own_session, claimed):
                continue
            identity = identify(pid)
            try:
                waited, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # someone else waited for it meanwhile
                continue
            if waited != pid or identity is None:
                continue
            origin = "attempt" if session in self._sessions() else "other"
            self.counts[origin] += 1
            reaped.append(Reaped(identity, session, os.waitstatus_to_exitcode(status), origin))
        return reaped


def _zombie_children() -> list[tuple[int, int]]:
    """(pid, session id) of our children that are zombies. Orphans are handed to one of our
    threads, so every thread's children list counts."""
    pids: set[int] = set()
    for children in Path("/proc/self/task").glob("*/children"):
        try:
            pids.update(int(pid) for pid in children.read_text().split())
        except OSError:  # the thread ended meanwhile
            continue
    zombies = []
    for pid in sorted(pids):
        stat = _stat_fields(pid)
        if stat is not None and stat[0] == "Z":
            zombies.append((pid, int(stat[3])))
    return zombies


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name: state, ppid, pgrp, session..."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return data[data.rfind(b")") + 2 :].decode().split()
