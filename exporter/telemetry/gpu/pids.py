"""NVML's pids seen from here, and whose they are.

Inside a container with a PID namespace of its own NVML reports the *host's* pids, which mean
nothing here; they are matched through the ``NSpid`` lines of a procfs that shows host pids (the
host's /proc mounted into the container), and when nothing can match them their memory is
counted as unknown, never as foreign, and the note says why.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import psutil

from exporter.sglang.roles import ROLES
from exporter.telemetry.gpu.snapshot import FOREIGN, OURS, UNKNOWN, GpuDevice, GpuProcess

OwnedProcesses = Mapping[int, tuple[str, str]]  # pid -> (role, tp_rank)
# A device as NVML read it, before attribution: its processes as (pid, used bytes or None).
DeviceReading = tuple[GpuDevice, list[tuple[int, int | None]]]

PROC = Path("/proc")
# The kernel gives the initial PID namespace this fixed inode number (PROC_PID_INIT_INO).
_ROOT_PID_NAMESPACE_INODE = 0xEFFFFFFC


@dataclass(frozen=True)
class PidResolution:
    """NVML's pids seen from here: ``ours`` maps those of our processes to our pids,
    ``unknown`` holds those whose owner cannot be told, every other one is foreign."""

    ours: Mapping[int, int] = field(default_factory=dict)
    unknown: frozenset[int] = frozenset()
    note: str | None = None


def in_root_pid_namespace() -> bool:
    """True when this process sees the host's pids, as NVML reports them."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino == _ROOT_PID_NAMESPACE_INODE
    except OSError:
        return False


def _nspid(status: Path) -> list[int]:
    try:
        with open(status, encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("NSpid:"):
                    return [int(part) for part in line.split()[1:]]
    except (OSError, ValueError):
        pass
    return []


def _readlink(path: Path | str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def host_pid_map(local_pids: Iterable[int], proc_root: Path = PROC) -> dict[int, int]:
    """Host pid -> our pid for our processes, from the ``NSpid`` lines of ``proc_root``.

    ``NSpid`` lists a process's pid in every namespace from the procfs's own (first: the
    host's, for a host procfs) down to its innermost (last: ours). The same innermost pid
    exists in every container, so an entry must also be in our PID namespace, or, where its
    namespace cannot be read, the only candidate for that pid.
    """
    wanted = set(local_pids)
    own_namespace = _readlink("/proc/self/ns/pid")
    candidates: dict[int, list[int]] = {}
    try:
        entries = [entry for entry in os.scandir(proc_root) if entry.name.isdigit()]
    except OSError:
        return {}
    for entry in entries:
        nspid = _nspid(Path(entry.path, "status"))
        if len(nspid) < 2 or nspid[-1] not in wanted:
            continue
        namespace = _readlink(Path(entry.path, "ns", "pid"))
        if namespace is not None and own_namespace is not None and namespace != own_namespace:
            continue
        candidates.setdefault(nspid[-1], []).append(nspid[0])
    return {hosts[0]: local for local, hosts in candidates.items() if len(hosts) == 1}


def resolve_pids(
    nvml_pids: Iterable[int],
    our_pids: Iterable[int],
    *,
    root_namespace: bool,
    proc_root: Path = PROC,
) -> PidResolution:
    """Which of NVML's pids are our processes (see :class:`PidResolution`)."""
    nvml, ours = frozenset(nvml_pids), frozenset(our_pids)
    direct = nvml & ours
    if not nvml or not ours or direct or root_namespace:
        # One namespace (or nothing of ours to look for): NVML's pids compare as they are.
        return PidResolution({pid: pid for pid in direct})
    hosts = host_pid_map(ours, proc_root)
    mapped = {host: local for host, local in hosts.items() if host in nvml}
    # A process that has exited holds no GPU memory: only live ones must be found.
    unmatched = [pid for pid in ours - set(hosts.values()) if psutil.pid_exists(pid)]
    if not unmatched:
        return PidResolution(mapped)
    if hosts:
        note = (
            f"{proc_root} shows no host pid for {len(unmatched)} of our processes: "
            "NVML processes not matched count as unknown memory"
        )
    else:
        note = (
            "NVML reports the host's pids and this PID namespace is not the host's: "
            f"{proc_root} shows no host pid for our processes, so their memory counts as "
            "unknown (share the host's PID namespace or mount the host's /proc to attribute it)"
        )
    return PidResolution(mapped, nvml - mapped.keys(), note)


def owner_labels(role: str, tp_rank: str) -> tuple[str, str]:
    """Our (role, tp_rank) as labels: from closed sets, anything unexpected folded."""
    rank = str(tp_rank)
    return (role if role in ROLES else "other", rank if rank.isdigit() else "")


def attribute(
    readings: Iterable[DeviceReading], owned: OwnedProcesses, resolution: PidResolution
) -> tuple[GpuDevice, ...]:
    """Each device with its processes put on our roles, or counted as foreign or unknown."""
    devices = []
    for device, processes in readings:
        attributed = []
        for pid, used in processes:
            if pid in resolution.unknown:
                attributed.append(GpuProcess(pid, used, UNKNOWN))
            elif pid in resolution.ours:
                role, rank = owned[resolution.ours[pid]]
                attributed.append(GpuProcess(pid, used, OURS, role, rank))
            else:
                attributed.append(GpuProcess(pid, used, FOREIGN))
        devices.append(replace(device, processes=tuple(attributed)))
    return tuple(devices)
