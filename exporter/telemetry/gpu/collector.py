"""GPU telemetry through NVML (nvidia-ml-py): memory per device, who holds it, XID errors.

A background thread collects every ``interval_s`` and publishes an immutable
:class:`GpuSnapshot`; scrapes only read the last one, so a hung NVML call (it happens on a
sick GPU) never hangs /metrics: a collection running longer than ``stall_after_s`` is reported
as failed. A second thread waits on an NVML event set for XID critical errors (the wait blocks
in C, hence its own thread and a short timeout).

Failures never reach the daemon: a missing library or driver, a lost GPU or an NVML timeout
marks the snapshot failed, with no device data (a stale reading would look live), and the
next interval starts over from ``nvmlInit``.

Attribution: the daemon says which pids are its own (role and TP rank); NVML's pids are put
on those roles or counted as foreign. Inside a container with a PID namespace of its own NVML
reports the *host's* pids, which mean nothing here; they are matched through the ``NSpid``
lines of a procfs that shows host pids (the host's /proc mounted into the container), and
when nothing can match them their memory is counted as unknown, never as foreign, and the
snapshot says why. Pids are kept in the snapshot for the supervisor, never exported.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import psutil
import pynvml

from exporter import exposition
from exporter.exposition import Family
from exporter.sglang.roles import ROLES
from exporter.telemetry.health import NAMESPACE, CollectorHealth

__all__ = [
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

log = logging.getLogger(__name__)

OURS, FOREIGN, UNKNOWN = "ours", "foreign", "unknown"
OwnedProcesses = Mapping[int, tuple[str, str]]  # pid -> (role, tp_rank)

PROC = Path("/proc")
# The kernel gives the initial PID namespace this fixed inode number (PROC_PID_INIT_INO).
_ROOT_PID_NAMESPACE_INODE = 0xEFFFFFFC
# Without a library or a driver nothing on this machine can hold GPU memory.
_ABSENT = (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
# With no library or driver, retry this many intervals apart (a minute at the default 5 s):
# neither appears in a running container, and each retry costs a dlopen.
ABSENT_RETRY_INTERVALS = 12
# The v2 memory call (which splits out reserved memory) is missing on older drivers.
_NO_V2 = (
    pynvml.NVMLError_NotSupported,
    pynvml.NVMLError_FunctionNotFound,
    pynvml.NVMLError_ArgumentVersionMismatch,
)


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
    success: bool
    duration_s: float
    last_success_time: float | None
    error: str | None = None
    nvml_absent: bool = False  # no NVML library or no driver: no GPU memory to hold here
    devices: tuple[GpuDevice, ...] = ()
    note: str | None = None  # why some memory could not be attributed
    xids: tuple[XidCount, ...] = ()
    xid_devices: tuple[int, ...] = ()  # devices whose XID events are being watched
    xid_unsupported: tuple[int, ...] = ()  # devices that do not report events
    xid_error: str | None = None

    @property
    def health(self) -> CollectorHealth:
        return CollectorHealth(self.success, self.duration_s, self.last_success_time, self.error)


# --- pids across PID namespaces ---------------------------------------------------------------


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


# --- the collector ---------------------------------------------------------------------------


class _CallFailed(Exception):
    def __init__(self, call: str, error: pynvml.NVMLError) -> None:
        super().__init__(f"{call}: {error}")
        self.error = error


def _owner(role: str, tp_rank: str) -> tuple[str, str]:
    # Labels come from closed sets: anything unexpected is folded rather than exported.
    rank = str(tp_rank)
    return (role if role in ROLES else "other", rank if rank.isdigit() else "")


class GpuCollector:
    """Collects GPU memory and processes every ``interval_s`` and XID events as they come.

    ``owned_processes`` returns the daemon's own processes (pid -> (role, tp_rank)); it is
    called once per collection, from the collector's thread.
    """

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
        self._owned_processes = owned_processes
        self._interval_s = interval_s
        self._watch_xid = watch_xid
        self._xid_wait_ms = xid_wait_ms
        self._stall_after_s = stall_after_s or max(2 * interval_s, 5.0)
        self.proc_root = proc_root
        self.root_namespace = in_root_pid_namespace() if root_namespace is None else root_namespace
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._collect_lock = threading.Lock()  # one collection at a time; guards _initialized
        self._initialized = False
        self._call_name = ""  # the NVML call in progress, for the stall report
        self._lock = threading.Lock()  # guards what follows
        self._snap = GpuSnapshot(None, False, 0.0, None, error="no collection yet")
        self._busy_since: float | None = None
        self._xids: dict[tuple[int, str, int], tuple[int, float]] = {}
        self._xid_devices: tuple[int, ...] = ()
        self._xid_unsupported: tuple[int, ...] = ()
        self._xid_error: str | None = None

    # -- lifecycle --

    def start(self) -> None:
        targets = [self._run] + ([self._run_xid] if self._watch_xid else [])
        for target in targets:
            thread = threading.Thread(target=target, name=f"gpu{target.__name__}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop and join both threads, then shut NVML down; never raises."""
        self._stopping.set()
        for thread in self._threads:
            thread.join(timeout_s)
        stuck = [thread.name for thread in self._threads if thread.is_alive()]
        if stuck:
            log.warning("GPU collector threads %s are stuck in an NVML call; left behind", stuck)
        elif self._collect_lock.acquire(timeout=timeout_s):
            try:
                self._shutdown()
            finally:
                self._collect_lock.release()

    # -- reading --

    def snapshot(self) -> GpuSnapshot:
        """The last collection, with the XID counts as of now. Never calls NVML."""
        with self._lock:
            snap, busy_since, call = self._snap, self._busy_since, self._call_name
            xids = tuple(
                XidCount(gpu, uuid, xid, count, last)
                for (gpu, uuid, xid), (count, last) in sorted(self._xids.items())
            )
            xid_state = (self._xid_devices, self._xid_unsupported, self._xid_error)
        if busy_since is not None and (running := time.monotonic() - busy_since) > (
            self._stall_after_s
        ):
            snap = replace(
                snap,
                taken_at=time.time(),
                success=False,
                duration_s=running,
                error=f"{call} has not returned for {running:.0f} s",
                nvml_absent=False,
                devices=(),
                note=None,
            )
        return replace(
            snap,
            xids=xids,
            xid_devices=xid_state[0],
            xid_unsupported=xid_state[1],
            xid_error=xid_state[2],
        )

    def refresh(self) -> GpuSnapshot:
        """Collect now (after the collection in progress, if any) and return the snapshot."""
        if not self._stopping.is_set() and self._collect_lock.acquire(timeout=self._stall_after_s):
            try:
                if not self._stopping.is_set():
                    self._publish(self._collect())
            finally:
                self._collect_lock.release()
        return self.snapshot()

    def resolve(self, nvml_pids: Iterable[int], our_pids: Iterable[int]) -> PidResolution:
        return resolve_pids(
            nvml_pids, our_pids, root_namespace=self.root_namespace, proc_root=self.proc_root
        )

    # -- collection --

    def _run(self) -> None:
        while not self._stopping.is_set():
            absent = self.refresh().nvml_absent
            self._stopping.wait(self._interval_s * (ABSENT_RETRY_INTERVALS if absent else 1))

    def _call(self, function: Callable, *args, **kwargs):
        self._call_name = function.__name__
        try:
            return function(*args, **kwargs)
        except pynvml.NVMLError as error:
            raise _CallFailed(function.__name__, error) from error

    def _collect(self) -> GpuSnapshot:
        started = time.monotonic()
        with self._lock:
            self._busy_since = started
            last_success = self._snap.last_success_time
        try:
            devices, notes = self._read_devices()
        except _CallFailed as failure:
            self._shutdown()
            return self._failed(str(failure), started, last_success, failure.error.value)
        except Exception as exc:  # a bug here must not end the thread
            log.exception("GPU collection failed")
            self._shutdown()
            return self._failed(f"{type(exc).__name__}: {exc}", started, last_success)
        finally:
            with self._lock:
                self._busy_since = None
        now = time.time()
        return GpuSnapshot(
            taken_at=now,
            success=True,
            duration_s=time.monotonic() - started,
            last_success_time=now,
            devices=devices,
            note="; ".join(notes) or None,
        )

    def _failed(
        self, error: str, started: float, last_success: float | None, code: int | None = None
    ) -> GpuSnapshot:
        return GpuSnapshot(
            taken_at=time.time(),
            success=False,
            duration_s=time.monotonic() - started,
            last_success_time=last_success,
            error=error,
            nvml_absent=code in _ABSENT,
        )

    def _read_devices(self) -> tuple[tuple[GpuDevice, ...], list[str]]:
        if not self._initialized:
            self._call(pynvml.nvmlInit)
            self._initialized = True
        notes: list[str] = []
        readings: list[tuple[GpuDevice, list]] = []
        for index in range(self._call(pynvml.nvmlDeviceGetCount)):
            handle = self._call(pynvml.nvmlDeviceGetHandleByIndex, index)
            try:
                memory = self._call(
                    pynvml.nvmlDeviceGetMemoryInfo, handle, version=pynvml.nvmlMemory_v2
                )
                reserved = memory.reserved
            except _CallFailed as failure:
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
            except _CallFailed as failure:
                # Some virtualised GPUs never list processes: report the rest, not nothing.
                if not isinstance(failure.error, pynvml.NVMLError_NotSupported):
                    raise
                notes.append(f"gpu {index} does not list its processes: its used memory is unknown")
                device, processes = replace(device, processes_visible=False), []
            readings.append((device, [(p.pid, p.usedGpuMemory) for p in processes]))
        return self._attribute(readings, notes), notes

    def _attribute(
        self, readings: list[tuple[GpuDevice, list]], notes: list[str]
    ) -> tuple[GpuDevice, ...]:
        nvml_pids = {pid for _, processes in readings for pid, _ in processes}
        try:
            owned = {pid: _owner(*owner) for pid, owner in self._owned_processes().items()}
            resolution = self.resolve(nvml_pids, owned)
        except Exception as exc:  # the daemon's side failed: say so rather than blame others
            log.exception("listing the daemon's processes failed")
            owned = {}
            resolution = PidResolution(unknown=frozenset(nvml_pids), note=f"own processes: {exc}")
        if resolution.note:
            notes.append(resolution.note)
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

    def _shutdown(self) -> None:
        if self._initialized:
            self._initialized = False
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError as error:
                log.debug("nvmlShutdown: %s", error)

    def _publish(self, snap: GpuSnapshot) -> None:
        with self._lock:
            before = self._snap
            self._snap = snap
        if snap.error and snap.error != before.error:
            log.warning("GPU collection failed: %s", snap.error)
        elif snap.success and not before.success and before.taken_at is not None:
            log.info("GPU collection recovered")

    # -- XID events --

    def _run_xid(self) -> None:
        while not self._stopping.is_set():
            retry_s = self._interval_s
            try:
                self._watch_xid_events()
            except pynvml.NVMLError as error:
                self._set_xid_state((), (), f"XID events: {error}")
                if error.value in _ABSENT:
                    retry_s *= ABSENT_RETRY_INTERVALS
            except Exception as exc:  # a bug here must not end the thread
                log.exception("XID watcher failed")
                self._set_xid_state((), (), f"XID events: {type(exc).__name__}: {exc}")
            self._stopping.wait(retry_s)

    def _watch_xid_events(self) -> None:
        pynvml.nvmlInit()
        event_set = None
        try:
            event_set = pynvml.nvmlEventSetCreate()
            devices: dict[int | None, tuple[int, str]] = {}  # handle address -> (index, uuid)
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
            self._set_xid_state(
                watched, tuple(unsupported), None if devices else "no device reports XID events"
            )
            while devices and not self._stopping.is_set():
                try:
                    event = pynvml.nvmlEventSetWait_v2(event_set, self._xid_wait_ms)
                except pynvml.NVMLError_Timeout:
                    continue
                if (device := devices.get(_address(event.device))) is not None:
                    self._count_xid(*device, int(event.eventData))
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

    def _set_xid_state(
        self, watched: tuple[int, ...], unsupported: tuple[int, ...], error: str | None
    ) -> None:
        with self._lock:
            changed = error != self._xid_error
            self._xid_devices, self._xid_unsupported, self._xid_error = watched, unsupported, error
        if changed and error:
            log.warning("%s", error)

    def _count_xid(self, gpu: int, uuid: str, xid: int) -> None:
        log.warning("XID %d on GPU %d (%s)", xid, gpu, uuid)
        with self._lock:
            count, _ = self._xids.get((gpu, uuid, xid), (0, 0.0))
            self._xids[(gpu, uuid, xid)] = (count + 1, time.time())


