"""Sleeping until something happens: a watched process exits, or someone wakes the sleeper.

The daemon's loop sleeps in one poll(2) over a pidfd per process it watches (the launcher,
SGLang's schedulers and detokenizer) and an eventfd (stop, reload, a log line that
matters). An idle loop then costs nothing, and an exit is seen the moment it happens, where
checking each process by its /proc entry once a second cost ~0.35 ms of CPU a tick. Where
pidfds are refused (Linux < 5.3, a seccomp filter) a process is checked by identity at each
wake instead.
"""

from __future__ import annotations

import contextlib
import os
import select
import weakref

from exporter.identity import ProcessIdentity, identify


class ExitWatch:
    """Watch, wait, wake. ``watch``, ``wait`` and ``forget_all`` belong to one thread (the
    sleeper's); ``wake`` may come from any thread or a signal handler."""

    def __init__(self) -> None:
        self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._poll = select.poll()
        self._poll.register(self._wake_fd, select.POLLIN)
        self._pidfds: dict[int, ProcessIdentity] = {}
        self._checked: set[ProcessIdentity] = set()  # no pidfd: checked at each wake
        self._gone: list[ProcessIdentity] = []  # gone before they could be watched
        self._drained: set[int] = set()  # readable fds that only wake (signal.set_wakeup_fd)
        # The fds are the kernel's, not Python's: close them when the watch is dropped.
        self._finalizer = weakref.finalize(self, _close_all, self._wake_fd, self._pidfds)

    def watch(self, identity: ProcessIdentity) -> None:
        """Report ``identity``'s exit from the next ``wait`` on (at once if it is gone)."""
        if identity in self._pidfds.values() or identity in self._checked:
            return
        try:
            fd = os.pidfd_open(identity.pid)
        except ProcessLookupError:
            self._gone.append(identity)
            return
        except OSError:
            self._checked.add(identity)
            return
        # The pidfd holds whoever had the pid at the open: ours only if it still does now.
        if identify(identity.pid) != identity:
            os.close(fd)
            self._gone.append(identity)
            return
        self._pidfds[fd] = identity
        self._poll.register(fd, select.POLLIN)

    def wake_on(self, fd: int) -> None:
        """Also end a ``wait`` whenever the non-blocking ``fd`` turns readable (drained each
        time); the caller keeps it open. For the pipe of ``signal.set_wakeup_fd``: a signal
        the kernel hands to another thread does not interrupt this one's poll."""
        self._drained.add(fd)
        self._poll.register(fd, select.POLLIN)

    def wait(self, timeout_s: float) -> list[ProcessIdentity]:
        """Sleep until woken, a watched process exits, or ``timeout_s`` passes; return the
        watched processes found gone (each once: it is no longer watched after)."""
        ready = self._poll.poll(max(0.0, timeout_s) * 1000)
        gone, self._gone = self._gone, []
        for fd, _mask in ready:
            if fd == self._wake_fd:
                with contextlib.suppress(BlockingIOError):  # drained by an earlier wait
                    os.eventfd_read(fd)
            elif fd in self._pidfds:
                gone.append(self._unwatch(fd))
            elif fd in self._drained:
                _drain(fd)
        for identity in [i for i in self._checked if not i.alive()]:
            self._checked.discard(identity)
            gone.append(identity)
        return gone

    def wake(self) -> None:
        """End the current (or the next) ``wait`` now; nothing once closed (a late signal
        must not write to whatever file has since taken the descriptor's number)."""
        if self._finalizer.alive:
            os.eventfd_write(self._wake_fd, 1)

    def forget_all(self) -> None:
        """Stop watching every process (an attempt is over)."""
        for fd in list(self._pidfds):
            self._unwatch(fd)
        self._checked.clear()
        self._gone.clear()

    def close(self) -> None:
        self._finalizer()

    def _unwatch(self, fd: int) -> ProcessIdentity:
        self._poll.unregister(fd)
        os.close(fd)
        return self._pidfds.pop(fd)


def _drain(fd: int) -> None:
    with contextlib.suppress(BlockingIOError):
        while os.read(fd, 4096):
            pass


def _close_all(wake_fd: int, pidfds: dict[int, ProcessIdentity]) -> None:
    for fd in [wake_fd, *pidfds]:
        os.close(fd)
    pidfds.clear()
