"""When a startup that is not yet serving has failed: judged by its progress, not a clock.

A load of a large model may take an hour and is fine while its log keeps moving (a new
phase, a weight shard, a CUDA-graph batch size); one that stops moving is stuck, however
early. policy.startup_stall_s is the first, policy.startup_timeout_s the outer cap. Pure.
"""

from __future__ import annotations

from exporter.attempt.progress import AttemptProgress


def startup_overdue(
    progress: AttemptProgress,
    started_at: float,
    last_progress_at: float | None,
    now: float,
    stall_s: float,
    timeout_s: float,
) -> str | None:
    """The evidence that this startup hangs, or None while it may still come up."""
    running = now - started_at
    if running > timeout_s:
        return (
            f"not serving {running:.0f} s after launch (the startup_timeout_s cap of "
            f"{timeout_s:g} s); the log stopped at {progress.where()}"
        )
    if progress.ready:  # the log says ready: the health probes decide now
        return None
    quiet = now - (last_progress_at if last_progress_at is not None else started_at)
    if quiet >= stall_s:
        return (
            f"no startup progress for {quiet:.0f} s (startup_stall_s {stall_s:g} s): "
            f"stalled at {progress.where()}"
        )
    return None
