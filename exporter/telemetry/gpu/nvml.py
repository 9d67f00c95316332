"""The collector's NVML session: the devices, their memory and the processes NVML lists.

NVML is initialised on first use and shut down after any failure (a lost GPU, a driver gone),
so the next collection starts over from ``nvmlInit``. The call in progress is named for the
stall report: a hung NVML call (it happens on a sick GPU) is reported, never waited on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

import pynvml

from exporter.telemetry.gpu.pids import DeviceReading
from exporter.telemetry.gpu.snapshot import GpuDevice

log = logging.getLogger(__name__)

# Without a library or a driver nothing on this machine can hold GPU memory.
ABSENT = (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
# With no library or driver, retry this many intervals apart (a minute at the default 5 s):
# neither appears in a running container, and each retry costs a dlopen.
ABSENT_RETRY_INTERVALS = 12
# The v2 memory call (which splits out reserved memory) is missing on older drivers.
_NO_V2 = (
    pynvml.NVMLError_NotSupported,
    pynvml.NVMLError_FunctionNotFound,
    pynvml.NVMLError_ArgumentVersionMismatch,
)


class CallFailed(Exception):
    """An NVML call failed: ``str()`` names the call and NVML's error."""

    def __init__(self, call: str, error: pynvml.NVMLError) -> None:
        super().__init__(f"{call}: {error}")
        self.error = error

    @property
    def nvml_absent(self) -> bool:
        return self.error.value in ABSENT


class NvmlSession:
    """One collection at a time uses it (the collector serialises them)."""

    def __init__(self) -> None:
        self._initialized = False
        self.call_name = ""  # the NVML call in progress, for the stall report

    def read_devices(self) -> tuple[list[DeviceReading], list[str]]:
        """Every device and its processes, and notes on what could not be read."""
        if not self._initialized:
            self._call(pynvml.nvmlInit)
            self._initialized = True
        notes: list[str] = []
        readings = [
            self._read_device(index, notes)
            for index in range(self._call(pynvml.nvmlDeviceGetCount))
        ]
        return readings, notes

    def shutdown(self) -> None:
        if self._initialized:
            self._initialized = False
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError as error:
                log.debug("nvmlShutdown: %s", error)

    def _read_device(self, index: int, notes: list[str]) -> DeviceReading:
        handle = self._call(pynvml.nvmlDeviceGetHandleByIndex, index)
        try:
            memory = self._call(
                pynvml.nvmlDeviceGetMemoryInfo, handle, version=pynvml.nvmlMemory_v2
            )
            reserved = memory.reserved
        except CallFailed as failure:
            if not isinstance(failure.error, _NO_V2):
                raise
            memory, reserved = self._call(pynvml.nvmlDeviceGetMemoryInfo, handle), None
        device = GpuDevice(
            index=index,
            name=self._call(pynvml.nvmlDeviceGetName, handle),
            uuid=self._call(pynvml.nvmlDeviceGetUUID, handle),
            total_bytes=memory.total,
            used_bytes=memory.used,
            free_bytes=memory.free,
            reserved_bytes=reserved,
        )
        try:
            processes = self._call(pynvml.nvmlDeviceGetComputeRunningProcesses_v3, handle)
        except CallFailed as failure:
            # Some virtualised GPUs never list processes: report the rest, not nothing.
            if not isinstance(failure.error, pynvml.NVMLError_NotSupported):
                raise
            notes.append(f"gpu {index} does not list its processes: its used memory is unknown")
            device, processes = replace(device, processes_visible=False), []
        return device, [(p.pid, p.usedGpuMemory) for p in processes]

    def _call(self, function: Callable, *args, **kwargs):
        self.call_name = function.__name__
        try:
            return function(*args, **kwargs)
        except pynvml.NVMLError as error:
            raise CallFailed(function.__name__, error) from error
