"""The daemon's own probe endpoints, served beside /metrics: ``/healthz`` (liveness),
``/readyz`` (readiness) and ``/status`` (JSON). Pure: each answer is a function of one
:class:`DaemonStatus`, which the daemon builds under its lock.

Liveness is the daemon's, not SGLang's: its main loop ticked recently (the same heartbeat
that pings the systemd watchdog). It stays 200 while SGLang loads, crashes, backs off and
relaunches, so a liveness probe never kills a pod that is working on its server.
Readiness is SGLang's: serving, and its health probes passing (on a non-leader rank of a
multi-node group: its schedulers started and alive).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from exporter.attempt.states import ServerState
from exporter.exposition import Response
from exporter.termination import FailureReport

__all__ = [
    "DaemonStatus",
    "Heartbeat",
    "healthz",
    "liveness_limit_s",
    "readyz",
    "routes",
    "status",
]

_TEXT = "text/plain; charset=utf-8"
_JSON = "application/json"


class Heartbeat:
    """When the main loop last ticked. Written by the loop, read by the server's threads
    (one float: no lock needed)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._at = clock()

    def beat(self) -> None:
        self._at = self._clock()

    def age_s(self) -> float:
        return max(0.0, self._clock() - self._at)


def liveness_limit_s(stop_grace_s: float) -> float:
    """How long the loop may go without a tick and still be alive: stopping an attempt
    blocks it for up to the grace plus the SIGKILL wait, then up to the grace again while
    the GPUs release their memory; a minute on top keeps a busy host from a false kill."""
    return 2 * stop_grace_s + 60.0


@dataclass(frozen=True)
class DaemonStatus:
    state: ServerState
    attempt: int | None
    profile: str | None
    nnodes: int | None  # None: a placeholder in the config (never in a rendered one)
    node_rank: int | None
    group: str  # policy.group: "exit" or "relaunch"
    decision: str | None  # the last decision, one sentence
    last_failure: FailureReport | None
    loop_age_s: float
    loop_limit_s: float

    @property
    def alive(self) -> bool:
        return self.loop_age_s <= self.loop_limit_s

    @property
    def ready(self) -> bool:
        return self.state is ServerState.READY


def healthz(view: DaemonStatus) -> Response:
    if view.alive:
        return Response(200, _TEXT, b"ok\n")
    stalled = f"the main loop has not ticked for {view.loop_age_s:.0f} s\n"
    return Response(503, _TEXT, stalled.encode())


def readyz(view: DaemonStatus) -> Response:
    if view.ready:
        return Response(200, _TEXT, b"ready\n")
    return Response(503, _TEXT, f"not ready: {view.state.value}\n".encode())


def status(view: DaemonStatus) -> Response:
    document = {
        "state": view.state.value,
        "ready": view.ready,
        "alive": view.alive,
        "attempt": view.attempt,
        "profile": view.profile,
        "nnodes": view.nnodes,
        "node_rank": view.node_rank,
        "group": view.group,
        "decision": view.decision,
        "last_failure": view.last_failure.to_json() if view.last_failure else None,
        "loop_age_s": round(view.loop_age_s, 3),
    }
    return Response(200, _JSON, (json.dumps(document) + "\n").encode())


def routes(view: Callable[[], DaemonStatus]) -> dict[str, Callable[[], Response]]:
    """The paths served beside /metrics, each built from a fresh status."""
    return {
        "/healthz": lambda: healthz(view()),
        "/readyz": lambda: readyz(view()),
        "/status": lambda: status(view()),
    }
