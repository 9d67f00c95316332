"""One launch of SGLang and what the daemon follows of it. The daemon is its only writer:
the modules beside it read an attempt and return what to change."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from exporter.attempt.attempt_log import AttemptLog
from exporter.identity import ProcessIdentity
from exporter.logs.tailer import LogTailer
from exporter.supervisor.processes import AttemptProcesses


@dataclass
class Attempt:
    number: int
    profile_index: int
    command: list[str]
    log_path: Path
    started_at: float
    processes: AttemptProcesses
    log: AttemptLog  # what its log has said so far
    tailer: LogTailer | None = None
    ready_at: float | None = None
    probe_seen: float = 0.0  # taken_at of the last probe snapshot acted on
    tokens_checked: bool = False  # /server_info cross-checked against the log
    prediction_checked: bool = False  # the pre-flight's KV tokens against the log's
    titled: dict[ProcessIdentity, str] = field(default_factory=dict)  # sglang:: members
    scanned_at: float = 0.0
    member_lost: tuple[str, float] | None = None  # (description, when noticed)

    def batch_silence(self, now: float) -> float:
        """How long the scheduler has shown no work: since its last batch line, else since
        the log said ready, else since launch."""
        return now - (self.log.last_batch_at or self.log.ready_at or self.started_at)
