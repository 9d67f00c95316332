"""ExitWatch: the daemon's loop sleeps on pidfds and an eventfd. Each test starts its own
short-lived child processes and ends them by their pid."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from exporter.identity import ProcessIdentity, identify
from exporter.supervisor.exits import ExitWatch

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen]]:
    started: list[subprocess.Popen] = []
    yield started
    for child in started:
        child.kill()
        child.wait()


@pytest.fixture
def watch() -> Iterator[ExitWatch]:
    made = ExitWatch()
    yield made
    made.close()


def start(children: list[subprocess.Popen]) -> tuple[subprocess.Popen, ProcessIdentity]:
    child = subprocess.Popen(SLEEPER)
    children.append(child)
    identity = identify(child.pid)
    assert identity is not None
    return child, identity


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_an_exit_ends_the_wait_at_once_and_is_reported_once(watch, children):
    child, identity = start(children)
    _other, other = start(children)
    watch.watch(identity)
    watch.watch(other)
    threading.Timer(0.2, child.kill).start()
    started = time.monotonic()
    assert watch.wait(30.0) == [identity]
    assert time.monotonic() - started < 10.0, "woke by the exit, not by the 30 s timeout"
    assert watch.wait(0.05) == []  # reported once, the other still running


def test_a_wake_from_another_thread_ends_the_wait_with_nothing_gone(watch, children):
    _child, identity = start(children)
    watch.watch(identity)
    threading.Timer(0.2, watch.wake).start()
    started = time.monotonic()
    assert watch.wait(30.0) == []
    assert time.monotonic() - started < 10.0
    assert watch.wait(0.01) == []  # the wake was drained, not left to end the next wait


def test_a_wake_before_the_wait_is_not_lost(watch):
    watch.wake()
    started = time.monotonic()
    assert watch.wait(30.0) == []
    assert time.monotonic() - started < 10.0


def test_a_process_gone_before_it_was_watched_is_reported(watch, children):
    child, identity = start(children)
    child.kill()
    child.wait()  # reaped: the pid is free
    watch.watch(identity)
    assert watch.wait(0.0) == [identity]


def test_a_pid_now_held_by_another_process_is_reported_gone(watch, children):
    """The identity's pid is alive but holds a process started at another time: the watch
    must not take that stranger for ours."""
    _child, identity = start(children)
    impostor = ProcessIdentity(identity.pid, identity.start_ticks - 100)
    watch.watch(impostor)
    assert watch.wait(0.0) == [impostor]
    assert children[0].poll() is None, "the stranger was not touched"


def test_forget_all_stops_reporting_and_closes_the_pidfds(watch, children):
    before = open_fds()
    child, identity = start(children)
    watch.watch(identity)
    assert len(open_fds() - before) >= 1
    watch.forget_all()
    child.kill()
    child.wait()
    assert watch.wait(0.05) == []
    assert open_fds() - before == set()


def test_without_pidfds_a_process_is_checked_at_each_wake(watch, children, monkeypatch):
    def refused(pid: int, flags: int = 0) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", refused)
    child, identity = start(children)
    watch.watch(identity)
    assert watch.wait(0.0) == []
    child.kill()
    child.wait()
    assert watch.wait(0.0) == [identity]
    assert watch.wait(0.0) == []


def test_close_releases_every_descriptor(children):
    before = open_fds()
    made = ExitWatch()
    made.watch(start(children)[1])
    made.close()
    assert open_fds() - before == set()
    made.close()  # idempotent
    made.wake()  # a signal after the loop ended: ignored, not a write to a reused fd


def test_a_readable_wakeup_fd_ends_the_wait_and_is_drained():
    """Python's signal wakeup pipe: a signal the kernel handed to another thread writes a
    byte there, and the sleeping loop wakes (its Python handler then runs on the main
    thread). Drained: the next wait sleeps again."""
    readable, writable = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    watch = ExitWatch()
    try:
        watch.wake_on(readable)
        os.write(writable, b"\x11\x11")
        started = time.monotonic()
        assert watch.wait(5.0) == []
        assert time.monotonic() - started < 1.0
        started = time.monotonic()
        watch.wait(0.3)
        assert time.monotonic() - started >= 0.25
    finally:
        watch.close()
        os.close(readable)
        os.close(writable)
