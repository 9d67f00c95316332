"""Reliability of the daemon under faults, driven by a stand-in launcher (fast).

The launched program is tests/harness/fake_sglang.py: it prints log lines, can answer
SGLang's HTTP probes, forks children titled like SGLang's and exits when told. Each test
states what it breaks and what must survive. Every launcher registers itself in a file
(FAKE_SGLANG_REGISTRY), so a test finds every process a daemon started, recorded in the
history or not, and the teardown kills what is left of them (only those, identity-checked).
SGLang's own behaviour under the same faults is in tests/e2e/test_reliability_sglang.py.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

import exporter.history.file
from exporter.attempt.states import ServerState
from exporter.config import load_config
from exporter.history import History
from exporter.redact import redact_command
from exporter.telemetry.probes import ProbeCollector
from tests.conftest import free_port
from tests.harness.fake_sglang import READY_LINE
from tests.harness.reliability import (
    REPO,
    TIMEOUT_S,
    CountingNotifier,
    Launchers,
    attempts,
    leaders,
    samples,
    scrape,
    state_of,
    toml,
    wait_for,
    write_config,
)
from tests.logs.test_tailer import ROTATIONS, RotatingWriter

SECRET_KEY = "sk-SECRET-4e1f0c7d9a2b"
SECRET_TOKEN = "hf_SECRET-9b3d77a1c5e0"


# --- log rotation ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["rename_create", "copytruncate", "delete_recreate"])
def test_log_rotation_under_load_counts_every_line_once(tmp_path, launchers, supervise, kind):
    """Breaks: the live attempt's log is rotated 5 times (each kind in turn) while bursts of 500
    numbered lines are appended to it. Must survive: sglang_sentinel_log_lines_total counts
    every line exactly once, on /metrics while the attempt runs and after the daemon stopped
    it; the tailer saw every rotation.

    What this covers: the daemon's own follow path (the LogTailer it starts for the attempt,
    its callback, the reader's counters under the daemon's lock, the exposition) on a log
    that an outside writer appends to and rotates (the RotatingWriter of test_tailer.py,
    which pauses around copytruncate as any lossless copytruncate must). What it does not:
    SGLang's own output being rotated. SGLang writes through the descriptor the daemon opened
    and never reopens it, so after rename+create or delete+recreate its lines go to the old
    file (the daemon follows the path), and copytruncate loses what it writes between the
    copy and the truncate. The tailer itself is covered by tests/logs/test_tailer.py."""
    config = load_config(
        write_config(tmp_path, {"exit-when": str(tmp_path / "never")}, registry=launchers.path)
    )
    running = supervise(config)
    running.wait(
        lambda: running.daemon.attempt is not None and running.daemon.attempt.tailer is not None,
        "the attempt and its tailer",
    )
    attempt = running.daemon.attempt
    writer = RotatingWriter(attempt.log_path)
    errors: list[BaseException] = []

    def seen_through(n: int) -> None:
        wait_for(lambda: running.lines_counted() > n, f"line {n} counted")

    def truncations_seen(n: int) -> None:
        wait_for(lambda: attempt.tailer.stats.truncations >= n, f"truncation {n} seen")

    def write() -> None:
        try:
            writer.run(kind, seen_through, truncations_seen)
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=write)
    thread.start()
    thread.join(timeout=300)
    assert not thread.is_alive() and not errors, errors
    wait_for(lambda: running.lines_counted() >= writer.next, "every line counted")
    exposed = samples(scrape(config.metrics.address))
    assert (
        sum(
            value
            for (name, _), value in exposed.items()
            if name == "sglang_sentinel_log_lines_total"
        )
        == writer.next
    )
    stats = attempt.tailer.stats
    assert (stats.truncations if kind == "copytruncate" else stats.rotations) == ROTATIONS
    running.stop()
    assert running.lines_counted() == writer.next, "a line was counted twice or lost"
    assert attempts(config)[-1].stopped_by == "daemon"
    assert not launchers.members()


# --- the log directory ------------------------------------------------------------------------


def test_log_directory_deleted_while_an_attempt_runs(tmp_path, launchers, supervise):
    """Breaks: `rm -r` of the whole log directory while an attempt runs and is followed.
    Must survive: the daemon keeps supervising (its loop ticks, /metrics answers, the
    attempt is still watched), records the attempt's end when its launcher exits, and the
    relaunch recreates the directory with the new attempt's log and `current` link."""
    end = tmp_path / "end"
    config = load_config(
        write_config(
            tmp_path,
            {
                "line": ["[2026-01-01 10:00:00] Init torch distributed begin."],
                "exit-when": str(end),
                "exit-code": 1,
            },
            policy={"max_attempts": 5},
            registry=launchers.path,
        )
    )
    notifier = CountingNotifier()
    running = supervise(config, notifier)
    running.wait(lambda: running.lines_counted() >= 1, "the first attempt's line")
    shutil.rmtree(config.paths.log_dir)

    pings = notifier.pings
    running.wait(lambda: notifier.pings >= pings + 10, "the loop ticking after the deletion")
    assert running.daemon.state is ServerState.STARTING
    assert scrape(config.metrics.address) is not None
    assert not config.paths.log_dir.exists()

    end.touch()  # the launcher exits 1: the attempt ends while its log is gone
    second = config.paths.log_dir / "attempt-000002.log"
    running.wait(
        lambda: running.daemon.state is ServerState.STARTING and second.exists(),
        "the relaunch with a recreated log directory",
    )
    running.wait(lambda: running.lines_counted() >= 2, "the second attempt's line read")
    assert os.readlink(config.paths.log_dir / "current") == second.name
    first = attempts(config)[0]
    assert first.ended and first.exit_code == 1 and first.failure_class == "other"
    assert "retrying profile 'default'" in first.decision
    running.stop()
    assert [a.stopped_by for a in attempts(config)] == [None, "daemon"]
    assert not launchers.members()


