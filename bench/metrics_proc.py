"""A /metrics server in a process of its own, for figures 2 and 4 (the client measuring it
runs in another process, as Prometheus would: no shared GIL).

    python -m bench.metrics_proc pipeline LOG PORT
        The daemon's log pipeline on LOG: LogTailer (inotify) -> LogReader -> AttemptProgress
        under a lock, with the daemon's own callback, and exporter.metrics.serve answering
        from a snapshot taken the daemon's way (progress copied under the lock).
    python -m bench.metrics_proc synthetic RANKS PORT
        The collector fed a fixed synthetic state of RANKS TP ranks / GPUs (pools, memory
        milestones, per-GPU memory and processes, per-rank RSS): the series count grows
        with RANKS. Each scrape still copies the progress as the daemon's snapshot does.

Prints "ready" on stdout once serving; runs until SIGTERM.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections import Counter

from exporter.attempt.attempt_log import AttemptLog
from exporter.attempt.progress import AttemptProgress, RankPools, RuntimeStats, Step
from exporter.attempt.snapshot import Snapshot
from exporter.attempt.states import ServerState
from exporter.identity import ProcessIdentity
from exporter.logs.tailer import LogTailer
from exporter.metrics import serve
from exporter.telemetry.gpu import OURS, GpuDevice, GpuProcess, GpuSnapshot
from exporter.telemetry.health import CollectorHealth
from exporter.telemetry.probes import ProbeResult, ProbeSnapshot
from exporter.telemetry.processes import ProcessInfo, ProcessSnapshot

GIB = 1 << 30
HOST = "127.0.0.1"
# One synthetic rank's memory pools, and the free memory at each start-up milestone, in GiB.
POOLS_GIB = {
    "kv": 11.4,
    "draft_kv": 0.72,
    "mamba_conv": 0.01,
    "mamba_ssm": 0.63,
    "mamba_intermediate_ssm": 2.53,
    "mamba_intermediate_conv": 0.05,
}
AVAILABLE_GIB = {
    "before_weights": 46.86,
    "after_weights": 21.3,
    "after_pools": 6.67,
    "after_graphs": 6.08,
    "ready": 4.63,
}


class Follower:
    """Daemon._follow's on_lines and what it keeps: the attempt's AttemptLog fed under a
    lock, and the matched/unknown line counts."""

    def __init__(self, version: str = "0.5.9") -> None:
        self.log = AttemptLog(version)
        self.lock = threading.Lock()
        self.counts: Counter[bool] = Counter()

    def on_lines(self, lines: list[str]) -> None:
        with self.lock:
            fed = self.log.feed(lines)
            self.counts[True] += fed.matched
            self.counts[False] += fed.unknown


def pipeline(log_path: str) -> tuple[LogTailer, callable]:
    follower = Follower()

    def snapshot() -> Snapshot:  # Daemon.snapshot, without the telemetry collectors
        with follower.lock:
            return Snapshot(
                state=ServerState.READY,
                profile="default",
                profile_index=0,
                attempts_total=1,
                progress=follower.log.progress.copy(),
                log_lines=dict(follower.counts),
                last_line_time=follower.log.last_line_at,
                last_batch_time=follower.log.last_batch_at,
            )

    return LogTailer(log_path, follower.on_lines, start_at_end=False), snapshot


def gib(sizes: dict[str, float]) -> dict[str, int]:
    """Sizes given in GiB, in bytes."""
    return {name: round(size * GIB) for name, size in sizes.items()}


def synthetic_state(ranks: int) -> Snapshot:
    """A daemon's state on a machine with ``ranks`` GPUs, one TP rank each."""
    now = time.time()
    progress = AttemptProgress(
        step=Step.SERVING,
        ready=True,
        max_total_num_tokens=373672,
        max_running_requests=48,
        runtime=RuntimeStats(3, 0, 0.12, 96.4, 0),
        sglang_format="ServerArgs",
    )
    health = CollectorHealth(True, 0.002, now, None)
    processes = []
    devices = []
    for rank in range(ranks):
        progress.ranks[rank] = RankPools(
            kv_tokens=373672,
            weights_bytes=round(25.56 * GIB),
            mamba_slots=48,
            pools=gib(POOLS_GIB),
            available=gib(AVAILABLE_GIB),
        )
        pid = 100_000 + rank
        processes.append(
            ProcessInfo(
                ProcessIdentity(pid, now), "scheduler", str(rank), 9 * GIB, 120.0, False, False
            )
        )
        devices.append(
            GpuDevice(
                index=rank,
                name="NVIDIA RTX A6000",
                uuid=f"GPU-{rank:08x}-0000-0000-0000-000000000000",
                total_bytes=48 * GIB,
                used_bytes=45 * GIB,
                free_bytes=3 * GIB,
                reserved_bytes=GIB // 2,
                processes=(GpuProcess(pid, 44 * GIB, OURS, "scheduler", str(rank)),),
            )
        )
    processes.append(
        ProcessInfo(ProcessIdentity(99_999, now), "launcher", "", GIB, 30.0, False, False)
    )
    probes = ProbeSnapshot(
        taken_at=now,
        results={
            name: ProbeResult(True, 200, 0.001) for name in ("health", "server_info", "loads")
        },
        max_total_num_tokens=373672,
        running_requests=3,
        waiting_requests=0,
        health=health,
    )
    return Snapshot(
        state=ServerState.READY,
        profile="default",
        profile_index=0,
        attempts_total=3,
        restarts={"pool_init_oom": 2},
        failures={"pool_init_oom": 2},
        last_failure_time={"pool_init_oom": now - 600},
        startup_duration_s=117.0,
        progress=progress,
        log_lines={True: 123456, False: 7890},
        last_line_time=now,
        last_batch_time=now,
        sources={
            "probes": probes,
            "processes": ProcessSnapshot(now, tuple(processes), health),
            "gpu": GpuSnapshot(now, CollectorHealth(True, 0.003, now), devices=tuple(devices)),
        },
    )


def main(argv: list[str]) -> int:
    mode, arg, port = argv[0], argv[1], int(argv[2])
    lock = threading.Lock()
    tailer = None
    if mode == "pipeline":
        tailer, snapshot = pipeline(arg)
        tailer.start()
    elif mode == "synthetic":
        state = synthetic_state(int(arg))

        def snapshot() -> Snapshot:  # copied under a lock, as the daemon does per scrape
            with lock:
                progress = state.progress.copy()
            return Snapshot(**{**state.__dict__, "progress": progress})

    else:
        raise SystemExit(f"unknown mode {mode}")
    server, _thread = serve(HOST, port, snapshot)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    while not stop.wait(3600):
        pass
    server.shutdown()
    if tailer is not None:
        tailer.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
