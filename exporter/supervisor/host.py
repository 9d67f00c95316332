"""What the telemetry sources and the reaper may ask of the daemon they serve
(telemetry/source.py's ``Host``), answered from the current attempt and config, which it
reads through callables and never writes. Its calls come from the sources' threads and the
SIGCHLD handler: each reads one attempt once, with no lock."""

from __future__ import annotations

from collections.abc import Callable

from exporter.config import Config
from exporter.supervisor.attempt import Attempt
from exporter.telemetry.processes import Members


class DaemonHost:
    def __init__(
        self,
        attempt: Callable[[], Attempt | None],
        config: Callable[[], Config],
        clock: Callable[[], float],
        wake: Callable[[], None],
    ) -> None:
        self._attempt = attempt
        self._config = config
        self._clock = clock
        self._wake = wake

    @property
    def config(self) -> Config:
        return self._config()

    def wake(self) -> None:
        """Wake the daemon's loop to look at news (the probes: a new snapshot)."""
        self._wake()

    def attempt_members(self) -> Members | None:
        """The current attempt's launcher and live members, for the process collector:
        finding new members is the daemon's, as often as the collector looks."""
        attempt = self._attempt()
        if attempt is None:
            return None
        return attempt.processes.leader, attempt.processes.refresh()

    def scheduler_quiet(self) -> bool:
        """No batch line for two probe intervals. Only then can requests be stuck waiting,
        so only then is /v1/loads asked: SGLang logs a prefill batch for each /health it
        answers (its one-token generation), so a working scheduler is never that quiet."""
        attempt = self._attempt()
        if attempt is None:
            return True
        return attempt.batch_silence(self._clock()) >= 2 * self.config.policy.health_interval_s

    def attempt_sessions(self) -> set[int]:
        """The current attempt's session, whose orphans the reaper counts as the attempt's."""
        attempt = self._attempt()
        return {attempt.processes.session_id} if attempt else set()