def test_unwritable_log_directory_fails_the_attempt_with_a_reason(tmp_path, launchers, daemons):
    """Breaks: paths.log_dir lies under a regular file, so no log can ever be created.
    Must survive: the daemon does not crash: the attempt is recorded as failed with a reason
    that names the log and the error, the daemon gives up (the same command cannot work), keeps
    serving /metrics, and SIGTERM then ends it with status 0."""
    (tmp_path / "blocker").write_text("a regular file, not a directory\n")
    path = write_config(tmp_path, {"sleep": 5.0}, log_dir="blocker/logs", registry=launchers.path)
    config = load_config(path)
    daemon = daemons.start(path)
    wait_for(
        lambda: daemon.popen.poll() is not None or any(a.ended for a in attempts(config)),
        "the attempt's end, or the daemon's",
    )
    assert daemon.popen.poll() is None, (
        f"the daemon died (status {daemon.popen.returncode}):\n{daemon.stderr()[-3000:]}"
    )
    (record,) = attempts(config)
    assert record.failure_class == "invalid_argument"
    assert "blocker/logs" in record.root_cause_line
    assert "Not a directory" in record.root_cause_line
    wait_for(lambda: state_of(config.metrics.address) == "gave_up", "gave_up on /metrics")
    assert daemon.terminate() == 0
    assert "Traceback" not in daemon.stderr()
    assert not launchers.all(), "nothing can have been launched without a log"


# --- a full disk for the state directory --------------------------------------------------------


class FullDisk:
    """The state directory's file system, which a test fills and frees.

    A tiny tmpfs where mounting works (root with CAP_SYS_ADMIN): filling it is the real
    thing, short writes included. Elsewhere the history module's os.write fails with ENOSPC.
    """

    def __init__(self, root: Path, monkeypatch, allow_tmpfs: bool = True) -> None:
        self.root = root
        root.mkdir()
        self.kind = "tmpfs" if allow_tmpfs and self._mount() else "monkeypatch"
        self.full = False
        self._filler = root / "filler"
        if self.kind == "monkeypatch":
            monkeypatch.setattr(exporter.history.file, "os", _FailingOs(self))

    def _mount(self) -> bool:
        if os.geteuid() != 0 or shutil.which("mount") is None:
            return False
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", str(self.root)],
            capture_output=True,
            timeout=30,
            check=False,
        )
        return result.returncode == 0

    def fill(self) -> None:
        self.full = True
        if self.kind != "tmpfs":
            return
        _fill(self._filler, b"x" * 512)
        # The history's last page has room left that a short record would still fit in:
        # fill it with blank lines, which the history reads past.
        history = self.root / exporter.history.file.HISTORY_FILE
        if history.exists():
            _fill(history, b"\n")

    def free(self) -> None:
        self.full = False
        if self.kind == "tmpfs":
            self._filler.unlink()

    def close(self) -> None:
        if self.kind == "tmpfs":
            for options in ([], ["-l"]):
                if (
                    subprocess.run(["umount", *options, str(self.root)], check=False).returncode
                    == 0
                ):
                    break


