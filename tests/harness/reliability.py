"""The reliability harness: configs for the stand-in launcher (tests/harness/fake_sglang.py),
the registry of every launcher a daemon started, daemons as processes of their own and in a
thread with /metrics served, and the fixtures that clean all of them up (only what they
started, identity-checked). Shared by tests/supervisor/test_reliability.py and
tests/supervisor/test_container.py; registered as a plugin in tests/conftest.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter import metrics
from exporter.app import build_daemon
from exporter.config import Config
from exporter.history import History
from exporter.identity import ProcessIdentity
from exporter.notify import Notifier
from exporter.supervisor.daemon import Daemon
from exporter.telemetry.probes import ProbeCollector
from exporter.telemetry.registry import Sources
from tests.conftest import free_port, live_in_sessions

REPO = Path(__file__).resolve().parents[2]
FAKE_MODULE = "tests.harness.fake_sglang"
TIMEOUT_S = 60.0  # generous: two cores, shared with other test runs


# --- configs ---------------------------------------------------------------------------------


def toml(value: object) -> str:
    """A TOML value: JSON's strings, numbers, booleans and arrays are valid TOML."""
    return json.dumps(value)


def write_config(
    directory: Path,
    args: dict,
    *,
    policy: dict | None = None,
    profiles: list[dict] | None = None,
    env: dict | None = None,
    registry: Path | None = None,
    state_dir: str = "state",
    log_dir: str = "logs",
    listen: str | None = None,
) -> Path:
    rules = {
        "startup_timeout_s": 60.0,
        "backoff_base_s": 0.05,
        "backoff_cap_s": 0.2,
        "max_attempts": 3,
        "window_s": 600.0,
        "stop_grace_s": 2.0,
        "health_interval_s": 0.5,
        **(policy or {}),
    }
    lines = [
        "[sglang]",
        f"python = {toml(sys.executable)}",
        f"module = {toml(FAKE_MODULE)}",
        f"workdir = {toml(str(REPO))}",
        "[sglang.args]",
    ]
    lines += [f"{toml(key)} = {toml(value)}" for key, value in args.items()]
    lines += ["[sglang.env]", f"PYTHONPATH = {toml(str(REPO))}"]
    if registry is not None:
        lines.append(f"FAKE_SGLANG_REGISTRY = {toml(str(registry))}")
    lines += [f"{toml(key)} = {toml(value)}" for key, value in (env or {}).items()]
    for profile in profiles or [{"name": "default"}]:
        lines += ["[[profiles]]", f"name = {toml(profile['name'])}"]
        if profile.get("set"):
            pairs = ", ".join(f"{toml(k)} = {toml(v)}" for k, v in profile["set"].items())
            lines.append(f"set = {{ {pairs} }}")
    lines.append("[policy]")
    lines += [f"{key} = {toml(value)}" for key, value in rules.items()]
    lines += ["[metrics]", f"listen = {toml(listen or f'127.0.0.1:{free_port()}')}"]
    lines += ["[paths]", f"state_dir = {toml(state_dir)}", f"log_dir = {toml(log_dir)}"]
    path = directory / "sentinel.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def attempts(config: Config):
    return History(config.paths.state_dir).read().attempts


def leaders(config: Config) -> set[ProcessIdentity]:
    return {ProcessIdentity.from_json(p) for a in attempts(config) for p in a.processes}


