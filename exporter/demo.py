"""The demo: the real SGLang on this machine's CPU, under the daemon, failing and recovering,
then not failing at all.

Its config asks for a model whose weights (real safetensors shards, written locally) do not
fit the static memory budget (--mem-fraction-static 0.005). First with the pre-flight off:
the first attempt loads its weights and dies for real with SGLang's "Not enough memory"
pool-sizing error; the daemon classifies it as pool_init_oom, sees that retrying the same
command is pointless, and falls back to the next profile, which serves. Then the same config
with the pre-flight on: the planner predicts the failure before launch and the first launch
serves with the changed fraction.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from exporter.attempt.states import ServerState
from exporter.config import Config, load_config
from exporter.history import History
from exporter.sglang_cpu.install import SGLangRuntime
from exporter.sglang_cpu.models import write_tiny_model
from exporter.supervisor.daemon import Daemon

DEMO_CONFIG = """\
# The demo's config, written by `sglang-sentinel demo`. A valid daemon config:
# `sglang-sentinel run --config {path}` runs the same thing.

[sglang]
python = "{python}"
version = "{version}"

[sglang.args]
model-path = "{model}"
device = "cpu"                 # the weights: safetensors shards of random values, written here
host = "127.0.0.1"
port = {port}
max-total-tokens = 4096        # on a CPU SGLang sizes the KV pool from host RAM: cap it
mem-fraction-static = 0.005    # far too small: the weights alone exceed the static budget

[sglang.env]
SGLANG_USE_CPU_ENGINE = "1"
LD_LIBRARY_PATH = "{library_path}"
TMPDIR = "{temp_dir}"               # SGLang names its IPC sockets after temp files it leaves

[[profiles]]
name = "as-configured"

[[profiles]]
name = "more-static-memory"
set = {{ mem-fraction-static = 0.5 }}

[policy]
preflight = "{preflight}"           # "off": launch as configured; "fix": plan it first
startup_timeout_s = 300.0
startup_stall_s = 120.0
backoff_base_s = 1.0
backoff_cap_s = 10.0
max_attempts = 4
window_s = 600.0
stop_grace_s = 15.0

[metrics]
listen = "127.0.0.1:{metrics_port}"

[paths]
state_dir = "state"
log_dir = "logs"
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_demo_config(
    runtime: SGLangRuntime, models: Path, workdir: Path, metrics_port: int, preflight: str
) -> Config:
    """Write the tiny model and the demo's config into ``workdir``; return it loaded."""
    model = write_tiny_model(models / "qwen2-large", runtime, size="large")
    temp_dir = workdir / "tmp"
    temp_dir.mkdir(parents=True, exist_ok=True)
    path = workdir / "demo.toml"
    path.write_text(
        DEMO_CONFIG.format(
            path=path,
            python=runtime.python,
            version=runtime.version,
            model=model,
            port=free_port(),
            library_path=runtime.env.get("LD_LIBRARY_PATH", ""),
            temp_dir=temp_dir,
            metrics_port=metrics_port,
            preflight=preflight,
        )
    )
    return load_config(path)


def run_until_settled(daemon: Daemon, timeout_s: float, poll: Callable[[], None]) -> ServerState:
    """Run the daemon in a thread until it serves or gives up (or time runs out), then stop it."""
    thread = threading.Thread(target=daemon.run, name="sentinel-daemon", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    settled = daemon.state
    try:
        while time.monotonic() < deadline:
            poll()
            running = thread.is_alive()
            settled = daemon.state  # read after: a loop that ended has its last state
            if settled in (ServerState.READY, ServerState.GAVE_UP) or not running:
                break
            time.sleep(0.5)
    finally:
        daemon.request_stop()
        thread.join(timeout=120)
    return settled


def summary(daemon: Daemon, settled: ServerState, metrics_url: str) -> dict:
    """One run of `demo --once --json`: every attempt with its pre-flight, the pools of the
    one that served, and how long from the first launch to serving."""
    snapshot = daemon.snapshot()
    records = History(daemon.config.paths.state_dir).read().attempts
    served = [r.ready_at for r in records if r.ready_at is not None]
    attempts = [
        {
            "attempt": record.attempt,
            "profile": record.profile,
            "failure_class": record.failure_class,
            "root_cause_line": record.root_cause_line,
            "diagnosis": record.diagnosis,
            "decision": record.decision,
            "exit_code": record.exit_code,
            "startup_s": record.startup_s,
            "log": record.log,
            "preflight": record.preflight,
        }
        for record in records
    ]
    pools = {}
    if snapshot.progress is not None:
        pools = {
            "max_total_num_tokens": snapshot.progress.max_total_num_tokens,
            "ranks": {
                str(rank): {
                    "kv_cache_tokens": pool.kv_tokens,
                    "weights_bytes": pool.weights_bytes,
                    "memory_pool_bytes": pool.pools,
                    "device_available_bytes": pool.available,
                }
                for rank, pool in snapshot.progress.ranks.items()
            },
        }
    first_launch = records[0].started_at if records else None
    return {
        "preflight": daemon.config.policy.preflight,
        "outcome": settled.value,
        "gave_up_reason": daemon.gave_up_reason,
        "metrics_url": metrics_url,
        "launches": len(records),
        "first_launch_to_serving_s": served[0] - first_launch if served and first_launch else None,
        "attempts": attempts,
        "pools": pools,
    }


def comparison(runs: list[dict]) -> dict:
    """Both runs and what the pre-flight saved: the launches and the seconds from the first
    launch to serving that the run without it spent more."""
    off, fix = runs[0], runs[-1]
    saved = None
    if off["first_launch_to_serving_s"] is not None and fix["first_launch_to_serving_s"]:
        saved = off["first_launch_to_serving_s"] - fix["first_launch_to_serving_s"]
    return {
        "runs": runs,
        "launches_saved": off["launches"] - fix["launches"],
        "seconds_saved": saved,
    }


def to_json(data: dict) -> str:
    return json.dumps(data, indent=2)