def _fill(path: Path, chunk: bytes) -> None:
    """Append ``chunk`` to ``path`` until the file system is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for _ in range(100_000):  # 64 KiB at most: bounded either way
            try:
                if os.write(fd, chunk) == 0:
                    break
            except OSError as error:
                assert error.errno == errno.ENOSPC, error
                break
    finally:
        os.close(fd)


class _FailingOs:
    """The os module as exporter/history/file.py sees it, with write failing while the disk is full."""

    def __init__(self, disk: FullDisk) -> None:
        self._disk = disk

    def __getattr__(self, name: str):
        return getattr(os, name)

    def write(self, fd: int, data: bytes) -> int:
        if self._disk.full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return os.write(fd, data)


@pytest.fixture(params=["tmpfs", "monkeypatch"])
def full_disk(request, tmp_path: Path, monkeypatch) -> Iterator[FullDisk]:
    """Both kinds where a tmpfs can be mounted; ENOSPC from os.write twice elsewhere."""
    disk = FullDisk(tmp_path / "statefs", monkeypatch, allow_tmpfs=request.param == "tmpfs")
    yield disk
    disk.close()


def history_errors(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in list(caplog.records)
        if r.levelno >= logging.ERROR and r.getMessage().startswith("history: ")
    ]


def test_full_state_disk_keeps_supervising_and_loses_nothing_recorded(
    tmp_path, launchers, supervise, full_disk, caplog
):
    """Breaks: the state directory's file system fills up (a 64 KiB tmpfs filled to the
    last block where mounting works, else ENOSPC from every history write) while a crash
    loop keeps recording. Must survive: failed writes leave the history byte for byte as it
    was (no cut line, nothing recorded lost), the daemon logs what failed, keeps relaunching
    and serving /metrics, and records again once space is freed."""
    caplog.set_level(logging.INFO, logger="sglang_sentinel")
    config = load_config(
        write_config(
            tmp_path,
            {"line": ["RuntimeError: boom"], "sleep": 0.2, "exit-code": 1},
            policy={"max_attempts": 1000},
            state_dir=str(full_disk.root),
            registry=launchers.path,
        )
    )
    history = History(config.paths.state_dir)
    running = supervise(config)
    running.wait(lambda: sum(a.ended for a in attempts(config)) >= 2, "two recorded attempts")

    full_disk.fill()
    running.wait(lambda: history_errors(caplog), "a failed history write, logged")
    before = history.path.read_bytes()
    launched = running.daemon.snapshot().attempts_total
    running.wait(
        lambda: running.daemon.snapshot().attempts_total >= launched + 3,
        "relaunches while the disk is full",
    )
    exposed = samples(scrape(config.metrics.address))
    assert exposed[("sglang_sentinel_attempts_total", ())] >= launched + 3
    assert history.path.read_bytes() == before, "a failed write changed the history"
    read = history.read()
    assert read.corrupt_lines == 0 and len(read.attempts) >= 2
    message = history_errors(caplog)[0]
    assert str(history.path) in message
    assert "No space left on device" in message or "short write" in message, message

    full_disk.free()
    running.wait(lambda: len(history.path.read_bytes()) > len(before), "a record after freeing")
    running.stop()
    after = history.path.read_bytes()
    assert after.startswith(before), "a record written before the disk filled was lost"
    assert history.read().corrupt_lines == 0
    assert not launchers.members()


def test_attempt_ids_stay_unique_while_the_state_disk_is_full(
    tmp_path, launchers, supervise, monkeypatch
):
    """Breaks: every history write fails (ENOSPC) while a server crashes and is relaunched.
    Must survive: each launch still gets an attempt id and a log file of its own (the README:
    "each attempt gets a new id", its log "opened for append, never reused"), so an attempt's
    classification and log_lines_total never read another attempt's lines."""
    disk = FullDisk(tmp_path / "state", monkeypatch, allow_tmpfs=False)
    disk.fill()
    config = load_config(
        write_config(
            tmp_path,
            {"line": ["RuntimeError: boom"], "sleep": 0.2, "exit-code": 1},
            policy={"max_attempts": 1000},
            state_dir=str(disk.root),
            registry=launchers.path,
        )
    )
    running = supervise(config)
    seen: dict[int, tuple[int, Path]] = {}  # id(Attempt) -> (number, log)

    def three_launches() -> bool:
        attempt = running.daemon.attempt
        if attempt is not None:
            seen[id(attempt)] = (attempt.number, attempt.log_path)
        return len(seen) >= 3

    running.wait(three_launches, "three launches")
    running.stop()
    numbers = [number for number, _ in seen.values()]
    logs = [log.name for _, log in seen.values()]
    assert len(set(numbers)) == len(numbers), f"attempt ids reused: {numbers}, logs {logs}"


# --- an HTTP endpoint that accepts and never answers ------------------------------------------


class SilentServer:
    """Accepts TCP connections on 127.0.0.1 and never reads or answers."""

    def __init__(self, port: int = 0) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted.append(connection)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for connection in self.accepted:
            connection.close()
        self.sock.close()


@pytest.fixture
def silent_servers() -> Iterator[Callable[[int], SilentServer]]:
    started: list[SilentServer] = []

    def start(port: int = 0) -> SilentServer:
        server = SilentServer(port)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


