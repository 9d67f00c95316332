"""What one GPU collection found: the devices, who holds their memory, the XID counts."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.telemetry.health import NEVER_COLLECTED, CollectorHealth

OURS, FOREIGN, UNKNOWN = "ours", "foreign", "unknown"


@dataclass(frozen=True)
class GpuProcess:
    pid: int  # as NVML reports it: the host's inside a container
    used_bytes: int | None  # None: NVML does not know
    attribution: str  # OURS, FOREIGN or UNKNOWN (owner could not be told)
    role: str = ""  # for OURS
    tp_rank: str = ""


@dataclass(frozen=True)
class GpuDevice:
    index: int
    name: str
    uuid: str
    total_bytes: int
    used_bytes: int
    free_bytes: int
    reserved_bytes: int | None  # None: only the v1 memory call answered
    processes: tuple[GpuProcess, ...] = ()
    processes_visible: bool = True  # False: NVML would not list the processes

    def role_bytes(self) -> dict[tuple[str, str], int]:
        """Memory our processes hold, summed per (role, tp_rank); sizes NVML knows only."""
        out: dict[tuple[str, str], int] = {}
        for proc in self.processes:
            if proc.attribution == OURS and proc.used_bytes is not None:
                key = (proc.role, proc.tp_rank)
                out[key] = out.get(key, 0) + proc.used_bytes
        return out

    @property
    def foreign_bytes(self) -> int:
        return sum(p.used_bytes or 0 for p in self.processes if p.attribution == FOREIGN)

    @property
    def unknown_bytes(self) -> int:
        """Memory that can be put neither on our roles nor on foreigners: what processes of
        unknown owner hold and, when NVML does not tell a process's size (or lists none), the
        used memory that no sized process accounts for."""
        held = sum(p.used_bytes or 0 for p in self.processes if p.attribution == UNKNOWN)
        if not self.processes_visible or any(p.used_bytes is None for p in self.processes):
            sized = sum(p.used_bytes for p in self.processes if p.used_bytes is not None)
            held += max(0, self.used_bytes - sized)
        return held


@dataclass(frozen=True)
class XidCount:
    gpu: int
    uuid: str
    xid: int
    count: int
    last_time: float  # wall time the last one was received


@dataclass(frozen=True)
class GpuSnapshot:
    taken_at: float | None  # wall time the collection ended; None before the first
    health: CollectorHealth = NEVER_COLLECTED
    nvml_absent: bool = False  # no NVML library or no driver: no GPU memory to hold here
    devices: tuple[GpuDevice, ...] = ()
    note: str | None = None  # why some memory could not be attributed
    xids: tuple[XidCount, ...] = ()
    xid_devices: tuple[int, ...] = ()  # devices whose XID events are being watched
    xid_unsupported: tuple[int, ...] = ()  # devices that do not report events
    xid_error: str | None = None

    @property
    def success(self) -> bool:
        return self.health.success

    @property
    def duration_s(self) -> float:
        return self.health.duration_s

    @property
    def last_success_time(self) -> float | None:
        return self.health.last_success_time

    @property
    def error(self) -> str | None:
        return self.health.error
