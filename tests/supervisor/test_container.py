"""The daemon as a container's entrypoint, driven by the stand-in launcher (fast): PID 1 of a
new PID namespace (`unshare --pid --fork --mount-proc`), its probe endpoints, its exit codes
and termination message, and a rank of a multi-node group.

The same against the real SGLang is in tests/e2e/test_container_sglang.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from exporter.config import load_config
from exporter.supervisor.watch import LOST_MEMBER_GRACE_S, MEMBER_SCAN_S
from tests.conftest import free_port
from tests.harness.fake_sglang import READY_LINE
from tests.harness.reliability import (
    REPO,
    TIMEOUT_S,
    attempts,
    samples,
    scrape,
    wait_for,
    write_config,
)

POOL_OOM = (
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
    "Current value: mem_fraction_static=0.005"
)
SCHEDULER_READY = (
    "[2026-01-01 10:00:04 TP1] max_total_num_tokens=4096, chunked_prefill_size=2048, "
    "max_prefill_tokens=16384, max_running_requests=64, context_len=2048"
)
CHILDREN = ["sglang::scheduler_TP0", "sglang::detokenizer"]


def get(address: str, path: str) -> httpx.Response | None:
    try:
        return httpx.get(f"http://{address}{path}", timeout=5, trust_env=False)
    except httpx.HTTPError:
        return None


def status_of(address: str) -> dict | None:
    response = get(address, "/status")
    return response.json() if response is not None and response.status_code == 200 else None


def ready(address: str) -> bool:
    response = get(address, "/readyz")
    return response is not None and response.status_code == 200


# --- PID 1 of a new PID namespace -------------------------------------------------------------


class Namespace:
    """`unshare --pid --fork --mount-proc sglang-sentinel run`: the daemon is PID 1 inside.
    unshare ignores SIGTERM in --fork mode, so signals go to the daemon itself (its host
    pid). Killing it ends the namespace: the kernel SIGKILLs everything in it."""

    def __init__(self, config_path: Path, stderr_path: Path) -> None:
        self.stderr_path = stderr_path
        with open(stderr_path, "wb") as stderr:
            self.unshare = subprocess.Popen(
                [
                    "unshare",
                    "--pid",
                    "--fork",
                    "--mount-proc",
                    sys.executable,
                    "-m",
                    "exporter.cli",
                    "run",
                    "--config",
                    str(config_path),
                ],
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
            )
        wait_for(lambda: psutil.Process(self.unshare.pid).children(), "the namespace's PID 1")
        self.init = psutil.Process(self.unshare.pid).children()[0]
        assert ns_pid(self.init) == 1

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def processes(self) -> list[psutil.Process]:
        """Every process of the namespace, zombies included: all descend from its PID 1."""
        try:
            return [self.init, *self.init.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def zombies(self) -> list[psutil.Process]:
        """Zombies handed to PID 1 (the daemon): the ones nobody but it can reap. A zombie
        child of a live SGLang process is that process's to wait for."""
        out = []
        for proc in self.processes():
            with contextlib.suppress(psutil.NoSuchProcess):
                if proc.status() == psutil.STATUS_ZOMBIE and proc.ppid() == self.init.pid:
                    out.append(proc)
        return out

    def describe_zombies(self) -> list[str]:
        """Every zombie of the namespace, whoever's, for a failure message."""
        out = []
        for proc in self.processes():
            with contextlib.suppress(psutil.Error):
                if proc.status() == psutil.STATUS_ZOMBIE:
                    parent = psutil.Process(proc.ppid())
                    session = os.getsid(proc.pid)
                    out.append(
                        f"{proc.pid} {proc.name()} session {session} "
                        f"(parent {parent.pid} {parent.name()}, session {os.getsid(parent.pid)})"
                    )
        return out

    def host_process(self, pid_inside: int) -> psutil.Process:
        """The process a pid recorded inside the namespace names out here."""
        return next(p for p in self.processes() if ns_pid(p) == pid_inside)

    def close(self) -> None:
        with contextlib.suppress(psutil.NoSuchProcess):
            self.init.kill()
        self.unshare.wait(timeout=TIMEOUT_S)