def test_probe_of_an_endpoint_that_never_answers_times_out(silent_servers):
    """Breaks: SGLang's port accepts connections and never answers. Must survive: every
    probe ends with a timeout (no hang), health counts as failing."""
    silent = silent_servers()
    probes = ProbeCollector(60.0, health_timeout_s=1.0, info_timeout_s=0.5)
    try:
        probes.target(f"http://127.0.0.1:{silent.port}")
        snapshot = probes.collect()
    finally:
        probes.stop()
    assert {name: result.error for name, result in snapshot.results.items()} == {
        "health": "ReadTimeout",
        "server_info": "ReadTimeout",
        "loads": "ReadTimeout",
    }
    assert not snapshot.results["health"].ok and snapshot.health_failing_since is not None
    assert len(silent.accepted) >= 3


def test_daemon_keeps_ticking_while_its_probes_hang(tmp_path, launchers, supervise, silent_servers):
    """Breaks: the server's log says ready, but its port accepts and never answers.
    Must survive: the probes time out in their own thread while the main loop keeps ticking
    and /metrics keeps answering; the daemon never calls the server ready, ends it at the
    startup timeout as hang_timeout and gives up; stopping returns.

    The silent listener takes the port only after the launch (before it, the daemon would
    rightly wait up to 10 s for a port in use). The daemon's probe collector is swapped for
    one with short timeouts (1 s and 0.5 s instead of 25 s and 5 s) so that the test sees
    several probe rounds within the startup timeout."""
    port = free_port()
    config = load_config(
        write_config(
            tmp_path,
            {"line": [READY_LINE], "port": port},
            policy={"startup_timeout_s": 10.0, "max_attempts": 1},
            registry=launchers.path,
        )
    )
    notifier = CountingNotifier()
    probes = ProbeCollector(0.2, health_timeout_s=1.0, info_timeout_s=0.5)
    running = supervise(config, notifier, probes=probes)
    running.wait(lambda: running.daemon.attempt is not None, "the launch")
    silent = silent_servers(port)
    running.wait(lambda: len(silent.accepted) >= 1, "a probe connection")
    pings = notifier.pings
    scrapes = 0
    errors = set()
    for _ in range(100):  # bounded; the probes hang in their own thread meanwhile
        if running.daemon.state is not ServerState.STARTING:
            break
        assert scrape(config.metrics.address) is not None, "/metrics did not answer"
        scrapes += 1
        health = running.daemon.snapshot().sources["probes"].results.get("health")
        if health is not None:
            assert not health.ok
            errors.add(health.error)
        time.sleep(0.2)
    ticked = notifier.pings - pings
    running.wait(lambda: running.daemon.state is ServerState.GAVE_UP, "the startup timeout")
    assert scrapes >= 3 and ticked >= 10, f"the loop ticked {ticked} times in {scrapes} scrapes"
    assert "ReadTimeout" in errors, errors
    running.stop()
    (attempt,) = attempts(config)
    assert attempt.ready_at is None, "a server that never answered was called ready"
    assert attempt.failure_class == "hang_timeout"
    assert len(silent.accepted) >= 3
    assert not launchers.members()


# --- processes that merely look like SGLang --------------------------------------------------

DECOY = """
import os, signal, sys, time
log = open(os.environ["DECOY_SIGNALS"], "a")
def note(sig, frame):
    log.write(f"{sig}\\n"); log.flush()
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
            signal.SIGUSR2):
    signal.signal(sig, note)
deadline = time.monotonic() + 300
while time.monotonic() < deadline:
    time.sleep(0.1)
"""


@pytest.fixture
def decoys(tmp_path: Path) -> Iterator[list[tuple[subprocess.Popen, Path]]]:
    """Processes titled like SGLang's, started by the test itself in sessions of their own:
    `sglang::scheduler_TP0`, `sglang::detokenizer` and `python -m sglang.launch_server`."""
    package = tmp_path / "decoy-package" / "sglang"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "launch_server.py").write_text(DECOY)
    argvs = [
        ["sglang::scheduler_TP0", "-c", DECOY],
        ["sglang::detokenizer", "-c", DECOY],
        [sys.executable, "-m", "sglang.launch_server", "--model-path", "decoy", "--port", "1"],
    ]
    started = []
    for index, argv in enumerate(argvs):
        signals = tmp_path / f"decoy-{index}.signals"
        env = {**os.environ, "DECOY_SIGNALS": str(signals), "PYTHONPATH": str(package.parent)}
        proc = subprocess.Popen(argv, executable=sys.executable, env=env, start_new_session=True)
        started.append((proc, signals))
    yield started
    for proc, _ in started:
        proc.kill()
        proc.wait(timeout=TIMEOUT_S)


