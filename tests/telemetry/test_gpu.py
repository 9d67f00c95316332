"""Tests for exporter.telemetry.gpu: the real pynvml against a fake libnvidia-ml.so.1.

``tests/harness/fake_nvml/fake_nvml.c`` is built with gcc once per session; its state (devices,
processes, XID events, injected errors and delays) is a text file it re-reads on every call,
so tests change the world while the collector runs. Attributed processes are real ones the
tests start. Every collector is stopped and joined, and the library's init count must be
back to zero after each test (a balanced nvmlShutdown). Tests marked ``gpu`` run the same
collector against the real driver and are skipped where there is none.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pynvml
import pytest

from exporter.exposition import render
from exporter.telemetry.gpu import (
    ABSENT_RETRY_INTERVALS,
    FOREIGN,
    OURS,
    UNKNOWN,
    GpuCollector,
    GpuDevice,
    GpuHolder,
    GpuProcess,
    GpuSnapshot,
    XidCount,
    gpu_families,
    host_pid_map,
    resolve_pids,
    wait_gpu_released,
)
from exporter.telemetry.health import CollectorHealth, collector_families
from tests.conftest import exposed_samples, reset_pynvml
from tests.harness.metric_names import EXPORTED_METRICS

GiB = 1 << 30
MiB = 1 << 20
DEADLINE_S = 5.0
INTERVAL_S = 0.05

# Family names: a counter's family is named without its exposed `_total`.
GPU_FAMILIES = {
    name.removesuffix("_total")
    for name in EXPORTED_METRICS
    if name.startswith("sglang_sentinel_gpu_")
}


def wait_for(predicate: Callable[[], object], what: str, timeout_s: float = DEADLINE_S):
    deadline = time.monotonic() + timeout_s
    while not (value := predicate()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)
    return value


@pytest.fixture
def collectors() -> Iterator[Callable[..., GpuCollector]]:
    """Makes collectors (started unless start=False); stops and joins every one."""
    made: list[GpuCollector] = []

    def make(owned=dict, *, start: bool = True, **kwargs) -> GpuCollector:
        kwargs.setdefault("interval_s", INTERVAL_S)
        kwargs.setdefault("xid_wait_ms", 20)
        kwargs.setdefault("root_namespace", True)
        collector = GpuCollector(owned, **kwargs)
        made.append(collector)
        if start:
            collector.start()
        return collector

    yield make
    for collector in made:
        collector.stop()
        assert not any(thread.is_alive() for thread in collector._threads)


@pytest.fixture
def sleepers() -> Iterator[Callable[[], subprocess.Popen]]:
    """Real processes, for real pids; killed and reaped after the test."""
    started: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        proc = subprocess.Popen(["sleep", "60"])
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def successful(collector: GpuCollector) -> GpuSnapshot:
    return wait_for(lambda: (s := collector.snapshot()).success and s, "a successful collection")


def failed(collector: GpuCollector) -> GpuSnapshot:
    return wait_for(lambda: not (s := collector.snapshot()).success and s.taken_at and s, "failure")


# --- devices and memory ----------------------------------------------------------------------


def test_devices_and_memory_v2(nvml, collectors):
    snap = collectors(start=False).refresh()
    assert snap.success and snap.error is None and snap.last_success_time == snap.taken_at
    assert [(d.index, d.name, d.uuid) for d in snap.devices] == [
        (0, "NVIDIA H200", nvml.uuid(0)),
        (1, "NVIDIA H200", nvml.uuid(1)),
    ]
    first = snap.devices[0]
    assert (first.total_bytes, first.used_bytes, first.free_bytes, first.reserved_bytes) == (
        141 * GiB,
        60 * GiB,
        80 * GiB,
        GiB,
    )
    assert first.processes == () and first.processes_visible


@pytest.mark.parametrize(
    "code",
    [
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
    ],
)
def test_memory_falls_back_to_v1(nvml, collectors, code):
    nvml.fail("nvmlDeviceGetMemoryInfo_v2", code)
    snap = collectors(start=False).refresh()
    assert snap.success
    first = snap.devices[0]
    # v1 has no reserved field and counts the reserved memory as used.
    assert first.reserved_bytes is None
    assert (first.total_bytes, first.used_bytes, first.free_bytes) == (
        141 * GiB,
        61 * GiB,
        80 * GiB,
    )
    names = set(exposed_samples(gpu_families(snap)))
    assert "sglang_sentinel_gpu_memory_reserved_bytes" not in names


# --- attribution -------------------------------------------------------------------------------


def test_processes_attributed_to_roles_ranks_and_foreigners(nvml, collectors, sleepers):
    launcher, sched0, sched1, detok, stranger = (sleepers() for _ in range(5))
    owned = {
        launcher.pid: ("launcher", ""),
        sched0.pid: ("scheduler", "0"),
        sched1.pid: ("scheduler", "1"),
        detok.pid: ("detokenizer", ""),
    }
    nvml.set_processes(
        [
            (0, launcher.pid, 500 * MiB),
            (0, sched0.pid, 40 * GiB),
            (1, sched1.pid, 40 * GiB),
            (1, detok.pid, 300 * MiB),
            (0, stranger.pid, 2 * GiB),
            (1, 4_000_000, GiB),  # a pid nobody here has: foreign too
        ]
    )
    snap = collectors(lambda: owned, start=False).refresh()
    by_pid = {p.pid: p for d in snap.devices for p in d.processes}
    assert by_pid[sched1.pid] == GpuProcess(sched1.pid, 40 * GiB, OURS, "scheduler", "1")
    assert by_pid[stranger.pid].attribution == FOREIGN
    assert by_pid[4_000_000].attribution == FOREIGN
    assert snap.devices[0].role_bytes() == {
        ("launcher", ""): 500 * MiB,
        ("scheduler", "0"): 40 * GiB,
    }
    got = exposed_samples(gpu_families(snap))
    assert sorted(
        (labels["gpu"], labels["role"], labels["tp_rank"], value)
        for labels, value in got["sglang_sentinel_gpu_process_memory_bytes"]
    ) == [
        ("0", "launcher", "", 500 * MiB),
        ("0", "scheduler", "0", 40 * GiB),
        ("1", "detokenizer", "", 300 * MiB),
        ("1", "scheduler", "1", 40 * GiB),
    ]
    assert [v for _, v in got["sglang_sentinel_gpu_foreign_memory_bytes"]] == [2 * GiB, GiB]
    assert [v for _, v in got["sglang_sentinel_gpu_unknown_memory_bytes"]] == [0, 0]
    assert not any("pid" in labels for series in got.values() for labels, _ in series)


def test_processes_of_one_role_and_rank_are_summed(nvml, collectors, sleepers):
    a, b = sleepers(), sleepers()
    owned = {a.pid: ("other", ""), b.pid: ("other", "")}
    nvml.set_processes([(0, a.pid, GiB), (0, b.pid, 2 * GiB)])
    snap = collectors(lambda: owned, start=False).refresh()
    assert snap.devices[0].role_bytes() == {("other", ""): 3 * GiB}


def test_unknown_process_size_counts_as_unknown_memory(nvml, collectors, sleepers):
    ours, stranger = sleepers(), sleepers()
    # Device 0 uses 60 GiB: 20 GiB sized (ours), the rest NVML cannot put on anyone.
    nvml.set_processes([(0, ours.pid, 20 * GiB), (0, stranger.pid, None)])
    snap = collectors(lambda: {ours.pid: ("scheduler", "0")}, start=False).refresh()
    device = snap.devices[0]
    assert device.processes[1] == GpuProcess(stranger.pid, None, FOREIGN)
    assert device.role_bytes() == {("scheduler", "0"): 20 * GiB}
    assert (device.foreign_bytes, device.unknown_bytes) == (0, 40 * GiB)


def test_device_that_does_not_list_processes(nvml, collectors):
    nvml.fail("nvmlDeviceGetComputeRunningProcesses_v3", pynvml.NVML_ERROR_NOT_SUPPORTED, 0)
    snap = collectors(start=False).refresh()
    assert snap.success
    assert not snap.devices[0].processes_visible and snap.devices[1].processes_visible
    assert snap.devices[0].unknown_bytes == 60 * GiB
    assert "gpu 0 does not list its processes" in snap.note


def test_role_and_rank_labels_come_from_closed_sets(nvml, collectors, sleepers):
    proc = sleepers()
    nvml.set_processes([(0, proc.pid, GiB)])
    snap = collectors(lambda: {proc.pid: ("tokenizer-7", "rank=1")}, start=False).refresh()
    assert snap.devices[0].role_bytes() == {("other", ""): GiB}


def test_failing_owned_processes_callable_makes_memory_unknown(nvml, collectors, sleepers):
    proc = sleepers()
    nvml.set_processes([(0, proc.pid, GiB)])

    def broken():
        raise RuntimeError("process table unavailable")

    snap = collectors(broken, start=False).refresh()
    assert snap.success
    assert snap.devices[0].processes[0].attribution == UNKNOWN
    assert snap.devices[0].unknown_bytes == GiB and snap.devices[0].foreign_bytes == 0
    assert "process table unavailable" in snap.note


# --- the container case: NVML reports host pids -------------------------------------------------


def fake_proc(root: Path, entries: dict[int, tuple[list[int], str | None]]) -> Path:
    """A /proc-like tree: pid -> (NSpid fields, ns/pid link target or None)."""
    for pid, (nspid, namespace) in entries.items():
        (root / str(pid) / "ns").mkdir(parents=True)
        fields = "\t".join(map(str, nspid))
        (root / str(pid) / "status").write_text(f"Name:\tpython\nPid:\t{pid}\nNSpid:\t{fields}\n")
        if namespace is not None:
            os.symlink(namespace, root / str(pid) / "ns" / "pid")
    (root / "self").mkdir(exist_ok=True)
    return root


def test_host_pid_map_matches_nspid_in_our_namespace(tmp_path):
    ours = os.readlink("/proc/self/ns/pid")
    root = fake_proc(
        tmp_path,
        {
            900001: ([900001, 41], ours),
            900002: ([900002, 41], "pid:[1]"),  # same inner pid, another container: not ours
            900003: ([900003, 42], None),  # namespace unreadable, but the only candidate
            900004: ([900004, 43], None),  # two candidates for 43: ambiguous, dropped
            900005: ([900005, 43], None),
            900006: ([900006], ours),  # one namespace only: nothing to map
            900007: ([900007, 12, 44], ours),  # nested twice: first is the host's, last ours
        },
    )
    assert host_pid_map({41, 42, 43, 44, 45}, root) == {900001: 41, 900003: 42, 900007: 44}
    assert host_pid_map({41}, tmp_path / "missing") == {}


def test_resolve_pids(tmp_path, sleepers):
    ours, other_of_ours = sleepers(), sleepers()
    dead = subprocess.Popen(["true"])
    dead.wait()
    nvml_pids = [900001, 900050]
    # One namespace: compared as they are.
    direct = resolve_pids([ours.pid, 900050], [ours.pid], root_namespace=False)
    assert (direct.ours, direct.unknown) == ({ours.pid: ours.pid}, frozenset())
    host = resolve_pids(nvml_pids, [ours.pid], root_namespace=True)
    assert (host.ours, host.unknown, host.note) == ({}, frozenset(), None)
    # Nothing of ours to find, or none of ours alive: whatever NVML lists is foreign.
    assert resolve_pids(nvml_pids, [], root_namespace=False).unknown == frozenset()
    gone = resolve_pids(nvml_pids, [dead.pid], root_namespace=False, proc_root=tmp_path)
    assert (gone.ours, gone.unknown, gone.note) == ({}, frozenset(), None)
    # A container: host pids matched through NSpid.
    root = fake_proc(tmp_path / "host", {900001: ([900001, ours.pid], None)})
    mapped = resolve_pids(nvml_pids, [ours.pid], root_namespace=False, proc_root=root)
    assert (mapped.ours, mapped.unknown, mapped.note) == ({900001: ours.pid}, frozenset(), None)
    # One of ours (alive) unmatched: what is not matched may be it.
    partial = resolve_pids(
        nvml_pids, [ours.pid, other_of_ours.pid], root_namespace=False, proc_root=root
    )
    assert partial.ours == {900001: ours.pid} and partial.unknown == {900050}
    assert "no host pid for 1 of our processes" in partial.note
    # Nothing matched at all.
    none = resolve_pids(nvml_pids, [ours.pid], root_namespace=False, proc_root=tmp_path / "empty")
    assert none.ours == {} and none.unknown == set(nvml_pids)
    assert "PID namespace is not the host's" in none.note


def test_collector_in_a_container(nvml, collectors, sleepers, tmp_path):
    sched = sleepers()
    root = fake_proc(tmp_path / "host-proc", {900001: ([900001, sched.pid], None)})
    nvml.set_processes([(0, 900001, 30 * GiB), (0, 900050, 5 * GiB)])
    owned = {sched.pid: ("scheduler", "0")}
    snap = collectors(lambda: owned, start=False, root_namespace=False, proc_root=root).refresh()
    assert snap.devices[0].role_bytes() == {("scheduler", "0"): 30 * GiB}
    assert snap.devices[0].foreign_bytes == 5 * GiB and snap.note is None

    unresolved = collectors(
        lambda: owned, start=False, root_namespace=False, proc_root=tmp_path / "none"
    ).refresh()
    device = unresolved.devices[0]
    assert {p.attribution for p in device.processes} == {UNKNOWN}
    assert (device.foreign_bytes, device.unknown_bytes, device.role_bytes()) == (0, 35 * GiB, {})
    assert "share the host's PID namespace or mount the host's /proc" in unresolved.note


# --- XID events ----------------------------------------------------------------------------------


def test_xid_events_counted_with_last_timestamp(nvml, collectors):
    collector = collectors()
    wait_for(lambda: collector.snapshot().xid_devices == (0, 1), "XID registration")
    before = time.time()
    for device, xid in [(0, 79), (1, 48), (0, 79)]:
        nvml.add_xid(device, xid)
    wait_for(lambda: [x.count for x in collector.snapshot().xids] == [2, 1], "the XIDs")
    xids = collector.snapshot().xids
    assert [(x.gpu, x.uuid, x.xid, x.count) for x in xids] == [
        (0, nvml.uuid(0), 79, 2),
        (1, nvml.uuid(1), 48, 1),
    ]
    assert all(before <= x.last_time <= time.time() for x in xids)
    got = exposed_samples(gpu_families(collector.snapshot()))
    assert got["sglang_sentinel_gpu_xid_errors_total"] == [
        ({"gpu": "0", "uuid": nvml.uuid(0), "xid": "79"}, 2),
        ({"gpu": "1", "uuid": nvml.uuid(1), "xid": "48"}, 1),
    ]
    assert [v for _, v in got["sglang_sentinel_gpu_xid_last_timestamp_seconds"]] == [
        x.last_time for x in xids
    ]


def test_devices_without_events_are_skipped(nvml, collectors):
    nvml.fail("nvmlDeviceRegisterEvents", pynvml.NVML_ERROR_NOT_SUPPORTED, 1)
    collector = collectors()
    snap = wait_for(lambda: (s := collector.snapshot()).xid_devices and s, "XID registration")
    assert (snap.xid_devices, snap.xid_unsupported, snap.xid_error) == ((0,), (1,), None)
    nvml.add_xid(1, 13)  # not watched: never delivered
    nvml.add_xid(0, 31)
    xids = wait_for(lambda: collector.snapshot().xids, "the XID on gpu 0")
    assert [(x.gpu, x.xid) for x in xids] == [(0, 31)]


def test_no_device_with_events(nvml, collectors):
    nvml.fail("nvmlDeviceRegisterEvents", pynvml.NVML_ERROR_NOT_SUPPORTED)
    collector = collectors()
    snap = wait_for(lambda: (s := collector.snapshot()).xid_error and s, "the XID state")
    assert (snap.xid_devices, snap.xid_unsupported) == ((), (0, 1))
    assert snap.xid_error == "no device reports XID events"
    assert successful(collector).devices  # memory collection goes on


def test_xid_watcher_recovers_and_keeps_counting(nvml, collectors):
    collector = collectors()
    wait_for(lambda: collector.snapshot().xid_devices, "XID registration")
    nvml.add_xid(0, 79)
    wait_for(lambda: collector.snapshot().xids, "the first XID")
    nvml.fail("nvmlEventSetWait_v2", pynvml.NVML_ERROR_GPU_IS_LOST)
    snap = wait_for(lambda: (s := collector.snapshot()).xid_error and s, "the watcher's failure")
    assert snap.xid_error == "XID events: GPU is lost" and snap.xid_devices == ()
    nvml.heal()
    wait_for(lambda: collector.snapshot().xid_devices == (0, 1), "re-registration")
    nvml.add_xid(0, 79)
    # A new event set sees only new events: the first one is not counted twice.
    wait_for(lambda: collector.snapshot().xids[0].count == 2, "the second XID")
    time.sleep(0.1)
    assert collector.snapshot().xids[0].count == 2


# --- failures ------------------------------------------------------------------------------------


def test_library_not_found_then_installed(nvml, collectors, monkeypatch):
    loads = []

    def no_library(name, *args, **kwargs):
        loads.append(name)
        raise OSError(f"{name}: cannot open shared object file")

    pynvml.nvmlLib = None
    monkeypatch.setattr(pynvml, "CDLL", no_library)
    collector = collectors()
    snap = failed(collector)
    assert snap.error == "nvmlInit: NVML Shared Library Not Found"
    assert snap.nvml_absent and snap.devices == () and snap.last_success_time is None
    assert snap.xid_error == "XID events: NVML Shared Library Not Found"
    # The daemon's side: reading and exporting never raise, and there is no last success.
    got = exposed_samples(
        gpu_families(collector.snapshot()) + collector_families({"gpu": snap.health})
    )
    assert got["sglang_sentinel_collector_success"] == [({"collector": "gpu"}, 0.0)]
    assert "sglang_sentinel_collector_last_success_timestamp_seconds" not in got
    assert "sglang_sentinel_gpu_info" not in got
    wait_for(lambda: len(loads) >= 4, "retries of nvmlInit")
    # The library appears (a driver installed meanwhile): the collector recovers by itself.
    monkeypatch.setattr(pynvml, "CDLL", lambda name, *a, **k: nvml.lib)
    snap = successful(collector)
    assert len(snap.devices) == 2 and snap.error is None
    wait_for(lambda: collector.snapshot().xid_devices == (0, 1), "XID registration")


class RecordingEvent(threading.Event):
    """An event that records how long each wait on it was asked to be."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        return super().wait(timeout)


