"""GPU telemetry through NVML (nvidia-ml-py): memory per device, who holds it, XID errors.

One module per job: ``snapshot`` (what a collection found), ``nvml`` (the NVML session and
its device reads), ``pids`` (NVML's pids across PID namespaces, and whose they are), ``xid``
(the XID event thread), ``collector`` (the source: the two threads, stalls, health),
``release`` (waiting for a dying attempt's memory), ``families`` (the metric families).
The package root holds the names its users need.
"""

from exporter.telemetry.gpu.collector import GpuCollector
from exporter.telemetry.gpu.families import gpu_families
from exporter.telemetry.gpu.nvml import ABSENT_RETRY_INTERVALS
from exporter.telemetry.gpu.pids import (
    PidResolution,
    host_pid_map,
    in_root_pid_namespace,
    resolve_pids,
)
from exporter.telemetry.gpu.release import GpuHolder, ReleaseReport, wait_gpu_released
from exporter.telemetry.gpu.snapshot import (
    FOREIGN,
    OURS,
    UNKNOWN,
    GpuDevice,
    GpuProcess,
    GpuSnapshot,
    XidCount,
)

__all__ = [
    "ABSENT_RETRY_INTERVALS",
    "FOREIGN",
    "OURS",
    "UNKNOWN",
    "GpuCollector",
    "GpuDevice",
    "GpuHolder",
    "GpuProcess",
    "GpuSnapshot",
    "PidResolution",
    "ReleaseReport",
    "XidCount",
    "gpu_families",
    "host_pid_map",
    "in_root_pid_namespace",
    "resolve_pids",
    "wait_gpu_released",
]