def test_decoys_titled_like_sglang_are_never_signalled(tmp_path, launchers, supervise, decoys):
    """Breaks: three processes the daemon did not start carry SGLang's titles
    (`sglang::scheduler_TP0`, `sglang::detokenizer`, `python -m sglang.launch_server`) while
    the daemon starts attempts whose children have the same titles, sees one crash with
    orphans left behind, one lose its detokenizer (children ignore SIGTERM, so it SIGKILLs),
    relaunches, and finally stops. Must survive: no decoy receives any signal or dies; every
    process of every attempt is gone at the end."""
    titles = ["sglang::scheduler_TP0", "sglang::detokenizer"]
    config = load_config(
        write_config(
            tmp_path,
            {"child": titles, "child-ignores-sigterm": True},
            profiles=[
                {
                    "name": "bad-flag",
                    "set": {
                        "line": ["launch_server.py: error: unrecognized arguments: --x"],
                        "sleep": 1.0,
                        "exit-code": 2,
                    },
                },
                {"name": "steady", "set": {"child-dies-once": str(tmp_path / "died-once")}},
            ],
            policy={"max_attempts": 5},
            registry=launchers.path,
        )
    )
    running = supervise(config)
    running.wait(lambda: len(attempts(config)) == 3, "the crash, the lost child, the relaunch")
    running.wait(lambda: len(running.daemon.attempt.processes.refresh()) == 3, "three members")
    running.stop()
    history = attempts(config)
    assert [a.profile for a in history] == ["bad-flag", "steady", "steady"]
    assert [a.failure_class for a in history] == ["invalid_argument", "killed_by_signal", "none"]
    assert "sglang::detokenizer" in history[1].diagnosis
    assert not launchers.members(), "a process of an attempt survived"
    for proc, signals in decoys:
        assert proc.poll() is None, f"decoy {proc.args[0]} died"
        received = signals.read_text().split() if signals.exists() else []
        assert received == [], f"decoy {proc.args[0]} received signals {received}"


# --- security --------------------------------------------------------------------------------


