"""Waiting, before a relaunch, until the previous attempt's processes hold no GPU memory."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from exporter.telemetry.gpu.snapshot import GpuSnapshot

if TYPE_CHECKING:
    from exporter.telemetry.gpu.collector import GpuCollector


@dataclass(frozen=True)
class GpuHolder:
    gpu: int
    uuid: str
    pid: int  # ours, in this namespace
    used_bytes: int | None


@dataclass(frozen=True)
class ReleaseReport:
    released: bool
    verified: bool  # False: NVML could not be read, so nothing is known either way
    waited_s: float
    holders: tuple[GpuHolder, ...] = ()  # those of the given pids still on a GPU at the end
    error: str | None = None  # why it could not tell


def wait_gpu_released(
    collector: GpuCollector, owned: set[int], timeout_s: float, poll_s: float = 0.25
) -> ReleaseReport:
    """Wait until none of ``owned`` holds memory on any GPU, collecting afresh each time.

    Returns at once when there is no NVML library or driver. Where NVML's pids cannot be
    matched to ours (see :func:`resolve_pids`) the GPU counts as released only once none of
    ``owned`` is alive any more: an exited process holds no GPU memory.
    """
    started = time.monotonic()
    while True:
        snap = collector.refresh()
        waited = time.monotonic() - started
        if not snap.success:
            if snap.nvml_absent or waited >= timeout_s:
                return ReleaseReport(False, False, waited, error=snap.error)
        else:
            holders, error = _holders(collector, snap, owned)
            if not holders and error is None:
                return ReleaseReport(True, True, waited)
            if waited >= timeout_s:
                return ReleaseReport(False, True, waited, holders, error)
        time.sleep(max(0.0, min(poll_s, timeout_s - waited)))


def _holders(
    collector: GpuCollector, snap: GpuSnapshot, owned: set[int]
) -> tuple[tuple[GpuHolder, ...], str | None]:
    resolution = collector.resolve((p.pid for d in snap.devices for p in d.processes), owned)
    holders = tuple(
        GpuHolder(device.index, device.uuid, resolution.ours[proc.pid], proc.used_bytes)
        for device in snap.devices
        for proc in device.processes
        if proc.pid in resolution.ours
    )
    return holders, resolution.note if resolution.unknown else None
