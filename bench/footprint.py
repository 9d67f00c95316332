"""Figure 5: the idle footprint of `sglang-sentinel run` supervising a ready server.

The daemon runs as a subprocess (`.venv/bin/sglang-sentinel run --config ...`, every
collector on: probes every 5 s, process scans, NVML (absent here), the member scan) and
supervises bench/fake_server.py, a scripted stand-in for a ready, idle SGLang 0.5.9 (not
the real SGLang). Once the daemon reports the server up, its RSS and CPU are taken over
WINDOW_S seconds; node_exporter (default collectors) and process-exporter (every process
grouped by name) run alongside over the same window. All three are scraped every
SCRAPE_EVERY_S (Prometheus' default interval), as they would be in service.

CPU is user+system time from /proc/PID/stat (10 ms ticks: resolution 10 ms / WINDOW_S,
0.017% over 60 s); RSS is the largest of one sample a second.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import httpx

from bench.common import (
    HOST,
    REPO,
    cpu_seconds,
    emit,
    free_port,
    note,
    peer_binary,
    rss_bytes,
    start,
    wait_http,
    write_daemon_config,
)

WINDOW_S = 60.0
SCRAPE_EVERY_S = 15.0
RSS_TARGET_MB = 40.0
CPU_TARGET = 0.1
PEER_LABELS = {  # in the order their figures are printed
    "node_exporter": "node_exporter 1.5.0",
    "process_exporter": "process-exporter 0.7.10 (all processes by name)",
}
PROCESS_EXPORTER_CONFIG = """process_names:
  - name: "{{.Comm}}"
    cmdline:
    - '.+'
"""


def write_config(tmp: Path, metrics_port: int) -> Path:
    return write_daemon_config(
        tmp / "footprint.toml",
        "bench.fake_server",
        sections=[
            "[policy]",
            "startup_timeout_s = 120.0",
            "[metrics]",
            f'listen = "{HOST}:{metrics_port}"',
        ],
    )


def wait_up(url: str, child, timeout_s: float = 120.0) -> float:
    started = time.monotonic()
    with httpx.Client(trust_env=False, timeout=5.0) as client:
        while time.monotonic() - started < timeout_s:
            if child.popen.poll() is not None:
                raise RuntimeError(f"the daemon exited with {child.popen.returncode}")
            try:
                if "sglang_sentinel_server_up 1.0" in client.get(url).text:
                    return time.monotonic() - started
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
    raise RuntimeError("the supervised server never became ready")


def main(quick: bool = False) -> None:
    window = 20.0 if quick else WINDOW_S
    with (
        tempfile.TemporaryDirectory(prefix="sentinel-bench-footprint-") as tmp_name,
        tempfile.TemporaryFile("w+") as daemon_err,
    ):
        tmp = Path(tmp_name)
        metrics_port = free_port()
        config = write_config(tmp, metrics_port)
        daemon = start(
            [str(REPO / ".venv" / "bin" / "sglang-sentinel"), "run", "--config", str(config)],
            "sglang-sentinel run",
            stderr=daemon_err,
        )
        peers = {}
        try:
            url = f"http://{HOST}:{metrics_port}/metrics"
            wait_http(url, child=daemon, timeout_s=60)
            took = wait_up(url, daemon)
            note(f"daemon up and the server ready after {took:.1f} s")
            urls = {"daemon": url}
            if peer_binary("node_exporter"):
                port = free_port()
                peers["node_exporter"] = start(
                    [
                        peer_binary("node_exporter"),
                        f"--web.listen-address={HOST}:{port}",
                        "--log.level=error",
                    ],
                    "node_exporter",
                )
                urls["node_exporter"] = f"http://{HOST}:{port}/metrics"
            if peer_binary("process_exporter"):
                port = free_port()
                (tmp / "process-exporter.yml").write_text(PROCESS_EXPORTER_CONFIG)
                peers["process_exporter"] = start(
                    [
                        peer_binary("process_exporter"),
                        "-config.path",
                        str(tmp / "process-exporter.yml"),
                        "-web.listen-address",
                        f"{HOST}:{port}",
                    ],
                    "process-exporter",
                )
                urls["process_exporter"] = f"http://{HOST}:{port}/metrics"
            for name, child in peers.items():
                wait_http(urls[name], child=child)
            pids = {"daemon": daemon.pid, **{name: child.pid for name, child in peers.items()}}
            time.sleep(3.0)  # past start-up
            rss = {name: 0 for name in pids}
            cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
            started = time.monotonic()
            next_scrape = started
            with httpx.Client(trust_env=False, timeout=10.0) as client:
                while (now := time.monotonic()) - started < window:
                    if now >= next_scrape:
                        for name in pids:
                            client.get(urls[name])
                        next_scrape += SCRAPE_EVERY_S
                    for name, pid in pids.items():
                        rss[name] = max(rss[name], rss_bytes(pid))
                    time.sleep(1.0)
            elapsed = time.monotonic() - started
            cpu = {
                name: (cpu_seconds(pid) - cpu0[name]) / elapsed * 100 for name, pid in pids.items()
            }
            note(
                f"over {elapsed:.0f} s: "
                + ", ".join(
                    f"{name} {rss[name] / 2**20:.1f} MB RSS, {cpu[name]:.3f}% CPU" for name in pids
                )
            )
        except Exception:
            daemon_err.seek(0)
            note("the daemon's stderr:\n" + daemon_err.read()[-3000:])
            raise
        finally:
            for child in peers.values():
                child.stop()
            daemon.stop(timeout_s=60)
    rss_mb = rss["daemon"] / 2**20
    # One record per installed peer; without any, the daemon's own figures alone.
    present = [peer for peer in PEER_LABELS if peer in rss] or [None]
    for peer in present:
        emit(
            f"idle_rss_vs_{peer}" if peer else "idle_rss",
            rss_mb,
            "MB",
            f"< {RSS_TARGET_MB:g} MB",
            rss_mb < RSS_TARGET_MB,
            PEER_LABELS.get(peer),
            rss[peer] / 2**20 if peer else None,
            rss["daemon"] / rss[peer] if peer else None,
        )
    for peer in present:
        emit(
            f"idle_cpu_vs_{peer}" if peer else "idle_cpu",
            cpu["daemon"],
            "% of one core",
            f"< {CPU_TARGET:g}%",
            cpu["daemon"] < CPU_TARGET,
            PEER_LABELS.get(peer),
            cpu[peer] if peer else None,
            cpu["daemon"] / cpu[peer] if peer and cpu[peer] else None,
        )
