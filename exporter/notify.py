"""The systemd notification protocol (sd_notify), spoken by the daemon itself.

Under ``Type=notify`` systemd passes ``NOTIFY_SOCKET``: the path of an AF_UNIX datagram
socket (a leading ``@`` names the abstract namespace). Every message is one datagram of
newline-separated ``KEY=VALUE`` assignments: ``READY=1``, ``STATUS=...``, ``RELOADING=1``,
``STOPPING=1``, ``WATCHDOG=1``. Without the variable every call here is a no-op.

Why not a library: ``sdnotify`` swallows every error, and ``systemd-python`` needs
libsystemd's headers to install. The protocol is a datagram; this module is the whole of it.

Sending never raises and never blocks the caller for long (a one-second send timeout, for
when systemd's receive queue is full): a failure is logged once per outage and the message
dropped. The supervisor must keep supervising even when systemd cannot hear it.

The watchdog: with ``WatchdogSec=`` systemd sets ``WATCHDOG_USEC`` (and ``WATCHDOG_PID``,
which must be ours) and kills the service if no ``WATCHDOG=1`` arrives within that time.
The daemon calls :meth:`Notifier.watchdog` from its main loop only, so a stalled loop stops
the pings. Pings are rate-limited to one per ``min(interval / 2, 1 s)``: sending more often
than half the interval is what keeps the tolerated stall close to the full ``WatchdogSec``.
With a gap of half the interval, a loop that pinged just before a legitimate long stall
(stopping SGLang takes up to stop_grace_s + 10 s) would be killed after only half of
``WatchdogSec``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, MutableMapping

log = logging.getLogger("sglang_sentinel.notify")

# The variables systemd passes to a Type=notify service with WatchdogSec=.
ENVIRONMENT = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")
# Never ping less often than this while the main loop runs (see the module docstring).
MAX_WATCHDOG_GAP_S = 1.0
SEND_TIMEOUT_S = 1.0
MAX_STATUS_CHARS = 1024  # systemctl status shows one line; keep the datagram small


class Notifier:
    """Sends sd_notify messages to ``address``; with ``address=None`` every call is a no-op.

    Every sending method returns True when the datagram was sent, False otherwise (disabled,
    rate-limited, or the send failed). Safe to call from several threads.
    """

    def __init__(
        self,
        address: str | None,
        watchdog_usec: int | None = None,
        *,
        watchdog_min_gap_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if address is not None and not address.startswith(("/", "@")):
            log.warning(
                "NOTIFY_SOCKET=%r is neither an absolute path nor @abstract: ignored", address
            )
            address = None
        self._address = address
        self._watchdog_s = watchdog_usec / 1e6 if address and watchdog_usec else None
        if self._watchdog_s is None:
            self._gap_s = 0.0
        elif watchdog_min_gap_s is not None:
            self._gap_s = watchdog_min_gap_s
        else:
            self._gap_s = min(self._watchdog_s / 2, MAX_WATCHDOG_GAP_S)
        self._clock = clock
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._last_ping: float | None = None
        self._failing = False

    @classmethod
    def from_environment(
        cls,
        env: Mapping[str, str] = os.environ,
        *,
        unset_environment: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> Notifier:
        """The notifier systemd's variables describe.

        ``WATCHDOG_USEC`` counts only when ``WATCHDOG_PID`` is absent or names this process
        (a child that inherited the variables must not ping for its parent).

        ``unset_environment=True`` removes the variables from ``env`` (which must then be
        mutable, e.g. ``os.environ``), so that the processes the daemon launches (SGLang)
        do not inherit a socket they have no business writing to: with ``NotifyAccess=main``
        systemd would reject, and log, whatever they sent.
        """
        address = env.get("NOTIFY_SOCKET") or None
        watchdog_usec = _watchdog_usec(env)
        if unset_environment:
            if not isinstance(env, MutableMapping):
                raise TypeError("unset_environment needs a mutable environment")
            for name in ENVIRONMENT:
                env.pop(name, None)
        return cls(address, watchdog_usec, clock=clock)

    @classmethod
    def disabled(cls) -> Notifier:
        return cls(None)

    # --- what systemd learns ---------------------------------------------------------
    @property
    def enabled(self) -> bool:
        return self._address is not None

    @property
    def address(self) -> str | None:
        return self._address

    @property
    def watchdog_interval_s(self) -> float | None:
        """WatchdogSec= as systemd passed it, None when no watchdog applies to us."""
        return self._watchdog_s

    def ready(self, status: str | None = None) -> bool:
        """Startup (or a reload) is complete: READY=1, with a STATUS line if given."""
        return self.send("READY=1", *_status(status))

    def status(self, text: str) -> bool:
        """The one-line status ``systemctl status`` shows."""
        return self.send(*_status(text))

    def reloading(self, status: str | None = None) -> bool:
        """A reload began; :meth:`ready` must follow when it is done.

        MONOTONIC_USEC is what ``Type=notify-reload`` (systemd 253+) matches the reload with;
        plain ``Type=notify`` ignores it.
        """
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.send("RELOADING=1", f"MONOTONIC_USEC={usec}", *_status(status))

    def stopping(self, status: str | None = None) -> bool:
        """Shutdown began (systemctl shows "deactivating" from now on)."""
        return self.send("STOPPING=1", *_status(status))

    def watchdog(self) -> bool:
        """WATCHDOG=1, at most once per rate-limit gap; a no-op without a watchdog.

        Call it from the main loop only: the point is that a stalled loop stops pinging.
        """
        if self._watchdog_s is None:
            return False
        now = self._clock()
        with self._lock:
            if self._last_ping is not None and now - self._last_ping < self._gap_s:
                return False
            self._last_ping = now
        return self.send("WATCHDOG=1")

    # --- the datagram ------------------------------------------------------------------
    def send(self, *assignments: str) -> bool:
        """One datagram of ``KEY=VALUE`` lines. Never raises."""
        if self._address is None or not assignments:
            return False
        message = "\n".join(assignments).encode("utf-8", "replace")
        address = self._address
        target = b"\0" + address[1:].encode() if address.startswith("@") else address
        with self._lock:
            try:
                if self._socket is None:
                    self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                    self._socket.settimeout(SEND_TIMEOUT_S)
                # Unconnected: every message goes to the path as it is now (systemd
                # re-creates its socket when it re-executes).
                self._socket.sendto(message, target)
            except OSError as error:
                if not self._failing:
                    log.warning("systemd notification to %s failed: %s", address, error)
                    self._failing = True
                else:
                    log.debug("systemd notification to %s failed: %s", address, error)
                return False
            if self._failing:
                log.info("systemd notifications to %s work again", address)
                self._failing = False
            return True

    def close(self) -> None:
        with self._lock:
            if self._socket is not None:
                self._socket.close()
                self._socket = None


def status_line(
    state: str,
    profile: str | None = None,
    attempt: int | None = None,
    failures: int = 0,
    detail: str | None = None,
) -> str:
    """The daemon's STATUS text, e.g. ``ready: profile fewer-requests, attempt 3 (2 failures)``."""
    parts = []
    if profile is not None:
        parts.append(f"profile {profile}")
    if attempt is not None:
        parts.append(f"attempt {attempt}")
    text = state + (": " + ", ".join(parts) if parts else "")
    if failures:
        text += f" ({failures} failure{'s' if failures != 1 else ''})"
    if detail:
        text += f"; {detail}"
    return text


def _status(text: str | None) -> tuple[str, ...]:
    if text is None:
        return ()
    # One line: a newline would end the assignment and start another (STATUS="x\nREADY=1").
    flat = " ".join(text.split())
    if len(flat) > MAX_STATUS_CHARS:
        flat = flat[: MAX_STATUS_CHARS - 3] + "..."
    return (f"STATUS={flat}",)


def _watchdog_usec(env: Mapping[str, str]) -> int | None:
    raw = env.get("WATCHDOG_USEC")
    if not raw:
        return None
    pid = env.get("WATCHDOG_PID")
    if pid:
        try:
            if int(pid) != os.getpid():
                return None  # the watchdog is another process's (we inherited its environment)
        except ValueError:
            log.warning("WATCHDOG_PID=%r is not a pid: watchdog ignored", pid)
            return None
    try:
        usec = int(raw)
    except ValueError:
        usec = 0
    if usec <= 0:
        log.warning("WATCHDOG_USEC=%r is not a positive integer: watchdog ignored", raw)
        return None
    return usec


__all__ = ["ENVIRONMENT", "Notifier", "status_line"]
