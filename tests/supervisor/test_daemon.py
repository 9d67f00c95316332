"""The daemon's state machine, policy and persistence, driven by a scripted launcher.

SGLang's own behaviour is covered by tests/e2e against the real server; here the launched
program is tests/harness/scripted.py, so crash loops, timeouts, reloads and kill -9 of the
daemon run in seconds.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from exporter.app import build_daemon
from exporter.attempt.states import ServerState
from exporter.config import load_config
from exporter.history import History
from exporter.identity import ProcessIdentity
from exporter.notify import Notifier
from exporter.supervisor.daemon import Daemon
from tests.conftest import free_port

REPO = Path(__file__).resolve().parents[2]


def write(
    tmp_path: Path,
    args: dict,
    policy: dict | None = None,
    python: str = sys.executable,
    profiles: str = "",
) -> Path:
    rules = {
        "startup_timeout_s": 30.0,
        "backoff_base_s": 0.05,
        "backoff_cap_s": 0.1,
        "max_attempts": 3,
        "window_s": 600.0,
        "stop_grace_s": 2.0,
        **(policy or {}),
    }
    lines = [
        "[sglang]",
        f"python = {json.dumps(python)}",
        'module = "tests.harness.scripted"',
        f"workdir = {json.dumps(str(REPO))}",
        "[sglang.args]",
    ]
    for key, value in args.items():
        lines.append(f"{key} = {json.dumps(value)}")
    lines += ["[sglang.env]", f"PYTHONPATH = {json.dumps(str(REPO))}", profiles, "[policy]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in rules.items()]
    lines += ["[metrics]", f'listen = "127.0.0.1:{free_port()}"']
    lines += ["[paths]", 'state_dir = "state"', 'log_dir = "logs"']
    path = tmp_path / "sentinel.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def metrics_answer(config) -> bool:
    try:
        return httpx.get(
            f"http://{config.metrics.address}/metrics", timeout=2, trust_env=False
        ).is_success
    except httpx.HTTPError:
        return False


def in_thread(daemon: Daemon) -> threading.Thread:
    thread = threading.Thread(target=daemon.run, daemon=True)
    thread.start()
    return thread


def wait_for(predicate, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def stop(daemon: Daemon, thread: threading.Thread) -> None:
    daemon.request_stop()
    thread.join(timeout=30)
    assert not thread.is_alive()


def identities(config) -> list[ProcessIdentity]:
    return [
        ProcessIdentity.from_json(p)
        for a in History(config.paths.state_dir).read().attempts
        for p in a.processes
    ]


def test_crash_loop_limit_gives_up_and_survives_a_daemon_restart(tmp_path):
    """Breaks: a server that dies at once, every time. Must hold: exactly max_attempts
    launches with growing backoff, gave_up, and a restarted daemon does not launch again."""
    config = load_config(write(tmp_path, {"line": "RuntimeError: boom", "exit-code": 1}))
    daemon = build_daemon(config)
    thread = in_thread(daemon)
    wait_for(lambda: daemon.state is ServerState.GAVE_UP)
    stop(daemon, thread)
    attempts = History(config.paths.state_dir).read().attempts
    assert [a.failure_class for a in attempts] == ["other"] * 3
    assert [a.exit_code for a in attempts] == [1, 1, 1]
    assert "crash-loop limit" in daemon.gave_up_reason
    assert "retrying profile 'default' in 0.05 s" in attempts[0].decision
    assert "in 0.1 s" in attempts[1].decision  # doubled, then capped

    again = build_daemon(load_config(config.source))
    thread = in_thread(again)
    wait_for(lambda: again.state is ServerState.GAVE_UP, 10)
    stop(again, thread)
    assert len(History(config.paths.state_dir).read().attempts) == 3


def test_startup_timeout_is_a_hang_and_the_process_is_stopped(tmp_path):
    """Breaks: a launcher that never becomes ready and ignores SIGTERM. Must hold:
    hang_timeout naming the last line, the process SIGKILLed, nothing left."""
    path = write(
        tmp_path,
        {
            "line": "[2026-01-01 10:00:00] Init torch distributed begin.",
            "sleep": 600.0,
            "ignore-sigterm": True,
        },
        policy={"startup_timeout_s": 1.0, "max_attempts": 1},
    )
    config = load_config(path)
    daemon = build_daemon(config)
    thread = in_thread(daemon)
    wait_for(lambda: daemon.state is ServerState.GAVE_UP)
    stop(daemon, thread)
    (attempt,) = History(config.paths.state_dir).read().attempts
    assert attempt.failure_class == "hang_timeout"
    assert attempt.root_cause_line == "[2026-01-01 10:00:00] Init torch distributed begin."
    assert not any(i.alive() for i in identities(config))


def test_deterministic_failure_moves_down_the_ladder_to_a_profile_that_changes_the_command(
    tmp_path,
):
    """A deterministic class (invalid_argument) is not retried unchanged: the next profile
    with the same command is skipped, the one that changes it is launched."""
    profiles = "\n".join(
        [
            "[[profiles]]",
            'name = "first"',
            "[[profiles]]",
            'name = "same"',
            "[[profiles]]",
            'name = "fixed"',
            'set = { "exit-code" = 3, line = "RuntimeError: other" }',
        ]
    )
    path = write(
        tmp_path,
        {"line": "launch_server.py: error: unrecognized arguments: --x", "exit-code": 2},
        profiles=profiles,
    )
    config = load_config(path)
    daemon = build_daemon(config)
    thread = in_thread(daemon)
    wait_for(lambda: daemon.state is ServerState.GAVE_UP)
    stop(daemon, thread)
    attempts = History(config.paths.state_dir).read().attempts
    assert [a.profile for a in attempts][:2] == ["first", "fixed"]
    assert attempts[0].failure_class == "invalid_argument"
    assert "falling back from profile 'first' to 'fixed'" in attempts[0].decision


def test_missing_interpreter_is_recorded_not_fatal(tmp_path):
    config = load_config(write(tmp_path, {"exit-code": 0}, python=str(tmp_path / "no-python")))
    daemon = build_daemon(config)
    thread = in_thread(daemon)
    wait_for(lambda: daemon.state is ServerState.GAVE_UP)
    stop(daemon, thread)
    (attempt,) = History(config.paths.state_dir).read().attempts
    assert attempt.failure_class == "invalid_argument"
    assert "no-python" in attempt.root_cause_line


def test_sighup_reload_keeps_a_bad_config_and_applies_a_good_one(tmp_path):
    """A malformed config on reload is reported and the running one kept; a valid one that
    changes the command restarts the server (counted as restarts{reason=config_reload})."""
    path = write(tmp_path, {"sleep": 600.0})
    config = load_config(path)
    daemon = build_daemon(config)
    thread = in_thread(daemon)
    wait_for(lambda: daemon.state is ServerState.STARTING)
    path.write_text(path.read_text() + "\n[policy\n")
    daemon.request_reload()
    time.sleep(0.5)
    assert daemon.config is config and len(History(config.paths.state_dir).read().attempts) == 1
    path.write_text(write(tmp_path, {"sleep": 500.0}).read_text())
    daemon.request_reload()
    wait_for(lambda: len(History(config.paths.state_dir).read().attempts) == 2)
    wait_for(lambda: daemon.state is ServerState.STARTING)
    assert daemon.snapshot().restarts == {"config_reload": 1}
    stop(daemon, thread)
    attempts = History(config.paths.state_dir).read().attempts
    assert [a.stopped_by for a in attempts] == ["daemon", "daemon"]
    assert not any(i.alive() for i in identities(config))


def test_history_survives_kill_9_of_the_daemon_at_random_moments(tmp_path):
    """Breaks: kill -9 of the daemon, 10 times at random points of attempts' lives. Must
    hold: the history always reads back (at most a cut last line), attempt ids never repeat,
    every attempt is concluded (by the daemon that saw it end, or the next one), and after a
    clean stop no attempt process is left."""
    path = write(
        tmp_path,
        {"line": "RuntimeError: boom", "sleep": 0.3, "exit-code": 1},
        policy={"max_attempts": 1000},
    )
    config = load_config(path)
    command = [sys.executable, "-m", "exporter.cli", "run", "--config", str(path)]
    rng = random.Random(7)
    for _ in range(10):
        daemon = subprocess.Popen(command, start_new_session=True, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, 1.5))
        daemon.kill()
        daemon.wait(timeout=10)
        read = History(config.paths.state_dir).read()
        assert read.corrupt_lines <= 1
        ids = [a.attempt for a in read.attempts]
        assert ids == sorted(set(ids))
    daemon = subprocess.Popen(command, start_new_session=True, stderr=subprocess.DEVNULL)
    # SIGTERM once it supervises: its handlers are in place before its first launch (on a
    # loaded machine the interpreter's start alone can take over a second)
    before = max(ids, default=0)

    def launched() -> bool:
        return any(a.attempt > before for a in History(config.paths.state_dir).read().attempts)

    wait_for(launched, 30)
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(timeout=30) == 0
    wait_for(lambda: not any(i.alive() for i in identities(config)), 10)
    attempts = History(config.paths.state_dir).read().attempts
    assert attempts and all(a.ended for a in attempts), "an attempt was never concluded"


def test_the_daemon_speaks_sd_notify_and_a_stalled_loop_stops_the_watchdog(tmp_path, monkeypatch):
    """READY once supervising, STATUS on state changes, WATCHDOG pings from the main loop
    only: while tick() is stuck, no ping arrives; after it, they resume."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify"))
    sock.settimeout(0.2)
    notifier = Notifier(str(tmp_path / "notify"), watchdog_usec=400_000)  # pings every 0.2 s
    config = load_config(write(tmp_path, {"sleep": 600.0}))
    daemon = build_daemon(config, notifier=notifier)
    stall = threading.Event()
    real_tick = daemon.tick

    def tick() -> None:
        while stall.is_set():  # the main loop is stuck (say, in a blocking call)
            time.sleep(0.05)
        real_tick()

    monkeypatch.setattr(daemon, "tick", tick)
    thread = in_thread(daemon)

    def messages(seconds: float) -> list[str]:
        got, deadline = [], time.monotonic() + seconds
        while time.monotonic() < deadline:
            with contextlib.suppress(TimeoutError):
                got.append(sock.recv(4096).decode())
        return got

    try:
        first = messages(2.0)
        assert any("READY=1" in m for m in first)
        assert any("STATUS=starting: profile default, attempt 1" in m for m in first)
        assert any(m == "WATCHDOG=1" for m in first)
        stall.set()
        time.sleep(0.5)  # a ping already in flight may still land
        messages(0.3)
        assert not any(m == "WATCHDOG=1" for m in messages(2.0)), "pinged while stalled"
        stall.clear()
        assert any(m == "WATCHDOG=1" for m in messages(2.0)), "no pings after the stall"
        stop(daemon, thread)
        assert any("STOPPING=1" in m for m in messages(0.5))
    finally:
        stall.clear()
        if thread.is_alive():
            stop(daemon, thread)
        sock.close()


