"""The attempt's processes by role: what each is, how much memory and CPU it uses, and
which left the launcher's tree or died without being reaped.

Roles come from the process titles SGLang sets (``sglang/roles.py``). The mapping of pids
to roles also lets the GPU collector attribute device memory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import psutil

from exporter.exposition import Family, sentinel_counter, sentinel_gauge
from exporter.identity import ProcessIdentity
from exporter.sglang.roles import ROLES, role_of
from exporter.telemetry.health import NEVER_COLLECTED, CollectorHealth
from exporter.telemetry.source import Host, PeriodicSource, Source

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
    taken_at: float = 0.0
    processes: tuple[ProcessInfo, ...] = ()
    health: CollectorHealth = NEVER_COLLECTED

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
                if not member.holds_pid():
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


class ProcessCollector(PeriodicSource[ProcessSnapshot]):
    """Inspects the current attempt's processes on an interval, in its own thread.

    ``source`` is the daemon's: it finds the members (the membership is its state) and hands
    over their identities, or None between attempts; this reader only looks at them."""

    name = "processes"
    expected = (OSError, psutil.Error)  # the scan itself failed, not one process

    def __init__(self, source: Callable[[], Members | None], interval_s: float = 5.0) -> None:
        super().__init__(ProcessSnapshot(), interval_s)
        self._source = source

    @classmethod
    def build(cls, host: Host, built: Mapping[str, Source]) -> ProcessCollector:
        return cls(host.attempt_members)

    @staticmethod
    def families(snapshot: ProcessSnapshot | None) -> list[Family]:
        return process_families(snapshot)

    def _read(self, previous: ProcessSnapshot) -> ProcessSnapshot:
        members = self._source()
        found = inspect(*members) if members is not None else []
        return ProcessSnapshot(processes=tuple(found))


def process_families(processes: ProcessSnapshot | None) -> list[Family]:
    count = sentinel_gauge("processes", "The attempt's live processes, by role.", ["role"])
    rss = sentinel_gauge(
        "process_resident_memory_bytes", "Resident memory by role and TP rank.", ["role", "tp_rank"]
    )
    cpu = sentinel_counter(
        "process_cpu_seconds", "CPU time of the attempt's processes, by role.", ["role"]
    )
    zombies = sentinel_gauge("zombie_processes", "Processes of the attempt that died unreaped.")
    reparented = sentinel_gauge(
        "reparented_processes", "Processes of the attempt that left its tree."
    )
    found = processes.processes if processes else ()
    by_role = {role: 0 for role in ROLES}
    memory: dict[tuple[str, str], int] = {}
    seconds = {role: 0.0 for role in ROLES}
    for info in found:
        if not info.zombie:
            by_role[info.role] += 1
        memory[(info.role, info.tp_rank)] = (
            memory.get((info.role, info.tp_rank), 0) + info.rss_bytes
        )
        seconds[info.role] += info.cpu_seconds
    for role in ROLES:
        count.add([role], by_role[role])
        cpu.add([role], seconds[role])
    for (role, rank), size in sorted(memory.items()):
        rss.add([role, rank], size)
    zombies.add([], sum(info.zombie for info in found))
    reparented.add([], sum(info.reparented for info in found))
    return [count, rss, cpu, zombies, reparented]
