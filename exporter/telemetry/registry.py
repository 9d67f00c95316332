"""The telemetry sources every daemon runs, and the set of them built for one daemon.

Adding a source is one module (a :class:`~exporter.telemetry.source.Source`, usually a
``PeriodicSource``, with its snapshot and its families) and one line of ``SOURCES``; the daemon
starts, stops and snapshots it with the others, and the metrics render it. The registry sits
apart from ``source.py`` because it imports every source, and every source imports that.
"""

from __future__ import annotations

from collections.abc import Mapping

from exporter.telemetry.gpu import GpuCollector
from exporter.telemetry.probes import ProbeCollector
from exporter.telemetry.processes import ProcessCollector
from exporter.telemetry.source import Host, Reading, Source

# In build order: a source may use those before it (the GPUs put memory on the process roles).
SOURCES: tuple[type[Source], ...] = (ProbeCollector, ProcessCollector, GpuCollector)


class Sources:
    """The registered sources built for one daemon, started, stopped and snapshotted
    together. The daemon uses two by type: the probes (readiness, hangs) and the GPUs (their
    release before a relaunch); the rest it only forwards into its Snapshot."""

    def __init__(self, built: Mapping[str, Source]) -> None:
        self._built = dict(built)

    @classmethod
    def build(cls, host: Host, given: Mapping[str, Source] | None = None) -> Sources:
        """Every registered source, wired to ``host``; a source in ``given`` (a test's, with
        its own timeouts) stands in for the registered one of its name."""
        built: dict[str, Source] = {}
        for source in SOURCES:
            built[source.name] = (given or {}).get(source.name) or source.build(host, built)
        return cls(built)

    def __getitem__(self, name: str) -> Source:
        return self._built[name]

    @property
    def probes(self) -> ProbeCollector:
        return self._built[ProbeCollector.name]

    @property
    def gpus(self) -> GpuCollector:
        return self._built[GpuCollector.name]

    def start(self) -> None:
        for source in self._built.values():
            source.start()

    def stop(self) -> None:
        for source in self._built.values():
            source.stop()

    def snapshots(self) -> dict[str, Reading]:
        """Each source's last snapshot, by name: what ``Snapshot.sources`` carries."""
        return {name: source.snapshot() for name, source in self._built.items()}