def test_metrics_listen_only_on_the_configured_address(tmp_path, launchers, daemons):
    """Breaks: a client tries the metrics port on other local addresses. Must survive: the
    daemon listens on 127.0.0.1:P and nowhere else (127.0.0.2:P and [::1]:P are refused; its
    only listening socket is 127.0.0.1:P)."""
    port = free_port()
    path = write_config(
        tmp_path, {"sleep": 300.0}, listen=f"127.0.0.1:{port}", registry=launchers.path
    )
    daemon = daemons.start(path)
    wait_for(lambda: scrape(f"127.0.0.1:{port}") is not None, "/metrics on 127.0.0.1")
    with socket.socket() as other, pytest.raises(ConnectionRefusedError):
        other.settimeout(10)
        other.connect(("127.0.0.2", port))
    if socket.has_ipv6:
        with socket.socket(socket.AF_INET6) as v6, pytest.raises(OSError):
            v6.settimeout(10)
            v6.connect(("::1", port))
    listening = {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process(daemon.popen.pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    }
    assert listening == {("127.0.0.1", port)}
    assert daemon.terminate() == 0
    assert not launchers.members()


UNPRIVILEGED = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def runs_unprivileged(python: str, code: str) -> bool:
    """Whether uid 65534 can execute ``python`` as the daemon would: execve from a process
    already running as that user (setpriv itself may exec what its user could not)."""
    done = subprocess.run(
        [*UNPRIVILEGED, "/bin/sh", "-c", 'exec "$0" -c "$1"', python, code],
        cwd="/",
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    return done.returncode == 0


def test_daemon_runs_unprivileged(launchers, daemons):
    """Breaks: the daemon runs as nobody (setpriv --reuid=65534 --regid=65534
    --clear-groups) in world-writable directories, supervising a program that needs no
    privilege. Must survive: it launches the program (as nobody too), records the attempt
    in its history (owned by nobody), serves /metrics, and SIGTERM stops everything with
    status 0. When the tests themselves run without root, the daemon runs as is."""
    root = os.geteuid() == 0
    prefix = UNPRIVILEGED if root else []
    # The launched interpreter must be one nobody may execute (a venv under /root is not).
    candidates = [sys.executable, "/usr/bin/python3", shutil.which("python3") or ""]
    python = next(
        (c for c in candidates if c and (not root or runs_unprivileged(c, "import argparse"))),
        None,
    )
    assert python, f"no Python that uid 65534 may run among {candidates}"
    base = Path(tempfile.mkdtemp(prefix="sentinel-unprivileged-", dir="/tmp"))
    try:
        os.chmod(base, 0o777)
        registry = Launchers(base / "launchers")
        launchers.path = registry.path  # the fixture's teardown reaps these too
        report = base / "report.json"
        path = write_config(base, {"sleep": 300.0, "report": str(report)}, registry=registry.path)
        path.write_text(path.read_text().replace(toml(sys.executable), toml(python), 1))
        config = load_config(path)
        daemon = daemons.start(path, prefix=prefix)
        try:
            wait_for(lambda: report.exists() and attempts(config), "the launch, recorded")
            wait_for(lambda: state_of(config.metrics.address) == "starting", "/metrics")
        except AssertionError as error:
            raise AssertionError(f"{error}; the daemon said:\n{daemon.stderr()[-3000:]}") from None
        expected = 65534 if root else os.geteuid()
        assert psutil.Process(daemon.popen.pid).uids().effective == expected
        assert json.loads(report.read_text())["uid"] == expected
        assert History(config.paths.state_dir).path.stat().st_uid == expected
        assert daemon.terminate() == 0, daemon.stderr()[-3000:]
        (record,) = attempts(config)
        assert record.stopped_by == "daemon" and record.failure_class == "none"
        assert not launchers.members()
    finally:
        launchers.reap()
        shutil.rmtree(base, ignore_errors=True)


def secrets_config(tmp_path: Path, launchers: Launchers, args: dict, **kw) -> Path:
    return write_config(
        tmp_path,
        {"api-key": SECRET_KEY, **args},
        env={"HF_TOKEN": SECRET_TOKEN},
        registry=launchers.path,
        **kw,
    )


def assert_no_secret(where: str, text: str) -> None:
    for secret in (SECRET_KEY, SECRET_TOKEN):
        assert secret not in text, f"{secret} appears in {where}"
        assert secret[-8:] not in text, f"part of {secret} appears in {where}"


def test_secrets_stay_out_of_metrics_history_and_the_daemon_log(tmp_path, launchers, daemons):
    """Breaks: the config holds secrets: `api-key` in [sglang.args], HF_TOKEN in
    [sglang.env]; the server crashes once, is relaunched on the next profile, serves and is
    stopped; the daemon logs at DEBUG. Must survive: SGLang receives both secrets, and
    neither appears in the history, the daemon's own log (its stderr) or a /metrics scrape."""
    report = tmp_path / "report.json"
    path = secrets_config(
        tmp_path,
        launchers,
        {"report": str(report), "sleep": 300.0},
        profiles=[
            {
                "name": "crashing",
                "set": {"line": ["RuntimeError: boom"], "sleep": 0.3, "exit-code": 1},
            },
            {
                "name": "steady",
                "set": {"line": ["[2026-01-01 10:00:00] Init torch distributed begin."]},
            },
        ],
        policy={"max_attempts": 5},
    )
    config = load_config(path)
    daemon = daemons.start(path, log_level="DEBUG")
    wait_for(
        lambda: len(attempts(config)) == 2 and state_of(config.metrics.address) == "starting",
        "the relaunch on profile 'steady'",
    )
    exposition = scrape(config.metrics.address)
    assert daemon.terminate() == 0
    received = json.loads(report.read_text())
    assert received["api_key_sha256"] == _sha256(SECRET_KEY), "SGLang did not get --api-key"
    assert received["hf_token_sha256"] == _sha256(SECRET_TOKEN), "SGLang did not get HF_TOKEN"
    assert attempts(config)[0].failure_class == "other"
    assert "***" in attempts(config)[0].command
    assert_no_secret("/metrics", exposition)
    assert_no_secret("the history", History(config.paths.state_dir).path.read_text())
    assert_no_secret("the daemon's log", daemon.stderr())


def test_secret_echoed_by_sglang_stays_out_of_the_history(tmp_path, launchers, daemons):
    """Breaks: SGLang 0.5.9 logs `server_args=ServerArgs(..., api_key='...')` in clear at
    startup (engine.py: logger.info(f"{server_args=}")); here that is the last line before
    the server is SIGKILLed (the OOM killer during its imports), so it becomes the root-cause
    line. Must survive: the configured secret stays out of the history and the daemon's log
    (the README: secrets "are masked in the history and the daemon's log")."""
    path = secrets_config(
        tmp_path,
        launchers,
        {"echo-server-args": True, "kill-self": True},
        policy={"max_attempts": 1},
    )
    config = load_config(path)
    daemon = daemons.start(path, log_level="DEBUG")
    wait_for(lambda: state_of(config.metrics.address) == "gave_up", "gave_up")
    assert daemon.terminate() == 0
    (record,) = attempts(config)
    assert record.failure_class == "killed_by_signal"
    assert_no_secret("the history", History(config.paths.state_dir).path.read_text())
    assert_no_secret("the daemon's log", daemon.stderr())


def test_masking_keeps_the_flags_that_are_not_secrets():
    """Breaks: nothing; the other side of masking secrets. Must survive: flags whose names
    merely contain "token" or "key" as part of another word keep their values in what the
    history and the daemon's log show (--max-total-tokens is the number an operator reads
    to understand a pool OOM; --tokenizer-path a path), while real secrets are masked."""
    argv = [
        "python", "-m", "sglang.launch_server",
        "--max-total-tokens", "4096",
        "--max-prefill-tokens", "16384",
        "--speculative-num-draft-tokens", "4",
        "--tokenizer-path", "/models/tok",
        "--api-key", SECRET_KEY,
        "--admin-api-key=" + SECRET_KEY,
        "--hf-token", SECRET_TOKEN,
    ]  # fmt: skip
    assert redact_command(argv) == [
        "python", "-m", "sglang.launch_server",
        "--max-total-tokens", "4096",
        "--max-prefill-tokens", "16384",
        "--speculative-num-draft-tokens", "4",
        "--tokenizer-path", "/models/tok",
        "--api-key", "***",
        "--admin-api-key=***",
        "--hf-token", "***",
    ]  # fmt: skip


def _sha256(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


# --- kill -9 of the daemon at its worst moments ------------------------------------------------

DIE_BEFORE_START_RECORD = """
import os, signal, sys
from exporter import history
from exporter.cli import main
append = history.History.append
def append_or_die(self, record):
    if record.get("type") == "start":
        os.kill(os.getpid(), signal.SIGKILL)  # kill -9 after the spawn, before its record
    return append(self, record)
history.History.append = append_or_die
sys.exit(main(sys.argv[1:]))
"""


def test_kill_9_between_spawn_and_start_record_leaves_no_untracked_server(
    tmp_path, launchers, daemons
):
    """Breaks: kill -9 of the daemon after it spawned SGLang and before the attempt's start
    record is durable (the daemon is killed from inside History.append, so the moment is
    exact). Must survive: the restarted daemon does not leave that server running untracked
    beside a second launch of the same attempt id and log file (two SGLangs on one port and
    one GPU), and after SIGTERM no launcher is left."""
    path = write_config(tmp_path, {"sleep": 300.0}, registry=launchers.path)
    config = load_config(path)
    first = daemons.start(path, python_args=["-c", DIE_BEFORE_START_RECORD])
    assert first.popen.wait(timeout=TIMEOUT_S) == -signal.SIGKILL
    wait_for(lambda: launchers.all(), "the launcher spawned before the kill")
    assert attempts(config) == []

    second = daemons.start(path)
    wait_for(lambda: attempts(config), "the restarted daemon's attempt")
    recorded = leaders(config)
    untracked = [launcher for launcher in launchers.alive() if launcher not in recorded]
    assert second.terminate() == 0
    alive = launchers.alive()
    assert not untracked, f"a launcher runs that no history record knows: {untracked}"
    assert not alive, f"launchers left after SIGTERM: {alive}"


def test_adopted_server_that_serves_gets_its_ready_record(tmp_path, launchers, daemons):
    """Breaks: kill -9 of the daemon after the log said ready but before /health answered
    200 (so before the `ready` record). Must survive: the restarted daemon adopts the server,
    sees it healthy, and the history records that the attempt served (ready_at), as for
    every attempt that serves (exporter/history: "a ready record once it serves"); the policy's
    healthy_reset_s and `sglang-sentinel history` depend on it."""
    healthy = tmp_path / "healthy"
    port = free_port()
    path = write_config(
        tmp_path,
        {"line": [READY_LINE], "serve": True, "port": port, "health-ok-when": str(healthy)},
        registry=launchers.path,
    )
    config = load_config(path)
    address = config.metrics.address
    first = daemons.start(path)

    def probed_unhealthy() -> bool:
        text = scrape(address)
        sample = ("sglang_sentinel_health_probe_success", (("probe", "health"),))
        return text is not None and samples(text).get(sample) == 0

    wait_for(probed_unhealthy, "a failed health probe after the log said ready")
    assert state_of(address) == "starting"
    first.kill9()
    healthy.touch()

    second = daemons.start(path)
    wait_for(lambda: state_of(address) == "ready", "the adopted server, ready")
    assert len(attempts(config)) == 1, "the restarted daemon launched instead of adopting"
    assert second.terminate() == 0
    (record,) = attempts(config)
    assert record.stopped_by == "daemon"
    assert not launchers.members()
    assert record.ready_at is not None, "the adopted attempt served, but no ready record"


def test_adoption_does_not_lose_log_lines_written_while_it_probes(tmp_path, launchers, daemons):
    """Breaks: kill -9 of the daemon during startup; the restarted daemon replays the log,
    then probes /health (up to 35 s with the default timeouts), then follows the log from its
    end. SGLang prints `ready to roll` in between (here: when the first /health arrives).
    Must survive: no line is lost between the replay and the follow: the daemon sees the
    ready line and calls the server ready (instead of waiting for the startup timeout and
    killing a healthy server as hung). health_interval_s is long so that only the restarted
    daemon's own adoption probe triggers the line."""
    port = free_port()
    path = write_config(
        tmp_path,
        {
            "line": ["[2026-01-01 10:00:00] Init torch distributed begin."],
            "serve": True,
            "port": port,
            "ready-on-first-health": True,
            "first-health-delay": 2.0,
        },
        policy={"health_interval_s": 600.0, "startup_timeout_s": 300.0},
        registry=launchers.path,
    )
    config = load_config(path)
    first = daemons.start(path)

    def listening() -> bool:
        with socket.socket() as sock:
            sock.settimeout(2)
            return sock.connect_ex(("127.0.0.1", port)) == 0

    wait_for(lambda: attempts(config) and listening(), "the server listening")
    first.kill9()
    second = daemons.start(path)
    log = Path(attempts(config)[0].log)
    wait_for(lambda: READY_LINE in log.read_text(), "the ready line, during adoption")
    try:
        wait_for(lambda: state_of(config.metrics.address) == "ready", "ready after adoption", 30)
    finally:
        assert second.terminate() == 0
        assert len(attempts(config)) == 1
        assert not launchers.members()


def test_a_dead_scheduler_of_an_adopted_server_is_noticed(tmp_path, launchers, daemons):
    """Breaks: kill -9 of the daemon while SGLang serves; then, under the restarted daemon,
    the adopted server's scheduler dies while its launcher lives on (0.5.9 never notices and
    hangs every request). Must survive: the restarted daemon found the adopted attempt's
    children and watches them as its own: it ends the attempt as killed_by_signal naming
    the scheduler, relaunches, and leaves nothing behind."""
    port = free_port()
    path = write_config(
        tmp_path,
        {
            "line": [READY_LINE],
            "serve": True,
            "port": port,
            "child": ["sglang::scheduler_TP0", "sglang::detokenizer"],
        },
        registry=launchers.path,
    )
    config = load_config(path)
    address = config.metrics.address
    first = daemons.start(path)
    wait_for(lambda: state_of(address) == "ready", "the first daemon's server, ready")
    first.kill9()
    second = daemons.start(path)
    wait_for(lambda: "adopted the running server" in second.stderr(), "the adoption")
    assert len(attempts(config)) == 1, "the restarted daemon launched instead of adopting"
    (scheduler,) = [
        proc for proc in launchers.members() if proc.cmdline()[:1] == ["sglang::scheduler_TP0"]
    ]
    scheduler.kill()  # a process of the daemon's own attempt, by its pid (psutil checks it)
    wait_for(lambda: len(attempts(config)) == 2, "the lost scheduler noticed, a relaunch")
    ended = attempts(config)[0]
    assert ended.failure_class == "killed_by_signal"
    assert "sglang::scheduler" in ended.diagnosis
    assert second.terminate() == 0
    assert not launchers.members()


def test_requests_waiting_with_no_batch_line_is_a_hang_whatever_uvicorn_logs(
    tmp_path, launchers, supervise
):
    """Breaks: a server that answers /health but whose scheduler runs nothing while requests
    wait (/v1/loads says 2), and whose log never falls silent: uvicorn logs every request,
    the daemon's own probes included. Must survive: the hang is seen all the same (no batch
    line for hang_timeout_s), the attempt ends as hang_timeout with that evidence, and the
    daemon relaunches."""
    port = free_port()
    path = write_config(
        tmp_path,
        {"line": [READY_LINE], "serve": True, "port": port, "waiting": 2, "access-log": True},
        policy={"hang_timeout_s": 3.0, "health_interval_s": 0.3},
        registry=launchers.path,
    )
    config = load_config(path)
    running = supervise(config)
    running.wait(lambda: len(attempts(config)) >= 2, "the hang, and a relaunch")
    running.stop()
    hung = attempts(config)[0]
    assert hung.failure_class == "hang_timeout"
    assert "2 request(s) waiting, no batch line for" in hung.diagnosis
    log = Path(hung.log).read_text()
    assert log.count('"GET /health HTTP/1.1" 200') >= 5, "the log did not stay busy"
    assert not launchers.members()


def test_loads_is_asked_only_while_the_scheduler_logs_no_batch(tmp_path, launchers, supervise):
    """Breaks nothing: a healthy server that, like SGLang, logs a prefill batch for each
    /health it answers. Must hold: /v1/loads (needed only to tell a stuck queue) is asked
    once for the new server and then no more while batch lines keep coming; health every
    interval; no hang is called."""
    port = free_port()
    path = write_config(
        tmp_path,
        {
            "line": [READY_LINE],
            "serve": True,
            "port": port,
            "access-log": True,
            "health-batch-line": True,
        },
        policy={"health_interval_s": 0.2, "hang_timeout_s": 1.0},
        registry=launchers.path,
    )
    config = load_config(path)
    running = supervise(config)
    log_path = config.paths.log_dir / "attempt-000001.log"

    def healths() -> int:
        return log_path.read_text().count('"GET /health HTTP/1.1" 200') if log_path.exists() else 0

    running.wait(lambda: healths() >= 15, "fifteen health probes")
    running.stop()
    text = log_path.read_text()
    # The first ask, for the new server; maybe one more before its first batch line was read.
    assert text.count('"GET /v1/loads HTTP/1.1"') <= 3, "loads asked while batches came"
    history = attempts(config)
    assert len(history) == 1 and history[0].failure_class == "none", "a working server hung?"
    assert not launchers.members()