def ns_pid(proc: psutil.Process) -> int | None:
    """The process's pid in its own (innermost) PID namespace."""
    try:
        status = Path(f"/proc/{proc.pid}/status").read_text()
    except OSError:
        return None
    return int(next(line for line in status.splitlines() if line.startswith("NSpid:")).split()[-1])


@pytest.fixture
def namespaces() -> Iterator[list[Namespace]]:
    started: list[Namespace] = []
    yield started
    for namespace in started:
        namespace.close()


def reaped_from_the_attempt(address: str) -> float:
    text = scrape(address) or ""
    return samples(text).get(("sglang_sentinel_reaped_processes_total", (("origin", "attempt"),)))


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_as_pid_1_every_orphan_is_reaped_a_crash_is_seen_at_once_and_sigterm_ends_all(
    tmp_path, namespaces
):
    """Breaks: the daemon runs as PID 1 of a new PID namespace, the launcher is killed with
    SIGKILL (its scheduler and detokenizer are orphaned, handed to PID 1), then a scheduler
    is killed on its own. Must survive: 0 zombies after each, the crash recorded within 1 s
    of the kill, the relaunch serves, and SIGTERM ends every process of the namespace
    within stop_grace_s + 5 s with status 0."""
    grace = 2.0
    healthy = tmp_path / "health-ok"  # each launch serves once the test creates it
    args = {"line": [READY_LINE], "serve": True, "port": free_port(), "child": CHILDREN}
    path = write_config(
        tmp_path,
        {**args, "health-ok-when": str(healthy)},
        policy={"stop_grace_s": grace, "backoff_base_s": 0.2, "backoff_cap_s": 0.5},
    )
    config = load_config(path)
    address = config.metrics.address
    namespace = Namespace(path, tmp_path / "daemon.stderr")
    namespaces.append(namespace)

    def fail(what: str) -> str:
        return f"{what}; the daemon said:\n{namespace.stderr()[-3000:]}"

    def serving(number: int) -> psutil.Process:
        """Attempt ``number``'s launcher, once its children run and it serves. SGLang starts
        its children before it serves: the daemon looks for them while it starts."""
        wait_for(lambda: len(attempts(config)) == number, f"launch {number}")
        launcher = namespace.host_process(attempts(config)[-1].processes[0]["pid"])
        wait_for(lambda: len(launcher.children()) == len(CHILDREN), "the children")
        time.sleep(2 * MEMBER_SCAN_S)
        healthy.touch()
        wait_for(lambda: ready(address) and status_of(address)["attempt"] == number, "ready")
        healthy.unlink()
        return launcher

    for number, victim in ((1, "launcher"), (2, "scheduler")):
        launcher = serving(number)
        if victim == "launcher":
            target = launcher
        else:
            target = next(c for c in launcher.children() if "scheduler" in c.cmdline()[0])
        killed_at = time.time()
        target.kill()
        try:
            wait_for(lambda n=number: len([a for a in attempts(config) if a.ended]) == n, "end")
        except AssertionError as error:
            raise AssertionError(fail(str(error))) from None
        ended = attempts(config)[number - 1]
        # A killed scheduler the launcher does not notice is called lost after a grace
        # (LOST_MEMBER_GRACE_S: SGLang's own crash path gets that long to act first).
        allowed = 1.0 if victim == "launcher" else LOST_MEMBER_GRACE_S + 1.0
        assert ended.ended_at - killed_at < allowed, fail(f"{victim} kill seen late")
        try:
            wait_for(lambda: not namespace.zombies(), "no zombies", timeout_s=5)
        except AssertionError as error:
            raise AssertionError(f"{error}: {namespace.describe_zombies()}") from None
    assert reaped_from_the_attempt(address) >= len(CHILDREN), fail("orphans were not reaped")
    serving(3)

    everything = namespace.processes()
    assert len(everything) >= 2 + len(CHILDREN)  # PID 1, the launcher and its children
    signalled = time.monotonic()
    namespace.init.send_signal(signal.SIGTERM)
    assert namespace.unshare.wait(timeout=TIMEOUT_S) == 0, fail("not a clean exit")
    took = time.monotonic() - signalled
    assert took < grace + 5.0, fail(f"SIGTERM took {took:.1f} s")
    assert not [p for p in everything if p.is_running()], "a process of the namespace survived"


