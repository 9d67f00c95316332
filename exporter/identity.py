"""A process as the daemon names it: its pid *and* its start time.

The pid alone may have been reused by a stranger; with the start time (as psutil reads it
from /proc) it names one process for good. Everything that signals, watches or reports a
process of an attempt goes by this identity. Imports nothing of ours.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import psutil

__all__ = ["ProcessIdentity", "describe", "identify"]

_CMDLINE_CHARS = 200


@dataclass(frozen=True, order=True)
class ProcessIdentity:
    """A process as it was seen: pid plus ``psutil.Process.create_time()``."""

    pid: int
    create_time: float

    def alive(self) -> bool:
        """True iff this very process still exists and is not a zombie."""
        try:
            proc = psutil.Process(self.pid)
            with proc.oneshot():
                return (
                    proc.create_time() == self.create_time and proc.status() != psutil.STATUS_ZOMBIE
                )
        except psutil.Error:
            return False

    def to_json(self) -> dict:
        return {"pid": self.pid, "create_time": self.create_time}

    @classmethod
    def from_json(cls, d: Mapping) -> ProcessIdentity:
        return cls(pid=int(d["pid"]), create_time=float(d["create_time"]))


def identify(pid: int) -> ProcessIdentity | None:
    """The identity of the process now holding ``pid`` (zombies included), or None."""
    try:
        return ProcessIdentity(pid, psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def describe(identity: ProcessIdentity) -> dict:
    """Name and command line of the process, for logs; None for what can't be read."""
    info: dict = {"pid": identity.pid, "name": None, "cmdline": None}
    try:
        proc = psutil.Process(identity.pid)
        with proc.oneshot():
            if proc.create_time() == identity.create_time:
                info["name"] = proc.name()
                info["cmdline"] = " ".join(proc.cmdline())[:_CMDLINE_CHARS]
    except psutil.Error:
        pass
    return info
