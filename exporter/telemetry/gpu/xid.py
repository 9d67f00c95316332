"""XID critical errors, counted as NVML's event set reports them, in a thread of their own.

The wait blocks in C, hence its own thread, its own NVML session and a short timeout: the
thread sees a stop within ``wait_ms``. A failure (no library, no driver, a bug) is kept as the
watcher's error and retried an interval later, never raised.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from dataclasses import replace

import pynvml

from exporter.telemetry.gpu.nvml import ABSENT, ABSENT_RETRY_INTERVALS
from exporter.telemetry.gpu.snapshot import GpuSnapshot, XidCount

log = logging.getLogger(__name__)

Watched = dict[int | None, tuple[int, str]]  # device handle address -> (index, uuid)


class XidWatcher:
    def __init__(self, interval_s: float, wait_ms: int) -> None:
        self._interval_s = interval_s
        self._wait_ms = wait_ms
        self._lock = threading.Lock()  # guards what follows: the thread writes, snapshots read
        self._counts: dict[tuple[int, str, int], tuple[int, float]] = {}
        self._watched: tuple[int, ...] = ()
        self._unsupported: tuple[int, ...] = ()
        self._error: str | None = None

    def onto(self, snapshot: GpuSnapshot) -> GpuSnapshot:
        """``snapshot`` with the XID counts and the watcher's state as of now."""
        with self._lock:
            xids = tuple(
                XidCount(gpu, uuid, xid, count, last)
                for (gpu, uuid, xid), (count, last) in sorted(self._counts.items())
            )
            return replace(
                snapshot,
                xids=xids,
                xid_devices=self._watched,
                xid_unsupported=self._unsupported,
                xid_error=self._error,
            )

    def run(self, stopping: threading.Event) -> None:
        """The thread: watch until ``stopping`` is set, starting over after a failure."""
        while not stopping.is_set():
            retry_s = self._interval_s
            try:
                self._watch(stopping)
            except pynvml.NVMLError as error:
                self._set_state((), (), f"XID events: {error}")
                if error.value in ABSENT:
                    retry_s *= ABSENT_RETRY_INTERVALS
            except Exception as exc:  # a bug here must not end the thread
                log.exception("XID watcher failed")
                self._set_state((), (), f"XID events: {type(exc).__name__}: {exc}")
            stopping.wait(retry_s)

    def _watch(self, stopping: threading.Event) -> None:
        pynvml.nvmlInit()
        event_set = None
        try:
            event_set = pynvml.nvmlEventSetCreate()
            devices = self._register(event_set)
            while devices and not stopping.is_set():
                try:
                    event = pynvml.nvmlEventSetWait_v2(event_set, self._wait_ms)
                except pynvml.NVMLError_Timeout:
                    continue
                if (device := devices.get(_address(event.device))) is not None:
                    self._count(*device, int(event.eventData))
        finally:
            if event_set is not None:
                try:
                    pynvml.nvmlEventSetFree(event_set)
                except pynvml.NVMLError as error:
                    log.debug("nvmlEventSetFree: %s", error)
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError as error:
                log.debug("nvmlShutdown: %s", error)

    def _register(self, event_set) -> Watched:
        """Every device that reports XID events, registered on ``event_set``."""
        devices: Watched = {}
        unsupported = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            try:
                pynvml.nvmlDeviceRegisterEvents(
                    handle, pynvml.nvmlEventTypeXidCriticalError, event_set
                )
            except pynvml.NVMLError_NotSupported:
                unsupported.append(index)
                continue
            devices[_address(handle)] = (index, uuid)
        watched = tuple(sorted(index for index, _ in devices.values()))
        error = None if devices else "no device reports XID events"
        self._set_state(watched, tuple(unsupported), error)
        return devices

    def _set_state(
        self, watched: tuple[int, ...], unsupported: tuple[int, ...], error: str | None
    ) -> None:
        with self._lock:
            changed = error != self._error
            self._watched, self._unsupported, self._error = watched, unsupported, error
        if changed and error:
            log.warning("%s", error)

    def _count(self, gpu: int, uuid: str, xid: int) -> None:
        log.warning("XID %d on GPU %d (%s)", xid, gpu, uuid)
        with self._lock:
            count, _ = self._counts.get((gpu, uuid, xid), (0, 0.0))
            self._counts[(gpu, uuid, xid)] = (count + 1, time.time())


def _address(handle) -> int | None:
    """A device handle's identity: NVML hands out the same pointer for the same device."""
    return ctypes.cast(handle, ctypes.c_void_p).value
