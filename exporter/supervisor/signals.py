"""The daemon's signals, the same whether or not it is PID 1 of a container.

PID 1 gets no default action for a signal it has no handler for (the kernel drops it), so
every signal the daemon answers has a handler of its own:

- SIGTERM, SIGINT: stop SGLang gracefully (SIGTERM, ``stop_grace_s`` to drain, SIGKILL),
  then exit.
- SIGQUIT: stop SGLang at once (no drain), then exit.
- SIGHUP: re-read the config.
- SIGCHLD: reap zombie children (the daemon is a child subreaper, or PID 1).

Python runs handlers in the main thread, but the kernel may hand a signal to any thread;
the loop then learns of it through Python's wakeup pipe, which it polls with its exits.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import TYPE_CHECKING

from exporter.supervisor.reaper import become_subreaper

if TYPE_CHECKING:
    from exporter.supervisor.daemon import Daemon

__all__ = ["install"]

log = logging.getLogger("sglang_sentinel")


def install(daemon: Daemon) -> None:
    """Install the handlers (from the main thread) and adopt SGLang's orphans."""
    if os.getpid() != 1:  # PID 1 of a namespace inherits every orphan already
        become_subreaper()
    signal.signal(signal.SIGTERM, lambda *_: daemon.request_stop())
    signal.signal(signal.SIGINT, lambda *_: daemon.request_stop())
    signal.signal(signal.SIGQUIT, lambda *_: daemon.request_stop(now=True))
    signal.signal(signal.SIGHUP, lambda *_: daemon.request_reload())
    signal.signal(signal.SIGCHLD, lambda *_: _reap(daemon))
    # Never closed: a late signal must not write into a descriptor reused for another file.
    readable, writable = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(writable, warn_on_full_buffer=False)
    daemon.wake_on(readable)
    _reap(daemon)  # whatever died before the handler was there


def _reap(daemon: Daemon) -> None:
    for reaped in daemon.reaper.reap():
        log.info(
            "reaped pid %d (%s, session %d): exit status %d",
            reaped.identity.pid,
            "of the attempt" if reaped.origin == "attempt" else "not the attempt's",
            reaped.session,
            reaped.returncode,
        )
