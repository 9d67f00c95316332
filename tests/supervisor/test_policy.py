"""The policy's counts over the history: the crash-loop window and the backoff exponent."""

from __future__ import annotations

from exporter.history import AttemptRecord
from exporter.supervisor.policy import consecutive_failures, recent_failures

T0 = 1_700_000_000.0


def record(attempt: int, started: float | None, **fields) -> AttemptRecord:
    fields.setdefault("ended_at", None if started is None else started + 10)
    return AttemptRecord(attempt=attempt, started_at=started, **fields)


def test_recent_failures_counts_attempts_in_the_window_not_stopped_by_the_daemon():
    now = T0 + 1000
    attempts = [
        record(1, now - 700, failure_class="pool_init_oom"),  # before the window
        record(2, now - 500, failure_class="pool_init_oom"),
        record(3, now - 400, failure_class="none", exit_code=0),  # exited by itself
        record(4, now - 300, failure_class="hang_timeout", stopped_by="daemon"),
        record(5, None, ended_at=now - 200, failure_class="other"),  # start line lost
        record(6, now - 100, ended_at=None),  # still running
    ]
    assert [r.attempt for r in recent_failures(attempts, now, 600)] == [2, 3, 5]
    assert recent_failures(attempts, now, 600.0 - 500) == []
    assert recent_failures([], now, 600) == []


def test_consecutive_failures_stop_at_an_attempt_that_served_long_enough():
    def failed(attempt, **fields):
        return record(attempt, T0 + attempt * 100, failure_class="pool_init_oom", **fields)

    def served(attempt, seconds):  # ready 2 s after its start, ended `seconds` later
        start = T0 + attempt * 100
        return failed(attempt, ready_at=start + 2, ended_at=start + 2 + seconds)

    assert consecutive_failures([], 300) == 0
    assert consecutive_failures([failed(1), failed(2), failed(3)], 300) == 3
    # serving for 300 s proved the config: the streak restarts after it
    assert consecutive_failures([failed(1), served(2, 300), failed(3)], 300) == 1
    assert consecutive_failures([failed(1), failed(2), served(3, 600)], 300) == 0
    # ready, then dead 5 s later: still a crash loop
    assert consecutive_failures([failed(1), served(2, 5), failed(3)], 300) == 3
    clean = record(2, T0, failure_class="none")
    assert consecutive_failures([failed(1), clean, failed(3), failed(4)], 300) == 2
    assert consecutive_failures([failed(1), record(2, T0, ended_at=None)], 300) == 0
