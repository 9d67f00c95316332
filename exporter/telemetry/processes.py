"""The attempt's processes by role: what each is, how much memory and CPU it uses, and
which left the launcher's tree or died without being reaped.

Roles come from the process titles SGLang sets (``sglang/roles.py``). The mapping of pids
to roles also lets the GPU collector attribute device memory.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import psutil

from exporter.identity import ProcessIdentity
from exporter.sglang.roles import role_of
from exporter.telemetry.health import CollectorHealth

# An attempt's processes as the daemon knows them: (its launcher, its live members).
Members = tuple[ProcessIdentity, Sequence[ProcessIdentity]]


@dataclass(frozen=True)
class ProcessInfo:
    identity: ProcessIdentity
    role: str
    tp_rank: str
    rss_bytes: int
    cpu_seconds: float
    zombie: bool
    reparented: bool  # its parent is no longer a process of the attempt


@dataclass(frozen=True)
class ProcessSnapshot:
    taken_at: float
    processes: tuple[ProcessInfo, ...] = ()
    health: CollectorHealth = field(default_factory=lambda: CollectorHealth(False, 0.0, None, None))

    def roles_by_pid(self) -> dict[int, tuple[str, str]]:
        return {p.identity.pid: (p.role, p.tp_rank) for p in self.processes}


def inspect(leader: ProcessIdentity, members: Sequence[ProcessIdentity]) -> list[ProcessInfo]:
    """One pass over the attempt's live members (a vanished one is skipped)."""
    pids = {member.pid for member in members}
    found = []
    for member in members:
        try:
            proc = psutil.Process(member.pid)
            with proc.oneshot():
                if proc.create_time() != member.create_time:
                    continue
                role, rank = role_of(" ".join(proc.cmdline()), member == leader)
                times = proc.cpu_times()
                found.append(
                    ProcessInfo(
                        identity=member,
                        role=role,
                        tp_rank=rank,
                        rss_bytes=proc.memory_info().rss,
                        cpu_seconds=times.user + times.system,
                        zombie=proc.status() == psutil.STATUS_ZOMBIE,
                        reparented=member != leader and proc.ppid() not in pids,
                    )
                )
        except psutil.Error:
            continue
    return found


class ProcessCollector:
    """Inspects the current attempt's processes on an interval, in its own thread.

    ``source`` is the daemon's: it finds the members (the membership is its state) and hands
    over their identities, or None between attempts; this reader only looks at them."""

    def __init__(self, source: Callable[[], Members | None], interval_s: float = 5.0) -> None:
        self._source = source
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._snapshot = ProcessSnapshot(taken_at=0.0)

    def snapshot(self) -> ProcessSnapshot:
        return self._snapshot

    def collect(self) -> ProcessSnapshot:
        started = time.monotonic()
        previous = self._snapshot.health
        try:
            members = self._source()
            found = inspect(*members) if members is not None else []
        except (OSError, psutil.Error) as error:  # the scan itself failed, not one process
            health = CollectorHealth(
                False, time.monotonic() - started, previous.last_success_time, str(error)
            )
            self._snapshot = ProcessSnapshot(time.time(), self._snapshot.processes, health)
            return self._snapshot
        now = time.time()
        health = CollectorHealth(True, time.monotonic() - started, now, None)
        self._snapshot = ProcessSnapshot(now, tuple(found), health)
        return self._snapshot

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sentinel-processes", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.collect()
            self._stop.wait(self._interval)
