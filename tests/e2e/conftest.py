"""The real SGLang 0.5.9 on this machine's CPU, installed once into the cache directory."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter import metrics
from exporter.app import build_daemon
from exporter.attempt.states import ServerState
from exporter.config import Config, load_config
from exporter.sglang_cpu.install import SGLangRuntime, default_cache_dir, ensure_sglang
from exporter.sglang_cpu.models import write_tiny_model
from tests.conftest import free_port


def pytest_collection_modifyitems(items) -> None:
    """Everything here runs the real SGLang: `-m "not sglang"` gives the quick suite. Under
    `./dev test`'s two workers these tests share one (tests/conftest.py's scheduler)."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.sglang)


@pytest.fixture(scope="session")
def runtime() -> SGLangRuntime:
    return ensure_sglang(cache_dir=default_cache_dir(), progress=lambda line: print(line))


@pytest.fixture(scope="session")
def models(runtime: SGLangRuntime) -> dict[str, Path]:
    root = default_cache_dir() / "models"
    return {
        size: write_tiny_model(root / f"qwen2-{size}", runtime, size) for size in ("tiny", "large")
    }


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


def lone_first_node() -> dict:
    """Flags and environment of rank 0 of a two-node group whose second node never comes:
    SGLang waits in torch.distributed's init (the CPU engine needs one thread binding per
    rank before it reaches the wait)."""
    return {
        "args": {
            "tp-size": 2,
            "nnodes": 2,
            "node-rank": 0,
            "dist-init-addr": f"127.0.0.1:{free_port()}",
        },
        "env": {"SGLANG_CPU_OMP_THREADS_BIND": "0|1"},
    }


def write_config(
    directory: Path,
    runtime: SGLangRuntime,
    model: Path,
    profiles: list[dict] | None = None,
    policy: dict | None = None,
    args: dict | None = None,
    env: dict | None = None,
) -> Config:
    """A daemon config for the real SGLang on the CPU; ``profiles`` are {name, set, remove}."""
    base = {
        "model-path": str(model),
        "device": "cpu",
        "load-format": "dummy",
        "host": "127.0.0.1",
        "port": free_port(),
        "max-total-tokens": 4096,
        **(args or {}),
    }
    rules = {
        "startup_timeout_s": 300.0,
        "backoff_base_s": 0.5,
        "backoff_cap_s": 2.0,
        "stop_grace_s": 15.0,
        **(policy or {}),
    }
    lines = [
        "[sglang]",
        f"python = {toml_value(str(runtime.python))}",
        f'version = "{runtime.version}"',
        "[sglang.args]",
    ]
    lines += [f"{key} = {toml_value(value)}" for key, value in base.items()]
    lines.append("[sglang.env]")
    lines += [
        f"{key} = {toml_value(value)}" for key, value in {**runtime.env, **(env or {})}.items()
    ]
    for profile in profiles or [{"name": "default"}]:
        lines += ["[[profiles]]", f"name = {toml_value(profile['name'])}"]
        if profile.get("set"):
            pairs = ", ".join(f"{k} = {toml_value(v)}" for k, v in profile["set"].items())
            lines.append(f"set = {{ {pairs} }}")
        if profile.get("remove"):
            lines.append("remove = [" + ", ".join(toml_value(k) for k in profile["remove"]) + "]")
    lines.append("[policy]")
    lines += [f"{key} = {toml_value(value)}" for key, value in rules.items()]
    lines += [
        "[metrics]",
        f'listen = "127.0.0.1:{free_port()}"',
        "[paths]",
        'state_dir = "state"',
        'log_dir = "logs"',
    ]
    path = directory / "sentinel.toml"
    path.write_text("\n".join(lines) + "\n")
    return load_config(path)


class RunningDaemon:
    """A Daemon in a thread with its /metrics served, as `sglang-sentinel run` would run it."""

    def __init__(self, config: Config, start: bool = True) -> None:
        self.daemon = build_daemon(config)
        self.config = config
        listen = config.metrics
        self.server, _ = metrics.serve(listen.host, listen.port, self.daemon.snapshot)
        self.url = f"http://{listen.address}/metrics"
        self.thread = threading.Thread(target=self.daemon.run, daemon=True)
        if start:
            self.thread.start()

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():
                return
            if not self.thread.is_alive():
                break
            time.sleep(0.25)
        raise AssertionError(f"timed out waiting for {what}; state {self.daemon.state.value}")

    def wait_state(self, *states: ServerState, timeout_s: float = 300) -> None:
        self.wait_for(lambda: self.daemon.state in states, timeout_s, f"state in {states}")

    def scrape(self) -> dict[tuple[str, tuple], float]:
        text = httpx.get(self.url, timeout=5, trust_env=False).text
        samples = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return samples

    def exposition(self) -> str:
        return httpx.get(self.url, timeout=5, trust_env=False).text

    def stop(self) -> None:
        self.daemon.request_stop()
        self.thread.join(timeout=120)
        self.server.shutdown()
        assert not self.thread.is_alive(), "the daemon did not stop"


@pytest.fixture
def supervise(tmp_path) -> Iterator[Callable[[Config], RunningDaemon]]:
    started: list[RunningDaemon] = []

    def start(config: Config, run: bool = True) -> RunningDaemon:
        running = RunningDaemon(config, start=run)
        started.append(running)
        return running

    yield start
    for running in started:
        if running.thread.is_alive():
            running.stop()


@pytest.fixture(autouse=True)
def decoy(tmp_path) -> Iterator[subprocess.Popen]:
    """A process that merely looks like SGLang, started by the test in its own session; it
    lives through every end-to-end test and must never be signalled by the daemon."""
    received = tmp_path / "decoy-signals"
    script = (
        "import signal, sys, time\n"
        f"log = open({str(received)!r}, 'a')\n"
        "def note(sig, frame):\n"
        "    log.write(f'{sig}\\n'); log.flush()\n"
        "for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):\n"
        "    signal.signal(sig, note)\n"
        "while True: time.sleep(1)\n"
    )
    proc = subprocess.Popen(
        ["python3", "-c", script, "sglang::scheduler_TP0", "-m", "sglang.launch_server"],
        start_new_session=True,
    )
    proc.received = received  # type: ignore[attr-defined]
    yield proc
    survived = proc.poll() is None
    signalled = received.read_text() if received.exists() else ""
    proc.kill()
    proc.wait(timeout=10)
    assert survived, "the decoy was killed"
    assert signalled == "", f"the decoy received signals {signalled.split()}"


def promtool_check_metrics(exposition: str) -> subprocess.CompletedProcess:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: ./dev test installs it (scripts/install-test-deps)"
    return subprocess.run(
        [promtool, "check", "metrics"],
        input=exposition.encode(),
        capture_output=True,
        timeout=30,
        check=False,
    )
