"""sd_notify spoken to a real AF_UNIX datagram socket, the way systemd listens for it.

Every test binds its own socket (in tmp_path, or in the abstract namespace) and passes it
as NOTIFY_SOCKET; what arrives is exactly what systemd would read.
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import threading
import time
import types
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter import notify
from exporter.notify import Notifier, status_line

PID = str(os.getpid())


class Listener:
    """The systemd side: one bound datagram socket."""

    def __init__(self, address: str) -> None:
        self.address = address  # as NOTIFY_SOCKET spells it
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        bind = "\0" + address[1:] if address.startswith("@") else address
        self.sock.bind(bind)

    def receive(self, timeout: float = 2.0) -> str:
        self.sock.settimeout(timeout)
        return self.sock.recv(65536).decode()

    def drain(self, within: float = 0.05) -> list[str]:
        """Every datagram that arrives within ``within`` seconds of the previous one."""
        messages = []
        while True:
            try:
                messages.append(self.receive(within))
            except TimeoutError:
                return messages

    def collect(self, seconds: float) -> list[tuple[float, str]]:
        """(arrival time, message) for every datagram during ``seconds``."""
        messages = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                message = self.receive(left)
            except TimeoutError:
                break
            messages.append((time.monotonic(), message))
        return messages

    def close(self) -> None:
        self.sock.close()
        if not self.address.startswith("@"):
            Path(self.address).unlink(missing_ok=True)


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[Listener]:
    path = tmp_path / "notify.sock"
    if len(os.fsencode(path)) >= 100:  # sun_path holds 108 bytes; a long test name may not fit
        path = Path(tempfile.mkdtemp(prefix="sdnotify-")) / "n.sock"
    listening = Listener(str(path))
    yield listening
    listening.close()


@pytest.fixture
def abstract_listener() -> Iterator[Listener]:
    listening = Listener(f"@sglang-sentinel-test-{uuid.uuid4().hex}")
    yield listening
    listening.close()


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# --- messages -------------------------------------------------------------------------


def test_ready_is_one_datagram_with_ready_and_status(listener: Listener) -> None:
    notifier = Notifier.from_environment({"NOTIFY_SOCKET": listener.address})
    assert notifier.enabled
    assert notifier.ready("ready: profile fewer-requests, attempt 3 (2 failures)")
    assert listener.receive() == (
        "READY=1\nSTATUS=ready: profile fewer-requests, attempt 3 (2 failures)"
    )
    assert listener.drain() == []


def test_abstract_namespace_socket(abstract_listener: Listener) -> None:
    assert abstract_listener.address.startswith("@")
    notifier = Notifier.from_environment({"NOTIFY_SOCKET": abstract_listener.address})
    assert notifier.ready("starting: profile default, attempt 1")
    assert notifier.status("ready: profile default, attempt 1")
    assert abstract_listener.receive() == "READY=1\nSTATUS=starting: profile default, attempt 1"
    assert abstract_listener.receive() == "STATUS=ready: profile default, attempt 1"


def test_status_stopping_and_reload_messages(listener: Listener) -> None:
    notifier = Notifier.from_environment({"NOTIFY_SOCKET": listener.address})
    notifier.status("backoff: profile default, attempt 1 (1 failure)")
    assert listener.receive() == "STATUS=backoff: profile default, attempt 1 (1 failure)"

    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    notifier.reloading("reloading the config")
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    lines = listener.receive().split("\n")
    assert lines[0] == "RELOADING=1"
    assert lines[1].startswith("MONOTONIC_USEC=")
    assert before <= int(lines[1].removeprefix("MONOTONIC_USEC=")) <= after
    assert lines[2:] == ["STATUS=reloading the config"]
    notifier.ready()
    assert listener.receive() == "READY=1"

    notifier.stopping("stopping: profile default, attempt 1")
    assert listener.receive() == "STOPPING=1\nSTATUS=stopping: profile default, attempt 1"
    notifier.stopping()
    assert listener.receive() == "STOPPING=1"


def test_status_is_one_line_and_cannot_inject_assignments(listener: Listener) -> None:
    notifier = Notifier.from_environment({"NOTIFY_SOCKET": listener.address})
    notifier.status("gave_up: port 30000 in use\nREADY=1\r\nSTOPPING=1")
    assert listener.receive() == "STATUS=gave_up: port 30000 in use READY=1 STOPPING=1"
    notifier.status("x" * 5000)
    message = listener.receive()
    assert len(message) == len("STATUS=") + notify.MAX_STATUS_CHARS
    assert message.endswith("...")


def test_status_line() -> None:
    assert (
        status_line("ready", "fewer-requests", 3, 2)
        == "ready: profile fewer-requests, attempt 3 (2 failures)"
    )
    assert status_line("backoff", "default", 1, 1, "relaunching in 2 s") == (
        "backoff: profile default, attempt 1 (1 failure); relaunching in 2 s"
    )
    assert status_line("stopped") == "stopped"


# --- the watchdog -----------------------------------------------------------------------


def test_watchdog_is_rate_limited(listener: Listener) -> None:
    clock = FakeClock()
    notifier = Notifier.from_environment(
        {"NOTIFY_SOCKET": listener.address, "WATCHDOG_USEC": "60000000", "WATCHDOG_PID": PID},
        clock=clock,
    )
    assert notifier.watchdog_interval_s == 60.0
    sent = []
    for tick in range(21):  # 5 s of 0.25 s ticks (exact in binary floating point)
        clock.now = 1000.0 + tick * 0.25
        sent.append(notifier.watchdog())
    # one ping per second of ticks (MAX_WATCHDOG_GAP_S), not one per tick
    assert sent == [True, False, False, False] * 5 + [True]
    assert listener.drain() == ["WATCHDOG=1"] * 6


def test_watchdog_gap_is_half_a_short_interval(listener: Listener) -> None:
    clock = FakeClock()
    notifier = Notifier.from_environment(
        {"NOTIFY_SOCKET": listener.address, "WATCHDOG_USEC": "500000"}, clock=clock
    )
    assert notifier.watchdog_interval_s == 0.5
    assert notifier.watchdog()
    clock.now += 0.125
    assert not notifier.watchdog()
    clock.now += 0.125  # half the interval since the last ping
    assert notifier.watchdog()
    assert listener.drain() == ["WATCHDOG=1", "WATCHDOG=1"]


def test_watchdog_of_another_pid_is_not_ours(listener: Listener) -> None:
    notifier = Notifier.from_environment(
        {
            "NOTIFY_SOCKET": listener.address,
            "WATCHDOG_USEC": "60000000",
            "WATCHDOG_PID": str(os.getpid() + 1),  # we inherited our parent's environment
        }
    )
    assert notifier.watchdog_interval_s is None
    assert not notifier.watchdog()
    assert notifier.ready()  # the rest of the protocol still works
    assert listener.drain() == ["READY=1"]


@pytest.mark.parametrize("usec", ["", "0", "-5", "sixty"])
def test_watchdog_needs_a_positive_interval(listener: Listener, usec: str) -> None:
    notifier = Notifier.from_environment({"NOTIFY_SOCKET": listener.address, "WATCHDOG_USEC": usec})
    assert notifier.watchdog_interval_s is None
    assert not notifier.watchdog()
    assert listener.drain() == []


def test_no_watchdog_without_a_socket() -> None:
    notifier = Notifier.from_environment({"WATCHDOG_USEC": "60000000", "WATCHDOG_PID": PID})
    assert notifier.watchdog_interval_s is None
    assert not notifier.watchdog()


def test_a_stalled_main_loop_stops_the_pings(listener: Listener) -> None:
    """The daemon pings from its loop only: while the loop is stuck, systemd hears nothing."""
    notifier = Notifier.from_environment(
        {"NOTIFY_SOCKET": listener.address, "WATCHDOG_USEC": "200000", "WATCHDOG_PID": PID}
    )
    running = threading.Event()  # cleared: the next tick blocks (a stuck main loop)
    running.set()
    done = threading.Event()

    def main_loop() -> None:
        while not done.is_set():
            running.wait()
            notifier.watchdog()
            time.sleep(0.01)

    thread = threading.Thread(target=main_loop, daemon=True)
    thread.start()
    try:
        before = listener.collect(0.6)
        assert len(before) >= 3  # one per 0.1 s (half the 0.2 s interval)
        assert {message for _, message in before} == {"WATCHDOG=1"}

        running.clear()
        time.sleep(0.1)  # a tick already past running.wait() may still ping once
        listener.drain(0.01)
        stalled = listener.collect(0.8)  # four watchdog intervals
        assert stalled == []

        running.set()
        resumed_at = time.monotonic()
        after = listener.collect(0.5)
        assert len(after) >= 2
        assert after[0][1] == "WATCHDOG=1"
        assert after[0][0] - resumed_at < 0.3
    finally:
        done.set()
        running.set()
        thread.join(timeout=5)


# --- disabled, and failures -----------------------------------------------------------------


def test_no_notify_socket_is_a_silent_no_op(
    listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_socket(*args: object, **kwargs: object) -> None:
        raise AssertionError("a disabled notifier must not open a socket")

    monkeypatch.setattr(notify.socket, "socket", no_socket)
    for notifier in (Notifier.from_environment({}), Notifier.disabled()):
        assert not notifier.enabled
        assert notifier.address is None
        assert notifier.watchdog_interval_s is None
        assert not notifier.ready("ready")
        assert not notifier.status("ready")
        assert not notifier.reloading()
        assert not notifier.stopping("stopping")
        assert not notifier.watchdog()
        notifier.close()
    assert listener.drain() == []


def test_from_environment_reads_os_environ_by_default(
    listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert not Notifier.from_environment().enabled
    monkeypatch.setenv("NOTIFY_SOCKET", listener.address)
    assert Notifier.from_environment().ready()
    assert listener.receive() == "READY=1"


def test_a_relative_socket_path_is_ignored(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="sglang_sentinel.notify"):
        notifier = Notifier.from_environment({"NOTIFY_SOCKET": "notify.sock"})
    assert not notifier.enabled
    assert not notifier.ready()
    assert "notify.sock" in caplog.text


def test_unset_environment_keeps_the_socket_from_children(listener: Listener) -> None:
    env = {
        "NOTIFY_SOCKET": listener.address,
        "WATCHDOG_USEC": "60000000",
        "WATCHDOG_PID": PID,
        "PATH": "/usr/bin",
    }
    notifier = Notifier.from_environment(env, unset_environment=True)
    assert env == {"PATH": "/usr/bin"}  # what SGLang would inherit
    assert notifier.watchdog_interval_s == 60.0
    assert notifier.ready()
    assert listener.receive() == "READY=1"
    with pytest.raises(TypeError):
        Notifier.from_environment(
            types.MappingProxyType({"NOTIFY_SOCKET": listener.address}), unset_environment=True
        )


def test_a_vanished_socket_is_logged_once_and_never_raises(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    listening = Listener(str(tmp_path / "n.sock"))
    notifier = Notifier.from_environment(
        {"NOTIFY_SOCKET": listening.address, "WATCHDOG_USEC": "1000", "WATCHDOG_PID": PID}
    )
    assert notifier.ready("ready")
    assert listening.receive() == "READY=1\nSTATUS=ready"
    listening.close()  # systemd's socket is gone
    with caplog.at_level(logging.DEBUG, logger="sglang_sentinel.notify"):
        for _ in range(5):
            assert not notifier.status("still here")
            assert not notifier.watchdog()
            time.sleep(0.002)
            assert not notifier.stopping()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert "n.sock" in warnings[0].getMessage()

    # The socket comes back (systemd re-executed): messages flow again, at the same path.
    caplog.clear()
    again = Listener(listening.address)
    try:
        with caplog.at_level(logging.INFO, logger="sglang_sentinel.notify"):
            assert notifier.status("back")
        assert again.receive() == "STATUS=back"
        assert "work again" in caplog.text
    finally:
        again.close()
    notifier.close()


def test_an_abstract_socket_nobody_listens_on_does_not_raise(
    caplog: pytest.LogCaptureFixture,
) -> None:
    notifier = Notifier.from_environment({"NOTIFY_SOCKET": f"@nobody-{uuid.uuid4().hex}"})
    with caplog.at_level(logging.WARNING, logger="sglang_sentinel.notify"):
        assert not notifier.ready()
        assert not notifier.stopping()
    assert len(caplog.records) == 1