# --- probe endpoints ----------------------------------------------------------------------------


class Watcher:
    """Asks /healthz and /readyz ten times a second, keeping every answer."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.health: list[int | None] = []
        self.ready: list[int | None] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with httpx.Client(trust_env=False, timeout=5) as client:
            while not self._stop.is_set():
                for path, answers in (("/healthz", self.health), ("/readyz", self.ready)):
                    try:
                        answers.append(client.get(f"http://{self.address}{path}").status_code)
                    except httpx.HTTPError:
                        answers.append(None)
                time.sleep(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def test_probes_through_a_launch_a_crash_a_backoff_and_a_stop(tmp_path, launchers, daemons):
    """Breaks: the server loads (health 503), serves, is killed, waits in backoff, serves
    again, and the daemon is stopped. Must survive: /healthz 200 at every moment the daemon
    answers; /readyz 503 while loading, 200 while serving, 503 after the crash and in
    backoff, 200 again; /status tells state, attempt, profile, the failure's class,
    root-cause line, diagnosis and decision."""
    healthy = tmp_path / "health-ok"
    path = write_config(
        tmp_path,
        {"line": [READY_LINE], "serve": True, "port": free_port(), "health-ok-when": str(healthy)},
        policy={"backoff_base_s": 3.0, "backoff_cap_s": 3.0},
        registry=launchers.path,
    )
    config = load_config(path)
    address = config.metrics.address
    daemon = daemons.start(path)
    wait_for(lambda: status_of(address) is not None, "/status")
    watcher = Watcher(address)
    try:
        wait_for(lambda: status_of(address)["state"] == "starting", "starting")
        time.sleep(1.5)  # loading: /health answers 503
        assert not ready(address) and status_of(address)["state"] == "starting"
        healthy.touch()
        wait_for(lambda: ready(address), "ready")
        serving = status_of(address)
        assert (serving["state"], serving["attempt"], serving["profile"]) == ("ready", 1, "default")
        assert serving["last_failure"] is None and serving["alive"] is True
        wait_for(lambda: watcher.ready[-1:] == [200], "the watcher seeing it")

        (launcher,) = launchers.alive()
        psutil.Process(launcher.pid).kill()
        wait_for(lambda: status_of(address)["state"] == "backoff", "backoff")
        waiting = status_of(address)
        assert not ready(address)
        failure = waiting["last_failure"]
        assert failure["class"] == "killed_by_signal" and failure["attempt"] == 1
        assert failure["diagnosis"] and failure["decision"] == waiting["decision"]
        assert "retrying profile 'default'" in waiting["decision"]
        wait_for(lambda: ready(address) and status_of(address)["attempt"] == 2, "ready again")
        wait_for(lambda: watcher.ready[-1:] == [200], "the watcher seeing it")
        assert daemon.terminate() == 0
    finally:
        watcher.stop()
    answered = [code for code in watcher.health if code is not None]
    assert answered and set(answered) == {200}, f"liveness answered {set(answered)}"
    seen = [code for code in watcher.ready if code is not None]
    # Readiness went 503 (loading) -> 200 -> 503 (crash, backoff) -> 200.
    changes = [code for i, code in enumerate(seen) if i == 0 or seen[i - 1] != code]
    assert changes[:4] == [503, 200, 503, 200], changes
    assert not launchers.members()


# --- exit codes and the termination message -------------------------------------------------------


def test_giving_up_with_a_termination_log_exits_3_with_the_message(tmp_path, launchers, daemons):
    """Breaks: every launch fails deterministically (an unknown flag: argparse exits 2), and
    a termination log is configured (so policy.on_give_up defaults to "exit"). Must survive:
    the daemon gives up, writes class, root-cause line, diagnosis and decision to the
    termination log within 4096 bytes, and exits with status 3."""
    message = tmp_path / "termination-log"
    path = write_config(
        tmp_path,
        {
            "line": ["launch_server.py: error: unrecognized arguments: --bogus"],
            "exit-code": 2,
            "sleep": 0.0,
        },
        registry=launchers.path,
    )
    path.write_text(path.read_text() + f'termination_log = "{message}"\n')
    daemon = daemons.start(path)
    assert daemon.popen.wait(timeout=TIMEOUT_S) == 3, daemon.stderr()[-3000:]
    text = message.read_text()
    assert len(text.encode()) <= 4096
    assert text.startswith("sglang-sentinel: gave up (exit code 3)\n")
    assert "class: invalid_argument" in text
    assert "root cause: launch_server.py: error: unrecognized arguments: --bogus" in text
    assert "decision: invalid_argument" in text and "giving up" in text
    assert "diagnosis: " in text
    assert not launchers.members()


def test_a_bad_config_exits_2_and_a_busy_metrics_address_1(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[paths]\nstate_dir = 'state'\n")
    done = subprocess.run(
        [sys.executable, "-m", "exporter.cli", "run", "--config", str(bad)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 2 and "paths.log_dir: required key is missing" in done.stderr
    message = tmp_path / "termination-log"
    with socket_listening() as port:
        path = write_config(tmp_path, {"sleep": 1.0}, listen=f"127.0.0.1:{port}")
        path.write_text(path.read_text() + f'termination_log = "{message}"\n')
        done = subprocess.run(
            [sys.executable, "-m", "exporter.cli", "run", "--config", str(path)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    assert done.returncode == 1 and "cannot serve metrics" in done.stderr
    assert message.read_text().startswith("sglang-sentinel: internal error (exit code 1)")
    assert f"reason: cannot serve metrics on 127.0.0.1:{port}" in message.read_text()


@contextlib.contextmanager
def socket_listening() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_sigquit_stops_sglang_without_its_drain(tmp_path, launchers, daemons):
    """Breaks: the launcher and its children ignore SIGTERM, stop_grace_s is 30 s, and the
    daemon gets SIGQUIT. Must survive: everything is SIGKILLed at once, exit status 0."""
    path = write_config(
        tmp_path,
        {"sleep": 300.0, "ignore-sigterm": True, "child": CHILDREN, "child-ignores-sigterm": True},
        policy={"stop_grace_s": 30.0},
        registry=launchers.path,
    )
    config = load_config(path)
    daemon = daemons.start(path)
    wait_for(lambda: len(launchers.members()) == 1 + len(CHILDREN), "the launch and children")
    wait_for(lambda: status_of(config.metrics.address) is not None, "/status")
    started = time.monotonic()
    daemon.popen.send_signal(signal.SIGQUIT)
    assert daemon.popen.wait(timeout=TIMEOUT_S) == 0, daemon.stderr()[-3000:]
    assert time.monotonic() - started < 10.0
    assert not launchers.members()


# --- a rank of a multi-node group ---------------------------------------------------------------


def test_a_group_member_exits_4_after_a_classified_failure(tmp_path, launchers, daemons):
    """Breaks: rank 0 of a two-node group (--nnodes 2, so policy.group defaults to "exit")
    dies of a pool-sizing OOM. Must survive: no relaunch in place; the failure is recorded
    and classified, SGLang is stopped, the termination message names the class, the root
    cause and the group decision, and the daemon exits with status 4."""
    message = tmp_path / "termination-log"
    path = write_config(
        tmp_path,
        {"nnodes": 2, "node-rank": 0, "line": [POOL_OOM], "child": CHILDREN, "sleep": 1.0},
        profiles=[{"name": "tight"}, {"name": "roomy", "set": {"exit-code": 0}}],
        registry=launchers.path,
    )
    path.write_text(path.read_text() + f'termination_log = "{message}"\n')
    config = load_config(path)
    assert config.policy.group == "exit"
    daemon = daemons.start(path)
    assert daemon.popen.wait(timeout=TIMEOUT_S) == 4, daemon.stderr()[-3000:]
    (record,) = attempts(config)
    assert record.failure_class == "pool_init_oom"
    assert "recreates the whole group" in record.decision
    assert "falling back from profile 'tight' to 'roomy'" in record.decision  # the plan kept
    text = message.read_text()
    assert text.startswith("sglang-sentinel: group member failed (exit code 4)\n")
    assert "class: pool_init_oom" in text and "root cause: RuntimeError: Not enough memory" in text
    assert "recreates the whole group" in text
    assert len(launchers.all()) == 1 and not launchers.members()


def test_a_non_leader_rank_is_ready_from_its_schedulers_and_exits_when_one_dies(
    tmp_path, launchers, daemons
):
    """Breaks: rank 1 of a two-node group: no ready line and a /health that always answers
    200 (SGLang's dummy server there); later its scheduler dies. Must survive: /readyz is
    503 until the log shows the scheduler ready and the scheduler runs, then 200; the
    scheduler's death ends the attempt and the rank exits with status 4."""
    path = write_config(
        tmp_path,
        {
            "nnodes": 2,
            "node-rank": 1,
            "serve": True,
            "port": free_port(),
            "line": [SCHEDULER_READY],
            "child": ["sglang::scheduler_TP1"],
        },
        registry=launchers.path,
    )
    config = load_config(path)
    address = config.metrics.address
    daemon = daemons.start(path)
    wait_for(lambda: ready(address), "the worker rank ready")
    assert status_of(address)["node_rank"] == 1 and status_of(address)["nnodes"] == 2
    (scheduler,) = [m for m in launchers.members() if "scheduler" in m.cmdline()[0]]
    scheduler.kill()
    assert daemon.popen.wait(timeout=TIMEOUT_S) == 4, daemon.stderr()[-3000:]
    (record,) = attempts(config)
    assert record.ready_at is not None and "recreates the whole group" in record.decision
    assert not launchers.members()


def test_status_is_json_with_every_documented_key(tmp_path, launchers, daemons):
    path = write_config(tmp_path, {"sleep": 300.0}, registry=launchers.path)
    config = load_config(path)
    daemon = daemons.start(path)
    wait_for(lambda: status_of(config.metrics.address) is not None, "/status")
    response = get(config.metrics.address, "/status")
    assert response.headers["content-type"] == "application/json"
    assert set(json.loads(response.text)) == {
        "state",
        "ready",
        "alive",
        "attempt",
        "profile",
        "nnodes",
        "node_rank",
        "group",
        "decision",
        "last_failure",
        "loop_age_s",
    }
    assert daemon.terminate() == 0


def test_sigint_stops_sglang_as_sigterm_does(tmp_path, launchers, daemons):
    """Breaks: Ctrl-C (SIGINT) to `run` while its server and children run. Must survive:
    SGLang is stopped, status 0, nothing left."""
    path = write_config(tmp_path, {"sleep": 300.0, "child": CHILDREN}, registry=launchers.path)
    config = load_config(path)
    daemon = daemons.start(path)
    wait_for(lambda: len(launchers.members()) == 1 + len(CHILDREN), "the launch and children")
    wait_for(lambda: status_of(config.metrics.address) is not None, "/status")
    daemon.popen.send_signal(signal.SIGINT)
    assert daemon.popen.wait(timeout=TIMEOUT_S) == 0, daemon.stderr()[-3000:]
    (record,) = attempts(config)
    assert record.stopped_by == "daemon"
    assert not launchers.members()
