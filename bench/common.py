"""What every benchmark shares: the result line, statistics, peers, child processes."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
HOST = "127.0.0.1"  # everything binds here, never to all interfaces


def emit(
    benchmark: str,
    value: float | None,
    unit: str,
    target: str,
    met: bool,
    peer: str | None = None,
    peer_value: float | None = None,
    ratio: float | None = None,
) -> dict:
    """Print one figure as one JSON line on stdout (the only thing bench/run prints there)."""
    record = {
        "benchmark": benchmark,
        "value": _round(value),
        "unit": unit,
        "peer": peer,
        "peer_value": _round(peer_value),
        "ratio": _round(ratio),
        "target": target,
        "met": bool(met),
    }
    print(json.dumps(record), flush=True)
    return record


def _round(value: float | None) -> float | None:
    if value is None or isinstance(value, bool):
        return value
    if value == 0 or not math.isfinite(value):
        return value
    digits = max(0, 3 - math.floor(math.log10(abs(value))))
    return round(value, digits)


def note(text: str) -> None:
    """Human-readable progress and details: stderr, so stdout stays one JSON per line."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), linear interpolation between closest ranks."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def ratio(ours: float | None, peer: float | None) -> float | None:
    if ours is None or peer is None or peer == 0:
        return None
    return ours / peer


# --- peers (Debian packages) ---------------------------------------------------------------

PEERS = {
    "mtail": "mtail",
    "node_exporter": "prometheus-node-exporter",
    "process_exporter": "prometheus-process-exporter",
}


def peer_binary(name: str) -> str | None:
    """The peer's executable, or None when it is not installed (bench/run installs them)."""
    return shutil.which(PEERS[name])


# --- child processes -------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


@dataclass
class Child:
    """A process this benchmark started; only it is ever signalled, by its pid."""

    popen: subprocess.Popen
    name: str

    @property
    def pid(self) -> int:
        return self.popen.pid

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(5)


def start(command: Sequence[str], name: str, **kwargs) -> Child:
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    kwargs.setdefault("stdout", subprocess.DEVNULL)  # stdout is for the JSON lines only
    kwargs.setdefault("stderr", subprocess.DEVNULL)
    kwargs.setdefault("cwd", REPO)
    popen = subprocess.Popen(list(command), **kwargs)
    return Child(popen, name)


def wait_http(url: str, timeout_s: float = 20.0, child: Child | None = None) -> None:
    """Until ``url`` answers 200 (bounded); raises with the reason otherwise."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        if child is not None and child.popen.poll() is not None:
            raise RuntimeError(f"{child.name} exited with {child.popen.returncode}")
        try:
            response = httpx.get(url, timeout=2.0, trust_env=False)
            if response.status_code == 200:
                return
            last = f"HTTP {response.status_code}"
        except httpx.HTTPError as error:
            last = type(error).__name__
        time.sleep(0.05)
    raise RuntimeError(f"{url} not answering after {timeout_s} s: {last}")


def cpu_seconds(pid: int, children: bool = False) -> float:
    """User+system CPU seconds of a process (and optionally its live children)."""
    proc = psutil.Process(pid)
    times = proc.cpu_times()
    total = times.user + times.system
    if children:
        for child in proc.children(recursive=True):
            try:
                t = child.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
    return total


def cpu_seconds_precise(pid: int) -> float:
    """On-CPU time of a process's live threads in nanosecond resolution (/proc schedstat).

    Unlike /proc/PID/stat (10 ms ticks) this resolves idle processes in a minute; it misses
    threads that exited meanwhile, so use it only where none come and go (no requests).
    """
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as handle:
                total += int(handle.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total / 1e9


def rss_bytes(pid: int) -> int:
    return psutil.Process(pid).memory_info().rss


def timed(function: Callable[[], object]) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def machine() -> str:
    return (
        f"{os.cpu_count()} cores, Python {sys.version.split()[0]}, "
        f"load average {os.getloadavg()[0]:.2f} at start"
    )


# --- daemon configs ------------------------------------------------------------------------


def write_daemon_config(
    path: Path,
    module: str,
    *,
    args: Sequence[str] = (),
    env: Sequence[str] = (),
    sections: Sequence[str] = (),
) -> Path:
    """A sentinel config at ``path`` that launches ``python -m module`` from the repo.

    ``args`` and ``env`` are extra lines for [sglang.args] and [sglang.env]; ``sections``
    come after them, before [paths] (state and logs in ``path``'s folder).
    """
    tmp = path.parent
    lines = [
        "[sglang]",
        f"python = {json.dumps(PYTHON)}",
        f"module = {json.dumps(module)}",
        f"workdir = {json.dumps(str(REPO))}",
        'version = "0.5.9"',
        "[sglang.args]",
        'model-path = "/models/Qwen3.6-27B"',
        'host = "127.0.0.1"',
        f"port = {free_port()}",
        "tp-size = 2",
        *args,
        "[sglang.env]",
        f"PYTHONPATH = {json.dumps(str(REPO))}",
        *env,
        *sections,
        "[paths]",
        f"state_dir = {json.dumps(str(tmp / 'state'))}",
        f"log_dir = {json.dumps(str(tmp / 'logs'))}",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path
