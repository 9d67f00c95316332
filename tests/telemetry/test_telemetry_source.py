"""The telemetry source base and registry: one loop and one health record for every source
(exporter/telemetry/source.py, exporter/telemetry/registry.py)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from types import SimpleNamespace

from exporter.attempt.snapshot import Snapshot
from exporter.attempt.states import ServerState
from exporter.metrics import families
from exporter.telemetry.health import NEVER_COLLECTED, CollectorHealth
from exporter.telemetry.registry import SOURCES, Sources
from exporter.telemetry.source import PeriodicSource
from tests.conftest import exposed_samples
from tests.telemetry.test_gpu import wait_for


@dataclass(frozen=True)
class Count:
    taken_at: float = 0.0
    value: int = 0
    health: CollectorHealth = NEVER_COLLECTED


class Counting(PeriodicSource[Count]):
    """Reads whatever its script says next: a number, an exception to raise, or None."""

    name = "counting"
    expected = (OSError,)

    def __init__(self, script: list, interval_s: float = 60.0) -> None:
        self.published = 0
        super().__init__(Count(), interval_s, join_s=2.0, on_snapshot=self._count_published)
        self.script = script
        self.reads = 0
        self.closed = 0

    def _count_published(self) -> None:
        self.published += 1

    def _read(self, previous: Count) -> Count | None:
        self.reads += 1
        step = self.script.pop(0) if self.script else previous.value + 1
        if isinstance(step, Exception):
            raise step
        if step is None:
            return None
        time.sleep(0.01)  # a collection that takes time, for the duration to show it
        # A source's own idea of its health is not what gets published.
        return Count(value=step, health=CollectorHealth(False, 99.0, None, "ignored"))

    def _close(self) -> None:
        self.closed += 1


def test_each_collection_is_timed_and_its_health_recorded_once():
    source = Counting([7])
    before = time.time()
    snap = source.collect()
    assert (snap.value, source.reads, source.published) == (7, 1, 1)
    assert snap.health.success and snap.health.error is None
    assert 0.01 <= snap.health.duration_s < 1.0
    assert before <= snap.health.last_success_time == snap.taken_at <= time.time()
    assert source.snapshot() is snap


def test_a_failing_collection_is_unhealthy_keeps_the_last_readings_and_is_not_fatal():
    source = Counting([1, RuntimeError("boom"), OSError("no /proc")])
    good = source.collect()
    bug = source.collect()
    assert not bug.health.success and bug.health.error == "RuntimeError: boom"
    assert bug.value == 1 and bug.taken_at >= good.taken_at  # the last readings stand
    assert bug.health.last_success_time == good.health.last_success_time
    world = source.collect()  # an expected error is told without its type
    assert world.health.error == "no /proc" and not world.health.success
    assert source.collect().health.success  # and the next one recovers


def test_the_thread_survives_a_failing_collection():
    source = Counting([ValueError("bad"), 5], interval_s=0.01)
    source.start()
    try:
        snap = wait_for(lambda: (s := source.snapshot()).value == 5 and s, "a recovery")
        assert snap.health.success and all(thread.is_alive() for thread in source._threads)
    finally:
        source.stop()


def test_nothing_to_read_leaves_the_last_snapshot_and_its_health_alone():
    source = Counting([3, None])
    first = source.collect()
    assert source.collect() is first and source.published == 1


def test_request_collects_before_the_interval():
    source = Counting([], interval_s=60.0)
    source.start()
    try:
        wait_for(lambda: source.reads == 1, "the first collection")
        source.request()
        wait_for(lambda: source.reads == 2, "the requested collection")
    finally:
        source.stop()


def test_stop_joins_the_thread_closes_once_and_collects_no_more():
    source = Counting([], interval_s=60.0)
    source.start()
    wait_for(lambda: source.reads == 1, "the first collection")
    started = time.monotonic()
    source.stop()
    assert time.monotonic() - started < 1.0  # woken, not left to its 60 s interval
    assert not any(thread.is_alive() for thread in source._threads)
    assert source.closed == 1
    last = source.snapshot()
    assert source.collect() is last and source.reads == 1


def test_collections_from_two_threads_run_one_at_a_time():
    running, overlapped = [0], []

    class Slow(Counting):
        def _read(self, previous: Count) -> Count:
            running[0] += 1
            overlapped.append(running[0] > 1)
            time.sleep(0.05)
            running[0] -= 1
            return Count(value=previous.value + 1)

    source = Slow([])
    threads = [threading.Thread(target=source.collect) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert source.snapshot().value == 3 and not any(overlapped)


# --- the registry ---------------------------------------------------------------------------


def host() -> SimpleNamespace:
    """What a daemon offers its sources (telemetry/source.py's Host)."""
    return SimpleNamespace(
        config=SimpleNamespace(policy=SimpleNamespace(health_interval_s=2.0)),
        wake=lambda: None,
        scheduler_quiet=lambda: True,
        attempt_members=lambda: None,
    )


def test_the_registry_builds_every_source_once_under_its_own_name():
    names = [source.name for source in SOURCES]
    assert len(set(names)) == len(names) == 3
    built = Sources.build(host())
    try:
        for source in SOURCES:
            assert type(built[source.name]) is source
        assert built.probes is built["probes"] and built.gpus is built["gpu"]
        assert list(built.snapshots()) == names
    finally:
        built.stop()


def test_a_given_source_stands_in_for_the_registered_one():
    registered = Sources.build(host())
    mine = registered.probes
    built = Sources.build(host(), {"probes": mine})
    try:
        assert built.probes is mine and built["processes"] is not registered["processes"]
    finally:
        registered.stop()
        built.stop()


def test_the_gpu_source_reads_the_roles_of_the_process_source():
    built = Sources.build(host())
    try:
        assert built.gpus._owned_processes() == {}  # no attempt: no process of ours
    finally:
        built.stop()


def test_every_registered_source_renders_its_part_of_the_snapshot_and_its_health():
    built = Sources.build(host())
    try:
        snapshot = Snapshot(state=ServerState.STOPPED, sources=built.snapshots())
    finally:
        built.stop()
    got = exposed_samples(families(snapshot))
    healths = {labels["collector"] for labels, _ in got["sglang_sentinel_collector_success"]}
    assert healths == {source.name for source in SOURCES}
    for source in SOURCES:  # each renders a snapshot of its own, and none
        assert isinstance(source.families(snapshot.sources[source.name]), list)
        assert isinstance(source.families(None), list)
