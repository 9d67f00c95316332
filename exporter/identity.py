"""A process as the daemon names it: its pid *and* its start.

The pid alone may have been reused by a stranger; with the start it names one process for
good. The start that decides is the kernel's own: clock ticks since boot (field 22 of
/proc/PID/stat), exact and scoped to one boot by the boot's id. The wall-clock start that
psutil's ``create_time()`` reports is that count plus the boot's wall-clock time, which the
kernel moves whenever the clock is stepped (NTP, a resumed VM, a starved guest catching up):
compared by it, a running process looked gone and was never stopped. It is kept for people
only. Imports nothing of ours.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

__all__ = ["ProcessIdentity", "describe", "identify", "this_boot"]

_CMDLINE_CHARS = 200
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_GONE_STATES = frozenset("ZX")  # a zombie, or dead and about to leave /proc


@functools.cache
def this_boot() -> str:
    """The kernel's id of the running boot (stable until the next reboot)."""
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def _stat(pid: int) -> tuple[str, int] | None:
    """State letter and start (clock ticks since boot) of ``pid``, or None when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    # The name in parentheses may hold spaces and parentheses of its own: fields start
    # after the last ')'. Field 3 is the state, field 22 the start.
    fields = data[data.rfind(b")") + 2 :].split()
    return fields[0].decode(), int(fields[19])


@dataclass(frozen=True, order=True)
class ProcessIdentity:
    """A process as it was seen: pid, start in clock ticks since boot, and that boot."""

    pid: int
    start_ticks: int
    boot: str = field(default_factory=this_boot)

    @property
    def create_time(self) -> float:
        """The start in seconds since the epoch, as the clock reads it now (for people)."""
        return psutil.boot_time() + self.start_ticks / _CLOCK_TICKS

    def holds_pid(self) -> bool:
        """True iff ``pid`` still names this very process (a zombie included)."""
        return self._state() is not None

    def alive(self) -> bool:
        """True iff this very process still exists and is not a zombie."""
        state = self._state()
        return state is not None and state not in _GONE_STATES

    def _state(self) -> str | None:
        """This process's state letter, or None once ``pid`` names it no more."""
        stat = _stat(self.pid)
        if stat is None or stat[1] != self.start_ticks or self.boot != this_boot():
            return None
        return stat[0]

    def to_json(self) -> dict:
        return {
            "pid": self.pid,
            "create_time": round(self.create_time, 2),
            "start_ticks": self.start_ticks,
            "boot": self.boot,
        }

    @classmethod
    def from_json(cls, d: Mapping) -> ProcessIdentity:
        # A record written before the kernel's start was kept names no process any more
        # (start -1): resuming treats its attempt as ended unwatched.
        return cls(int(d["pid"]), int(d.get("start_ticks", -1)), d.get("boot", ""))


def identify(pid: int) -> ProcessIdentity | None:
    """The identity of the process now holding ``pid`` (zombies included), or None."""
    stat = _stat(pid)
    return None if stat is None else ProcessIdentity(pid, stat[1])


def describe(identity: ProcessIdentity) -> dict:
    """Name and command line of the process, for logs; None for what can't be read."""
    info: dict = {"pid": identity.pid, "name": None, "cmdline": None}
    try:
        proc = psutil.Process(identity.pid)
        with proc.oneshot():
            name, cmdline = proc.name(), proc.cmdline()
        if identity.holds_pid():  # read before the check: the pid may change hands between
            info["name"], info["cmdline"] = name, " ".join(cmdline)[:_CMDLINE_CHARS]
    except psutil.Error:
        pass
    return info
