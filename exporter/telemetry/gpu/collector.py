"""The GPU source: memory per device and who holds it, every interval; XIDs as they come.

Scrapes only read the last snapshot, so a hung NVML call (it happens on a sick GPU) never
hangs /metrics: a collection running longer than ``stall_after_s`` is reported as failed.
Failures never reach the daemon: a missing library or driver, a lost GPU or an NVML timeout
marks the snapshot failed, with no device data (a stale reading would look live).

Attribution: the daemon says which pids are its own (role and TP rank); NVML's pids are put on
those roles, or counted as foreign, or as unknown where they cannot be matched (``pids.py``).
Pids are kept in the snapshot for the supervisor, never exported.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from exporter.exposition import Family
from exporter.telemetry.gpu.families import gpu_families
from exporter.telemetry.gpu.nvml import ABSENT_RETRY_INTERVALS, CallFailed, NvmlSession
from exporter.telemetry.gpu.pids import (
    PROC,
    DeviceReading,
    OwnedProcesses,
    PidResolution,
    attribute,
    in_root_pid_namespace,
    owner_labels,
    resolve_pids,
)
from exporter.telemetry.gpu.snapshot import GpuDevice, GpuSnapshot
from exporter.telemetry.gpu.xid import XidWatcher
from exporter.telemetry.health import CollectorHealth
from exporter.telemetry.source import Host, PeriodicSource, Source

log = logging.getLogger(__name__)


class GpuCollector(PeriodicSource[GpuSnapshot]):
    """Collects GPU memory and processes every ``interval_s`` and XID events as they come.

    ``owned_processes`` returns the daemon's own processes (pid -> (role, tp_rank)); it is
    called once per collection, from the collector's thread.
    """

    name = "gpu"
    expected = (CallFailed,)

    def __init__(
        self,
        owned_processes: Callable[[], OwnedProcesses] = dict,
        *,
        interval_s: float = 5.0,
        watch_xid: bool = True,
        xid_wait_ms: int = 500,
        stall_after_s: float | None = None,
        proc_root: Path = PROC,
        root_namespace: bool | None = None,
    ) -> None:
        stall_after_s = stall_after_s or max(2 * interval_s, 5.0)
        never = GpuSnapshot(None, CollectorHealth(False, 0.0, None, "no collection yet"))
        # A refresh waits for the collection in flight as long as it may run before it is
        # reported as stalled, and no longer.
        super().__init__(never, interval_s, join_s=5.0, busy_wait_s=stall_after_s)
        self._owned_processes = owned_processes
        self._stall_after_s = stall_after_s
        self._watch_xid = watch_xid
        self._nvml = NvmlSession()
        self._xids = XidWatcher(interval_s, xid_wait_ms)
        self.proc_root = proc_root
        self.root_namespace = in_root_pid_namespace() if root_namespace is None else root_namespace

    @classmethod
    def build(cls, host: Host, built: Mapping[str, Source]) -> GpuCollector:
        """The GPUs' memory put on the roles of the attempt's process tree."""
        processes = built["processes"]
        return cls(lambda: processes.snapshot().roles_by_pid())

    @staticmethod
    def families(snapshot: GpuSnapshot | None) -> list[Family]:
        return gpu_families(snapshot) if snapshot is not None else []

    def start(self) -> None:
        super().start()
        if self._watch_xid:
            self._spawn(self._xids.run, "sentinel-gpu-xid", self._stopping)

    def snapshot(self) -> GpuSnapshot:
        """The last collection, with the XID counts as of now. Never calls NVML."""
        snap = self._snapshot
        running = self.busy_for()
        if running is not None and running > self._stall_after_s:
            error = f"{self._nvml.call_name} has not returned for {running:.0f} s"
            snap = replace(
                snap,
                taken_at=time.time(),
                health=CollectorHealth(False, running, snap.last_success_time, error),
                nvml_absent=False,
                devices=(),
                note=None,
            )
        return self._xids.onto(snap)

    def refresh(self) -> GpuSnapshot:
        """Collect now (after the collection in progress, if any) and return the snapshot."""
        self.collect()
        return self.snapshot()

    def resolve(self, nvml_pids: Iterable[int], our_pids: Iterable[int]) -> PidResolution:
        return resolve_pids(
            nvml_pids, our_pids, root_namespace=self.root_namespace, proc_root=self.proc_root
        )

    def _read(self, previous: GpuSnapshot) -> GpuSnapshot:
        readings, notes = self._nvml.read_devices()
        devices = self._attribute(readings, notes)
        return GpuSnapshot(None, devices=devices, note="; ".join(notes) or None)

    def _failed(self, previous: GpuSnapshot, error: Exception) -> GpuSnapshot:
        self._nvml.shutdown()  # the next collection starts over from nvmlInit
        absent = isinstance(error, CallFailed) and error.nvml_absent
        return GpuSnapshot(None, nvml_absent=absent)

    def _pause_s(self) -> float:
        # A missing library or driver does not appear in a running container: retry seldom.
        return self._interval_s * (ABSENT_RETRY_INTERVALS if self._snapshot.nvml_absent else 1)

    def _close(self) -> None:
        self._nvml.shutdown()

    def _attribute(self, readings: list[DeviceReading], notes: list[str]) -> tuple[GpuDevice, ...]:
        nvml_pids = {pid for _, processes in readings for pid, _ in processes}
        try:
            owned = {pid: owner_labels(*owner) for pid, owner in self._owned_processes().items()}
            resolution = self.resolve(nvml_pids, owned)
        except Exception as exc:  # the daemon's side failed: say so rather than blame others
            log.exception("listing the daemon's processes failed")
            owned = {}
            resolution = PidResolution(unknown=frozenset(nvml_pids), note=f"own processes: {exc}")
        if resolution.note:
            notes.append(resolution.note)
        return attribute(readings, owned, resolution)
