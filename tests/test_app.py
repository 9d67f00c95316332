"""The composition root: the daemon's sources are wired to the daemon they serve, one server
shows whichever daemon runs now (the demo's two runs), and what starting allocated is out of
the collector's reach before the loop runs."""

from __future__ import annotations

import gc

import httpx

from exporter import app
from exporter.app import build_daemon, serve
from exporter.attempt.states import ServerState
from exporter.config import load_config
from exporter.supervisor.daemon import Daemon
from tests.conftest import free_port
from tests.supervisor.test_daemon import in_thread, stop, wait_for, write


def test_the_process_collector_follows_the_attempt_of_its_daemon(tmp_path):
    daemon = build_daemon(load_config(write(tmp_path, {"sleep": 600.0})))
    processes = daemon.sources["processes"]
    assert processes.collect().processes == ()  # no attempt yet
    thread = in_thread(daemon)
    try:
        wait_for(lambda: daemon.state is ServerState.STARTING)
        leader = daemon.attempt.processes.leader
        seen = processes.collect().processes
        assert [p.identity for p in seen if p.identity.pid == leader.pid] == [leader]
    finally:
        stop(daemon, thread)


def test_one_server_shows_whichever_daemon_is_current(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    crashing = write(tmp_path / "a", {"exit-code": 1}, policy={"max_attempts": 1})
    first = build_daemon(load_config(crashing))
    second = build_daemon(load_config(write(tmp_path / "b", {"sleep": 600.0})))
    current = [first]
    port = free_port()
    server = serve("127.0.0.1", port, lambda: current[-1])
    thread = in_thread(first)
    try:
        wait_for(lambda: first.state is ServerState.GAVE_UP)
        assert 'server_state{state="gave_up"} 1' in scrape(port, "/metrics")
        assert '"state": "gave_up"' in scrape(port, "/status")
        current.append(second)
        assert 'server_state{state="stopped"} 1' in scrape(port, "/metrics")
        assert '"state": "stopped"' in scrape(port, "/status")
    finally:
        stop(first, thread)
        server.shutdown()
        server.server_close()


def test_settling_takes_what_lives_now_out_of_the_collectors_scans():
    long_lived = [[index] for index in range(5_000)]  # containers: the collector tracks them
    try:
        app.settle()
        assert gc.get_freeze_count() >= len(long_lived)
        scanned = {id(obj) for obj in gc.get_objects()}
        assert id(long_lived) not in scanned and id(long_lived[0]) not in scanned
        later = [long_lived]  # what the loop allocates from now on is scanned as before
        assert id(later) in {id(obj) for obj in gc.get_objects()}
    finally:
        gc.unfreeze()


def test_run_settles_before_its_loop_starts(tmp_path, monkeypatch):
    order: list[str] = []
    monkeypatch.setattr(app, "settle", lambda: order.append("settle"))
    monkeypatch.setattr(app.signals, "install", lambda daemon: None)  # not this test's handlers
    monkeypatch.setattr(Daemon, "run", lambda self: order.append("loop") or 0)
    assert app.run(load_config(write(tmp_path, {"sleep": 600.0}))) == 0
    assert order == ["settle", "loop"]


def scrape(port: int, path: str) -> str:
    return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=5, trust_env=False).text
