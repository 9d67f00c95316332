"""How long the daemon may legitimately block, for the timeouts around it (systemd's
watchdog and stop timeout, Kubernetes' probes and termination grace period).

Read from the daemon's own constants, so that a longer wait in the code fails the tests of
every unit and manifest sized for the old one.
"""

from __future__ import annotations

import inspect

from exporter.supervisor.launch import PORT_WAIT_S
from exporter.supervisor.processes import AttemptProcesses
from exporter.telemetry.probes import HEALTH_TIMEOUT_S
from exporter.telemetry.source import PeriodicSource

KILL_WAIT_S: float = inspect.signature(AttemptProcesses.stop).parameters["kill_wait_s"].default
PROBE_JOIN_S = HEALTH_TIMEOUT_S + 5  # a health request in flight when the daemon stops
# ProcessCollector.stop(): the join every periodic source has unless it sets its own.
PROCESS_SCAN_JOIN_S: float = inspect.signature(PeriodicSource.__init__).parameters["join_s"].default


def longest_loop_stall_s(stop_grace_s: float) -> float:
    """The main loop stops SGLang (the grace, then up to the SIGKILL wait) and waits for
    the port before relaunching, without a tick in between."""
    return stop_grace_s + KILL_WAIT_S + PORT_WAIT_S


def longest_stop_s(stop_grace_s: float) -> float:
    """SIGTERM to exit: a stop arriving mid-restart waits for two stops and the port, then
    for the probe and process-scan threads to end."""
    return 2 * (stop_grace_s + KILL_WAIT_S) + PORT_WAIT_S + PROBE_JOIN_S + PROCESS_SCAN_JOIN_S