def recorded_waits(collector: GpuCollector) -> Callable[[], list[float | None]]:
    """The waits of both threads from now on: the collection's pause (on its wake event) and
    the XID watcher's retry (on the stop event)."""
    collector._wake, collector._stopping = wake, stopping = RecordingEvent(), RecordingEvent()
    return lambda: wake.waits + stopping.waits


def test_no_library_is_retried_a_dozen_intervals_apart(nvml, collectors, monkeypatch):
    """A missing library does not appear in a running container: each retry (a dlopen per
    thread) waits ABSENT_RETRY_INTERVALS intervals; a failure of a present NVML does not."""

    def no_library(name, *args, **kwargs):
        raise OSError(f"{name}: cannot open shared object file")

    pynvml.nvmlLib = None
    monkeypatch.setattr(pynvml, "CDLL", no_library)
    collector = collectors(start=False)
    waits = recorded_waits(collector)
    collector.start()
    wait_for(lambda: len(waits()) >= 2, "both threads waiting")
    assert set(waits()) == {INTERVAL_S * ABSENT_RETRY_INTERVALS}
    collector.stop()
    nvml.fail("nvmlDeviceGetCount", pynvml.NVML_ERROR_GPU_IS_LOST)
    monkeypatch.setattr(pynvml, "CDLL", lambda name, *a, **k: nvml.lib)
    lost = collectors(start=False)
    waits = recorded_waits(lost)
    lost.start()
    wait_for(lambda: len(waits()) >= 2, "both threads waiting")
    assert set(waits()) == {INTERVAL_S}