def test_automatic_remedies_act_only_on_a_confident_class(tmp_path):
    """A graph-capture OOM named by its wrapper is remedied (fewer graph batch sizes); a bare
    PyTorch OOM line, which the log does not place (weights, pool, graphs or serving?), is
    retried per policy without a remedy, and the decision says why."""

    def run(line: str) -> list:
        home = tmp_path / str(abs(hash(line)))
        home.mkdir()
        path = write(home, {"line": line, "exit-code": 1}, policy={"max_attempts": 3})
        config = load_config(path)
        daemon = build_daemon(config)
        thread = in_thread(daemon)
        wait_for(lambda: daemon.state is ServerState.GAVE_UP)
        stop(daemon, thread)
        return History(config.paths.state_dir).read().attempts

    placed = run(
        "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2 GiB"
    )
    assert (placed[0].failure_class, placed[0].confidence) == ("cuda_graph_oom", "high")
    assert "capturing fewer batch sizes" in placed[0].decision
    assert "--cuda-graph-max-bs" in placed[1].command

    bare = run("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.")
    assert [(a.failure_class, a.confidence) for a in bare] == [("runtime_oom", "medium")] * 3
    assert "no automatic remedy: runtime_oom is a medium-confidence reading" in bare[1].decision
    assert bare[0].command == bare[1].command == bare[2].command
