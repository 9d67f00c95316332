"""What a telemetry source is, and the loop every periodic one shares.

A source reads something beside the log (HTTP probes, the process tree, the GPUs) and
publishes an immutable snapshot; the daemon and the scrapes read the last one and never wait
on a collection. :class:`PeriodicSource` owns the part every source had written for itself:
its thread, the wake-up, the interval, and the timing and health of each collection, in
node_exporter's shape (``collector.go``'s ``execute``). A collection that raises is recorded
as unhealthy and logged; it never ends the thread or reaches the daemon.

A source's snapshot is a frozen dataclass with ``taken_at`` (wall time) and ``health``
(:class:`CollectorHealth`); the base fills both. The registry of sources is
``telemetry/registry.py``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from exporter.telemetry.health import CollectorHealth

if TYPE_CHECKING:
    from exporter.config import Config
    from exporter.exposition import Family
    from exporter.telemetry.processes import Members

log = logging.getLogger(__name__)


class Reading(Protocol):
    """A source's snapshot, as the daemon forwards it and the metrics read it."""

    @property
    def taken_at(self) -> float | None: ...

    @property
    def health(self) -> CollectorHealth: ...


class Host(Protocol):
    """What a source may ask of the daemon it serves (supervisor/host.py answers it); its
    calls come from the source's thread."""

    @property
    def config(self) -> Config: ...

    def wake(self) -> None:
        """Look at news now (a new probe result)."""

    def scheduler_quiet(self) -> bool:
        """Whether the scheduler has logged no batch line for a while."""

    def attempt_members(self) -> Members | None:
        """The current attempt's launcher and live members; None between attempts."""


class Source(Protocol):
    """One telemetry source. ``name`` labels its health (``collector``) and keys its snapshot
    in the daemon's ``Snapshot.sources``; ``build`` wires it to the daemon it serves (``built``:
    the sources built before it, by name); ``families`` renders one of its snapshots, or what
    it shows with none (None), purely, at scrape time."""

    name: ClassVar[str]

    @classmethod
    def build(cls, host: Host, built: Mapping[str, Source]) -> Source: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def snapshot(self) -> Reading: ...

    @staticmethod
    def families(snapshot: Any) -> list[Family]: ...


S = TypeVar("S", bound=Reading)


class PeriodicSource(Generic[S]):
    """A source that collects every ``interval_s`` in its own thread (sooner on
    :meth:`request`), one collection at a time, and publishes each snapshot with its health.

    Subclasses say how to read (:meth:`_read`) and what stands after a failed read
    (:meth:`_failed`); ``expected`` names the errors of the world they read (a vanished
    /proc, an NVML error), logged as one line, where anything else is a bug and is logged
    with its traceback. ``join_s`` bounds the wait for a collection in flight at stop;
    ``busy_wait_s`` bounds how long :meth:`collect` waits for one (None: as long as it runs).
    """

    name: ClassVar[str]
    expected: ClassVar[tuple[type[Exception], ...]] = ()

    def __init__(
        self,
        initial: S,
        interval_s: float,
        *,
        join_s: float = 10.0,
        busy_wait_s: float | None = None,
        on_snapshot: Callable[[], None] = lambda: None,
    ) -> None:
        self._snapshot = initial
        self._interval_s = interval_s
        self._join_s = join_s
        self._busy_wait_s = busy_wait_s
        self._on_snapshot = on_snapshot
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._collecting = threading.Lock()  # one collection at a time, and none once closed
        self._busy_since: float | None = None  # monotonic start of the collection in flight
        self._threads: list[threading.Thread] = []

    # -- lifecycle --

    def start(self) -> None:
        self._spawn(self._run, f"sentinel-{self.name}")

    def stop(self) -> None:
        """Stop and join the threads, then release what collections use; never raises."""
        self._stopping.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(self._join_s)
        stuck = [thread.name for thread in self._threads if thread.is_alive()]
        if stuck:
            log.warning("%s: threads %s are stuck in a collection; left behind", self.name, stuck)
        elif self._collecting.acquire(timeout=self._join_s):
            try:
                self._close()
            finally:
                self._collecting.release()

    def request(self) -> None:
        """Collect now rather than at the next interval."""
        self._wake.set()

    # -- reading --

    def snapshot(self) -> S:
        return self._snapshot

    def collect(self) -> S:
        """Collect now on the caller's thread, after the collection in flight if any, and
        publish; returns the last snapshot. A stopped source collects no more."""
        timeout = -1 if self._busy_wait_s is None else self._busy_wait_s
        if self._stopping.is_set() or not self._collecting.acquire(timeout=timeout):
            return self._snapshot
        try:
            if not self._stopping.is_set():
                self._collect_once()
        finally:
            self._collecting.release()
        return self._snapshot

    def busy_for(self) -> float | None:
        """How long the collection in flight has been running; None when none is."""
        since = self._busy_since
        return None if since is None else time.monotonic() - since

    # -- what a source says --

    def _read(self, previous: S) -> S | None:
        """One reading (``taken_at`` and ``health`` are filled in after); None when there is
        nothing to read, and the last snapshot stands as it is."""
        raise NotImplementedError

    def _failed(self, previous: S, error: Exception) -> S:
        """What stands after a failed read: by default the last readings."""
        return previous

    def _pause_s(self) -> float:
        """How long to wait before the next collection."""
        return self._interval_s

    def _close(self) -> None:
        """Release what the collections use, once none runs (after stop)."""

    # -- the shared part --

    def _spawn(self, target: Callable[..., None], name: str, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _run(self) -> None:
        while not self._stopping.is_set():
            self.collect()
            self._wake.wait(self._pause_s())
            self._wake.clear()

    def _collect_once(self) -> None:
        previous = self._snapshot
        started = self._busy_since = time.monotonic()
        try:
            reading = self._read(previous)
            failure = None
        except Exception as error:  # a failed collection is its health, never the daemon's
            reading, failure = self._failed(previous, error), error
        finally:
            self._busy_since = None
        if reading is None:
            return
        duration, now = time.monotonic() - started, time.time()
        if failure is None:
            health = CollectorHealth(True, duration, now)
        else:
            last = previous.health.last_success_time
            health = CollectorHealth(False, duration, last, self._describe(failure))
        self._publish(replace(reading, taken_at=now, health=health), previous, failure)

    def _describe(self, error: Exception) -> str:
        if isinstance(error, self.expected):
            return str(error)
        return f"{type(error).__name__}: {error}"

    def _publish(self, snapshot: S, previous: S, failure: Exception | None) -> None:
        self._snapshot = snapshot
        health, before = snapshot.health, previous.health
        if failure is not None and health.error != before.error:
            # A bug gets its traceback, the world's failures one line; each once per change.
            trace = None if isinstance(failure, self.expected) else failure
            log.warning("%s collection failed: %s", self.name, health.error, exc_info=trace)
        elif health.success and not before.success and previous.taken_at:
            log.info("%s collection recovered", self.name)
        self._on_snapshot()