def _address(handle) -> int | None:
    """A device handle's identity: NVML hands out the same pointer for the same device."""
    return ctypes.cast(handle, ctypes.c_void_p).value


# --- waiting for the GPU to be released --------------------------------------------------------


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


# --- metric families -----------------------------------------------------------------------------


def _gauge(name: str, doc: str, labels: list[str]) -> Family:
    return exposition.gauge(f"{NAMESPACE}_{name}", doc, labels)


def gpu_families(snapshot: GpuSnapshot) -> list[Family]:
    """The GPU metric families of one snapshot; pure, so scrapes never touch NVML."""
    device_labels = ["gpu", "uuid"]
    info = _gauge("gpu_info", "A GPU NVML reports; always 1.", ["gpu", "uuid", "name"])
    total = _gauge("gpu_memory_total_bytes", "Device memory.", device_labels)
    used = _gauge("gpu_memory_used_bytes", "Device memory allocated.", device_labels)
    free = _gauge("gpu_memory_free_bytes", "Device memory free.", device_labels)
    reserved = _gauge(
        "gpu_memory_reserved_bytes", "Device memory the driver reserves.", device_labels
    )
    process = _gauge(
        "gpu_process_memory_bytes",
        "Device memory our processes hold, per role and TP rank.",
        [*device_labels, "role", "tp_rank"],
    )
    foreign = _gauge(
        "gpu_foreign_memory_bytes", "Device memory processes not ours hold.", device_labels
    )
    unknown = _gauge(
        "gpu_unknown_memory_bytes",
        "Device memory whose holder cannot be told (unmatched pids, sizes NVML does not know).",
        device_labels,
    )
    for device in snapshot.devices:
        labels = [str(device.index), device.uuid]
        info.add([*labels, device.name], 1)
        total.add(labels, device.total_bytes)
        used.add(labels, device.used_bytes)
        free.add(labels, device.free_bytes)
        if device.reserved_bytes is not None:
            reserved.add(labels, device.reserved_bytes)
        for (role, rank), size in sorted(device.role_bytes().items()):
            process.add([*labels, role, rank], size)
        foreign.add(labels, device.foreign_bytes)
        unknown.add(labels, device.unknown_bytes)
    xid_labels = [*device_labels, "xid"]
    xids = exposition.counter(
        f"{NAMESPACE}_gpu_xid_errors", "XID critical errors NVML reported.", xid_labels
    )
    last = _gauge(
        "gpu_xid_last_timestamp_seconds", "When the last XID of each kind came.", xid_labels
    )
    for x in snapshot.xids:
        labels = [str(x.gpu), x.uuid, str(x.xid)]
        xids.add(labels, x.count)
        last.add(labels, x.last_time)
    return [info, total, used, free, reserved, process, foreign, unknown, xids, last]
