"""Figure 2: line-to-metric latency, and the idle CPU of the process that does it.

Ours: bench/metrics_proc.py pipeline, a process running the daemon's pieces: LogTailer
(inotify) -> LogReader -> AttemptProgress under the daemon's callback, and
exporter.metrics.serve. This process appends one SGLang decode line at a time (O_APPEND,
one write) with a new `#queue-req` value and scrapes /metrics (reused httpx client, back to
back) until `sglang_sentinel_queued_requests` shows it. Latency: from just before the write
to the end of the first scrape that shows the value; so it includes up to one scrape's
duration (~1-2 ms) of measurement granularity. Appends come at a steady pace (every
APPEND_EVERY_S after the last became visible); between them the pipeline is idle, as it is
between SGLang's decode lines.

Idle CPU: the same process over IDLE_S seconds with no appends and no scrapes, from the
on-CPU nanoseconds of its threads (/proc/PID/task/*/schedstat).

mtail: the same measurement against `mtail --logs FILE` (default 250 ms poll) and its
/metrics, with fewer samples since each takes ~125 ms.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import (
    HOST,
    PYTHON,
    REPO,
    cpu_seconds_precise,
    emit,
    free_port,
    note,
    peer_binary,
    percentile,
    start,
    wait_http,
)

APPEND_EVERY_S = 0.05  # mean pause between a line becoming visible and the next append
VISIBLE_TIMEOUT_S = 5.0
IDLE_S = 60.0


def decode_line(value: int) -> bytes:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    return (
        f"[{stamp} TP0] Decode batch, #running-req: 3, #full token: 2411, full token usage: 0.01, "
        "mamba num: 3, mamba usage: 0.38, accept len: 3.21, accept rate: 0.80, cuda graph: True, "
        f"gen throughput (token/s): 96.42, #queue-req: {value}\n"
    ).encode()


def value_of(body: str, metric: str) -> float | None:
    """The value of an unlabelled (or mtail's prog-labelled) sample of ``metric``."""
    for line in body.splitlines():
        if line.startswith(metric) and line[len(metric) : len(metric) + 1] in (" ", "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def measure(
    url: str, metric: str, log: Path, samples: int, first: int, pause_s: float = APPEND_EVERY_S
) -> list[float]:
    """Append ``samples`` lines and time each until /metrics shows it; seconds each.

    The pause before each append is drawn uniformly from [0, 2 * pause_s): a fixed pause
    would lock the appends in phase with a peer's poll timer and measure one point of it.
    """
    rng = random.Random(first)
    latencies = []
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    try:
        with httpx.Client(trust_env=False, timeout=5.0) as client:
            for value in range(first, first + samples):
                line = decode_line(value)
                started = time.perf_counter()
                os.write(fd, line)
                deadline = started + VISIBLE_TIMEOUT_S
                while True:
                    seen = value_of(client.get(url).text, metric)
                    now = time.perf_counter()
                    if seen == value:
                        latencies.append(now - started)
                        break
                    if now > deadline:
                        raise RuntimeError(f"{url}: {metric} never showed {value} (last {seen})")
                time.sleep(rng.uniform(0, 2 * pause_s))
    finally:
        os.close(fd)
    return latencies


def main(quick: bool = False) -> None:
    samples = 60 if quick else 300
    mtail_samples = 20 if quick else 100
    idle_s = 15.0 if quick else IDLE_S
    with tempfile.TemporaryDirectory(prefix="sentinel-bench-latency-") as tmp:
        ours_log = Path(tmp) / "ours" / "attempt.log"
        ours_log.parent.mkdir()
        ours_log.write_bytes(decode_line(0))
        port = free_port()
        ours = start(
            [PYTHON, "-m", "bench.metrics_proc", "pipeline", str(ours_log), str(port)],
            "metrics_proc pipeline",
            cwd=REPO,
        )
        mtail = None
        mtail_log = Path(tmp) / "mtail" / "sglang.log"
        mtail_log.parent.mkdir()
        mtail_log.write_bytes(b"")
        binary = peer_binary("mtail")
        try:
            url = f"http://{HOST}:{port}/metrics"
            wait_http(url, child=ours)
            measure(url, "sglang_sentinel_queued_requests", ours_log, 5, 1000)  # warm-up
            lat = [
                s * 1000
                for s in measure(url, "sglang_sentinel_queued_requests", ours_log, samples, 1)
            ]
            p50, p99 = percentile(lat, 50), percentile(lat, 99)
            note(
                f"ours: {samples} appends: p50 {p50:.2f} ms, p99 {p99:.2f} ms, "
                f"max {max(lat):.2f} ms"
            )
            mtail_p50 = mtail_p99 = None
            if binary:
                mport = free_port()
                mtail = start(
                    [
                        binary,
                        "--progs",
                        str(REPO / "bench" / "mtail"),
                        "--logs",
                        str(mtail_log),
                        "--address",
                        HOST,
                        "--port",
                        str(mport),
                        "--logtostderr",
                    ],
                    "mtail",
                )
                murl = f"http://{HOST}:{mport}/metrics"
                wait_http(murl, child=mtail)
                measure(murl, "sglang_queued_requests", mtail_log, 3, 1000)  # warm-up
                mlat = [
                    s * 1000
                    for s in measure(
                        murl, "sglang_queued_requests", mtail_log, mtail_samples, 1, pause_s=0.25
                    )
                ]
                mtail_p50, mtail_p99 = percentile(mlat, 50), percentile(mlat, 99)
                note(
                    f"mtail (default 250 ms poll): {mtail_samples} appends: p50 "
                    f"{mtail_p50:.1f} ms, p99 {mtail_p99:.1f} ms"
                )
            # Idle: no appends, no scrapes, both processes at once.
            time.sleep(2.0)
            before = cpu_seconds_precise(ours.pid)
            mtail_before = cpu_seconds_precise(mtail.pid) if mtail else None
            time.sleep(idle_s)
            idle = (cpu_seconds_precise(ours.pid) - before) / idle_s * 100
            mtail_idle = (
                (cpu_seconds_precise(mtail.pid) - mtail_before) / idle_s * 100 if mtail else None
            )
            note(
                f"idle CPU over {idle_s:.0f} s: ours {idle:.3f}% of a core"
                + (f", mtail {mtail_idle:.3f}%" if mtail else "")
            )
        finally:
            ours.stop()
            if mtail:
                mtail.stop()
    peer = "mtail 3.0.0~rc50, default 250 ms poll" if mtail_p50 is not None else None
    emit(
        "line_to_metric_p50",
        p50,
        "ms",
        "none (context for p99)",
        True,
        peer,
        mtail_p50,
        p50 / mtail_p50 if mtail_p50 else None,
    )
    emit(
        "line_to_metric_p99",
        p99,
        "ms",
        "< 10 ms",
        p99 < 10.0,
        peer,
        mtail_p99,
        p99 / mtail_p99 if mtail_p99 else None,
    )
    emit(
        "line_to_metric_idle_cpu",
        idle,
        "% of one core",
        "< 0.1%",
        idle < 0.1,
        "mtail (idle, same window)" if mtail else None,
        mtail_idle,
        idle / mtail_idle if mtail_idle else None,
    )