def test_driver_not_loaded_then_recovers(nvml, collectors):
    nvml.fail("nvmlInitWithFlags", pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    collector = collectors()
    snap = failed(collector)
    assert snap.error == "nvmlInit: Driver Not Loaded" and snap.nvml_absent
    inits = nvml.init_count
    wait_for(lambda: nvml.init_count >= inits + 3, "retries of nvmlInit")
    nvml.heal()
    assert len(successful(collector).devices) == 2


def test_gpu_lost_mid_run_then_recovers(nvml, collectors):
    collector = collectors()
    first = successful(collector)
    nvml.fail("nvmlDeviceGetMemoryInfo_v2", pynvml.NVML_ERROR_GPU_IS_LOST, 1)
    snap = failed(collector)
    assert snap.error == "nvmlDeviceGetMemoryInfo: GPU is lost" and not snap.nvml_absent
    assert snap.devices == ()  # no stale reading served as if it were live
    assert snap.last_success_time >= first.last_success_time
    inits = nvml.init_count
    wait_for(lambda: nvml.init_count >= inits + 2, "re-initialisation attempts")
    nvml.heal()
    assert len(successful(collector).devices) == 2


@pytest.mark.parametrize(
    ("function", "code", "error"),
    [
        ("nvmlDeviceGetMemoryInfo", pynvml.NVML_ERROR_NOT_SUPPORTED, "Not Supported"),
        ("nvmlDeviceGetComputeRunningProcesses_v3", pynvml.NVML_ERROR_TIMEOUT, "Timeout"),
        ("nvmlDeviceGetCount_v2", pynvml.NVML_ERROR_UNKNOWN, "Unknown Error"),
        ("nvmlDeviceGetUUID", pynvml.NVML_ERROR_IRQ_ISSUE, "Interrupt Request Issue"),
    ],
)
def test_call_errors_fail_the_collection(nvml, collectors, function, code, error):
    nvml.fail("nvmlDeviceGetMemoryInfo_v2", pynvml.NVML_ERROR_NOT_SUPPORTED)  # v1 is reached
    nvml.fail(function, code)
    snap = collectors(start=False).refresh()
    call = function.removesuffix("_v2")
    assert (snap.success, snap.error, snap.devices) == (False, f"{call}: {error}", ())
    assert snap.health == CollectorHealth(False, snap.duration_s, None, snap.error)


def test_a_hung_call_is_reported_without_blocking_scrapes(nvml, collectors):
    collector = collectors(stall_after_s=0.2)
    successful(collector)
    nvml.delay("nvmlDeviceGetCount_v2", 1000)
    snap = wait_for(lambda: (s := collector.snapshot()).error and s, "the stall report", 3)
    assert snap.error.startswith("nvmlDeviceGetCount has not returned for")
    assert not snap.success and snap.devices == () and snap.duration_s > 0.2
    started = time.monotonic()
    collector.snapshot()
    assert time.monotonic() - started < 0.05
    nvml.heal()
    successful(collector)


def test_a_bug_in_collection_never_reaches_the_daemon(nvml, collectors, monkeypatch):
    def broken(handle):
        raise ValueError("bad bytes")

    monkeypatch.setattr(pynvml, "nvmlDeviceGetName", broken)
    collector = collectors()
    assert failed(collector).error == "ValueError: bad bytes"
    monkeypatch.undo()
    successful(collector)
    assert all(thread.is_alive() for thread in collector._threads)


def test_stop_joins_and_shuts_nvml_down(nvml):
    collector = GpuCollector(interval_s=INTERVAL_S, xid_wait_ms=500, root_namespace=True)
    collector.start()
    wait_for(lambda: nvml.refcount == 2, "both threads initialised")
    started = time.monotonic()
    collector.stop()
    assert time.monotonic() - started < 1.0  # the XID wait times out within 500 ms
    assert not any(thread.is_alive() for thread in collector._threads)
    assert nvml.refcount == 0
    assert collector.refresh() == collector.snapshot()  # a stopped collector collects no more


# --- waiting for the GPU to be released -----------------------------------------------------------


def test_wait_gpu_released(nvml, collectors, sleepers):
    old, stranger = sleepers(), sleepers()
    nvml.set_processes([(0, old.pid, 30 * GiB), (1, stranger.pid, GiB)])
    collector = collectors()
    threading.Timer(0.3, nvml.set_processes, [[(1, stranger.pid, GiB)]]).start()
    report = wait_gpu_released(collector, {old.pid}, timeout_s=DEADLINE_S, poll_s=0.02)
    assert report.released and report.verified and report.holders == ()
    assert 0.3 <= report.waited_s < DEADLINE_S


def test_wait_gpu_released_times_out_with_a_report(nvml, collectors, sleepers):
    old, other = sleepers(), sleepers()
    nvml.set_processes([(0, old.pid, 30 * GiB), (1, old.pid, None), (1, other.pid, GiB)])
    collector = collectors(start=False)
    report = wait_gpu_released(collector, {old.pid}, timeout_s=0.3, poll_s=0.02)
    assert (report.released, report.verified, report.error) == (False, True, None)
    assert report.holders == (
        GpuHolder(0, nvml.uuid(0), old.pid, 30 * GiB),
        GpuHolder(1, nvml.uuid(1), old.pid, None),
    )
    assert 0.3 <= report.waited_s < 1.0


def test_wait_gpu_released_without_nvml_returns_at_once(nvml, collectors, monkeypatch):
    pynvml.nvmlLib = None
    monkeypatch.setattr(pynvml, "CDLL", lambda *a, **k: (_ for _ in ()).throw(OSError("none")))
    report = wait_gpu_released(collectors(start=False), {1234}, timeout_s=DEADLINE_S)
    assert (report.released, report.verified) == (False, False)
    assert report.error == "nvmlInit: NVML Shared Library Not Found" and report.waited_s < 0.5


def test_wait_gpu_released_in_a_container_without_host_pids(nvml, collectors, sleepers, tmp_path):
    old = sleepers()
    nvml.set_processes([(0, 900001, 30 * GiB)])  # a host pid: cannot be matched to ours
    collector = collectors(start=False, root_namespace=False, proc_root=tmp_path)
    report = wait_gpu_released(collector, {old.pid}, timeout_s=0.2, poll_s=0.02)
    assert (report.released, report.verified, report.holders) == (False, True, ())
    assert "PID namespace is not the host's" in report.error
    old.kill()
    old.wait()
    # Ours have exited, so whatever NVML lists is not ours.
    report = wait_gpu_released(collector, {old.pid}, timeout_s=0.2, poll_s=0.02)
    assert report.released and report.verified


# --- metric families -----------------------------------------------------------------------------

SNAPSHOT = GpuSnapshot(
    taken_at=1_700_000_010.0,
    health=CollectorHealth(True, 0.004, 1_700_000_010.0),
    devices=(
        GpuDevice(
            0,
            "NVIDIA H200",
            "GPU-a",
            141 * GiB,
            60 * GiB,
            80 * GiB,
            GiB,
            (
                GpuProcess(11, 40 * GiB, OURS, "scheduler", "0"),
                GpuProcess(12, GiB, OURS, "scheduler", "0"),
                GpuProcess(13, 2 * GiB, FOREIGN),
                GpuProcess(14, 3 * GiB, UNKNOWN),
            ),
        ),
        GpuDevice(1, "NVIDIA H200", "GPU-b", 141 * GiB, 10 * GiB, 131 * GiB, None),
    ),
    xids=(XidCount(0, "GPU-a", 79, 3, 1_700_000_005.0),),
)


def test_gpu_families():
    families = gpu_families(SNAPSHOT)
    assert {f.name for f in families} == GPU_FAMILIES
    assert {f.name: f.type for f in families}["sglang_sentinel_gpu_xid_errors"] == "counter"
    got = exposed_samples(families)
    a, b = {"gpu": "0", "uuid": "GPU-a"}, {"gpu": "1", "uuid": "GPU-b"}
    assert got["sglang_sentinel_gpu_info"] == [
        ({**a, "name": "NVIDIA H200"}, 1),
        ({**b, "name": "NVIDIA H200"}, 1),
    ]
    assert got["sglang_sentinel_gpu_memory_total_bytes"] == [(a, 141 * GiB), (b, 141 * GiB)]
    assert got["sglang_sentinel_gpu_memory_used_bytes"] == [(a, 60 * GiB), (b, 10 * GiB)]
    assert got["sglang_sentinel_gpu_memory_free_bytes"] == [(a, 80 * GiB), (b, 131 * GiB)]
    assert got["sglang_sentinel_gpu_memory_reserved_bytes"] == [(a, GiB)]  # b: v1 only
    assert got["sglang_sentinel_gpu_process_memory_bytes"] == [
        ({**a, "role": "scheduler", "tp_rank": "0"}, 41 * GiB)
    ]
    assert got["sglang_sentinel_gpu_foreign_memory_bytes"] == [(a, 2 * GiB), (b, 0)]
    assert got["sglang_sentinel_gpu_unknown_memory_bytes"] == [(a, 3 * GiB), (b, 0)]
    xid = {**a, "xid": "79"}
    assert got["sglang_sentinel_gpu_xid_errors_total"] == [(xid, 3)]
    assert got["sglang_sentinel_gpu_xid_last_timestamp_seconds"] == [(xid, 1_700_000_005.0)]


def test_failed_snapshot_exports_no_device_data_but_keeps_xid_counts():
    snap = GpuSnapshot(1.0, CollectorHealth(False, 0.1, None, "nvmlInit: x"), xids=SNAPSHOT.xids)
    got = exposed_samples(gpu_families(snap))
    assert set(got) == {
        "sglang_sentinel_gpu_xid_errors_total",
        "sglang_sentinel_gpu_xid_last_timestamp_seconds",
    }


def test_collector_families():
    got = exposed_samples(
        collector_families(
            {
                "gpu": CollectorHealth(True, 0.004, 1_700_000_010.0),
                "never": CollectorHealth(False, 0.001, None, "nvmlInit: Driver Not Loaded"),
                "lapsed": CollectorHealth(False, 2.5, 1_699_999_000.0, "timeout"),
            }
        )
    )
    assert got["sglang_sentinel_collector_success"] == [
        ({"collector": "gpu"}, 1.0),
        ({"collector": "lapsed"}, 0.0),
        ({"collector": "never"}, 0.0),
    ]
    assert got["sglang_sentinel_collector_duration_seconds"] == [
        ({"collector": "gpu"}, 0.004),
        ({"collector": "lapsed"}, 2.5),
        ({"collector": "never"}, 0.001),
    ]
    # A collector that never succeeded has no last-success sample (not a 0 that reads as 1970).
    assert got["sglang_sentinel_collector_last_success_timestamp_seconds"] == [
        ({"collector": "gpu"}, 1_700_000_010.0),
        ({"collector": "lapsed"}, 1_699_999_000.0),
    ]


def exposition(snap: GpuSnapshot) -> bytes:
    return render(gpu_families(snap) + collector_families({"gpu": snap.health}))


def promtool_check(text: bytes) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (scripts/install-test-deps installs it)")
    result = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, timeout=30
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert result.stdout == b"" and result.stderr == b"", "promtool lint findings"


def test_exposition_passes_promtool():
    text = exposition(SNAPSHOT)
    assert b'sglang_sentinel_gpu_xid_errors_total{gpu="0",uuid="GPU-a",xid="79"} 3.0' in text
    promtool_check(text)
    never = CollectorHealth(False, 0.0, None, "no collection yet")
    promtool_check(exposition(GpuSnapshot(None, never)))


# --- the real driver (a lent GPU machine) ---------------------------------------------------------

CUDA_HOLDER = r"""
import ctypes, sys, time
cuda = ctypes.CDLL("libcuda.so.1")
ctx, ptr, size = ctypes.c_void_p(), ctypes.c_uint64(), 256 << 20
assert cuda.cuInit(0) == 0
assert cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, 0) == 0
assert cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size)) == 0
print("ready", flush=True)
time.sleep(120)
"""


@pytest.fixture
def real_nvml() -> Iterator[None]:
    reset_pynvml()
    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except pynvml.NVMLError as error:
        reset_pynvml()
        pytest.skip(f"no real NVML here: {error}")
    yield
    reset_pynvml()


@pytest.mark.gpu
def test_real_gpu_collection(real_nvml, collectors):
    collector = collectors()
    snap = successful(collector)
    assert snap.devices, "NVML answered but listed no GPU"
    for device in snap.devices:
        assert device.name and device.uuid.startswith(("GPU-", "MIG-"))
        assert device.total_bytes > 0
        assert device.used_bytes + device.free_bytes + (device.reserved_bytes or 0) <= (
            device.total_bytes + 64 * MiB
        )
    wait_for(
        lambda: (s := collector.snapshot()).xid_devices or s.xid_unsupported or s.xid_error,
        "the XID watcher",
    )
    snap = collector.snapshot()
    watched = set(snap.xid_devices) | set(snap.xid_unsupported)
    assert watched == {d.index for d in snap.devices}, snap.xid_error
    if shutil.which("promtool"):  # a lent GPU machine may not have it
        promtool_check(exposition(snap))


@pytest.mark.gpu
def test_real_gpu_attribution_and_release(real_nvml, collectors):
    holder = subprocess.Popen(
        [sys.executable, "-c", CUDA_HOLDER], stdout=subprocess.PIPE, text=True
    )
    try:
        if holder.stdout.readline().strip() != "ready":
            pytest.skip("could not allocate GPU memory through libcuda")
        owned = {holder.pid: ("scheduler", "0")}
        collector = collectors(lambda: owned, root_namespace=None)  # detect, as the daemon does
        snap = wait_for(
            lambda: (
                (s := collector.refresh()).success
                and any(p.used_bytes for d in s.devices for p in d.processes)
                and s
            ),
            "the holder on a GPU",
            30,
        )
        ours = sum(d.role_bytes().get(("scheduler", "0"), 0) for d in snap.devices)
        unknown = sum(d.unknown_bytes for d in snap.devices)
        # Ours, or unknown (with a reason) inside a container without the host's pids.
        assert ours >= 256 * MiB or (unknown >= 256 * MiB and snap.note), snap
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    report = wait_gpu_released(collector, {holder.pid}, timeout_s=30)
    assert report.released and report.verified, report