def wait_for(predicate: Callable[[], object], what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def scrape(address: str) -> str | None:
    try:
        response = httpx.get(f"http://{address}/metrics", timeout=10, trust_env=False)
    except httpx.HTTPError:
        return None
    return response.text if response.is_success else None


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def state_of(address: str) -> str | None:
    text = scrape(address)
    if text is None:
        return None
    for (name, labels), value in samples(text).items():
        if name == "sglang_sentinel_server_state" and value == 1:
            return dict(labels)["state"]
    return None


# --- processes the daemons start ------------------------------------------------------------


class Launchers:
    """Every fake launcher started with this registry, and the members of their sessions."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.touch()
        os.chmod(path, 0o666)  # an unprivileged daemon's launchers register too

    def all(self) -> list[ProcessIdentity]:
        out = []
        text = self.path.read_text() if self.path.exists() else ""
        for line in text.splitlines():
            pid, start_ticks = line.split()
            out.append(ProcessIdentity(int(pid), int(start_ticks)))
        return out

    def alive(self) -> list[ProcessIdentity]:
        return [launcher for launcher in self.all() if launcher.alive()]

    def members(self) -> list[psutil.Process]:
        """Live (not zombie) processes in a launcher's session, created no earlier than it."""
        return live_in_sessions(self.all())

    def reap(self) -> None:
        for proc in self.members():
            with contextlib.suppress(psutil.Error):
                proc.kill()  # psutil refuses if the pid now belongs to another process


@pytest.fixture
def launchers(tmp_path: Path) -> Iterator[Launchers]:
    registry = Launchers(tmp_path / "launchers")
    yield registry
    registry.reap()


class DaemonProcess:
    """`sglang-sentinel run` as a process of its own (what kill -9 and setpriv need)."""

    def __init__(self, command: list[str], stderr_path: Path) -> None:
        self.stderr_path = stderr_path
        with open(stderr_path, "wb") as stderr:
            self.popen = subprocess.Popen(
                command,
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
            )

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def kill9(self) -> None:
        self.popen.kill()
        self.popen.wait(timeout=TIMEOUT_S)

    def terminate(self) -> int:
        self.popen.send_signal(signal.SIGTERM)
        return self.popen.wait(timeout=TIMEOUT_S)


class Daemons:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started: list[DaemonProcess] = []

    def start(self, config_path: Path, prefix: list[str] | None = None, **kw) -> DaemonProcess:
        level = kw.get("log_level", "INFO")
        command = [
            *(prefix or []),
            sys.executable,
            *(kw.get("python_args") or ["-m", "exporter.cli"]),
            "run",
            "--config",
            str(config_path),
            "--log-level",
            level,
        ]
        daemon = DaemonProcess(command, self.directory / f"daemon-{len(self.started)}.stderr")
        self.started.append(daemon)
        return daemon


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Daemons]:
    started = Daemons(tmp_path)
    yield started
    for daemon in started.started:
        if daemon.popen.poll() is None:
            daemon.popen.kill()
            daemon.popen.wait(timeout=TIMEOUT_S)


class CountingNotifier(Notifier):
    """Counts the main loop's watchdog pings: one per tick, so a stalled loop stops them."""

    def __init__(self) -> None:
        super().__init__(None)
        self.pings = 0

    def watchdog(self) -> bool:
        self.pings += 1
        return False


class Running:
    """A Daemon in a thread with /metrics served, as `sglang-sentinel run` runs it."""

    def __init__(
        self, config: Config, notifier: Notifier | None = None, probes: ProbeCollector | None = None
    ) -> None:
        """``probes``: a probe collector of the test's own, in place of the registered one."""
        self.config = config
        if probes is None:
            self.daemon = build_daemon(config, notifier=notifier)
        else:
            given = {ProbeCollector.name: probes}
            self.daemon = Daemon(config, lambda host: Sources.build(host, given), notifier=notifier)
        self.server, _ = metrics.serve(
            config.metrics.host, config.metrics.port, self.daemon.snapshot
        )
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Running:
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            self.daemon.run()
        except BaseException as error:
            self.error = error
            raise

    def wait(
        self, predicate: Callable[[], object], what: str, timeout_s: float = TIMEOUT_S
    ) -> None:
        def check() -> object:
            if not self.thread.is_alive():
                raise AssertionError(f"the daemon's loop ended: {self.error!r}")
            return predicate()

        wait_for(check, what, timeout_s)

    def lines_counted(self) -> int:
        return sum(self.daemon.snapshot().log_lines.values())

    def stop(self) -> None:
        self.daemon.request_stop()
        self.thread.join(timeout=120)
        self.server.shutdown()
        self.server.server_close()
        assert not self.thread.is_alive(), "the daemon did not stop"
        assert self.error is None, f"the daemon's loop raised {self.error!r}"


@pytest.fixture
def supervise() -> Iterator[Callable[..., Running]]:
    started: list[Running] = []

    def start(config: Config, notifier: Notifier | None = None, probes=None) -> Running:
        running = Running(config, notifier, probes)
        started.append(running)
        return running.start()

    yield start
    for running in started:
        if running.thread.is_alive():
            running.daemon.request_stop()
            running.thread.join(timeout=120)
        with contextlib.suppress(Exception):
            running.server.shutdown()
            running.server.server_close()
