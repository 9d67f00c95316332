"""The SGLang versions the sentinel knows, and the version a log reveals.

Each known version has a grammar table (``logs/grammar.py``) and a planner sizer
(``diagnosis/planner/versions.py``); a test holds both registries to this list.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from exporter.logs.events import Event, EventKind
from exporter.logs.lines import LogLine

VERSIONS = ("0.5.9", "0.5.23")
# What a config that names no version is planned and pre-flighted as.
DEFAULT_VERSION = "0.5.9"

_VERSION = re.compile(
    r"(?:sglang[=\- _]=?v?|sglang version:? v?)(\d+\.\d+\.\d+(?:\.post\d+)?)", re.I
)
# Lines only 0.5.23 prints: a log without a stated version is 0.5.23's when it has one.
_NEW_ONLY = frozenset(
    {
        EventKind.MEMORY_BASELINE,
        EventKind.STARTUP_TIMINGS,
        EventKind.KILL_PROCESS_TREE,
        EventKind.MAMBA_REQUESTS_CAPPED,
        EventKind.KV_POOL_BELOW_CONTEXT,
    }
)


def detect_version(lines: Sequence[LogLine], events: Sequence[Event]) -> str | None:
    """The SGLang version when the log reveals it: stated, or by 0.5.23-only lines."""
    for line in lines[:200]:
        match = _VERSION.search(line.message)
        if match:
            return match.group(1)
    if any(e.kind in _NEW_ONLY for e in events) or any(
        e.kind is EventKind.SERVER_ARGS and e.get("format") == "dict" for e in events
    ):
        return "0.5.23"
    return None
