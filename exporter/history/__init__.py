"""The append-only attempt history: ``<state_dir>/attempts.jsonl``.

Every attempt leaves a ``start`` record (with what the pre-flight planned for its command,
when it ran), a ``ready`` record once it serves and an ``end`` record, one JSON object per
line, each fsynced before the daemon goes on. A daemon killed with ``kill -9`` leaves
at worst a truncated last line; the next daemon reads around it and continues the restart
count, the backoff and the crash-loop limit where the last one left.
Records are written as given: the caller redacts secrets first.
"""

from exporter.history.file import HISTORY_FILE, History, HistoryWriteError
from exporter.history.merge import parse_history
from exporter.history.records import (
    AttemptRecord,
    HistoryRead,
    Record,
    end_record,
    lost_record,
    ready_record,
    start_record,
)

__all__ = [
    "HISTORY_FILE",
    "AttemptRecord",
    "History",
    "HistoryRead",
    "HistoryWriteError",
    "Record",
    "end_record",
    "lost_record",
    "parse_history",
    "ready_record",
    "start_record",
]
