"""One log line split into what wraps it and what SGLang said.

SGLang prefixes its records with ``[2026-05-01 12:00:00(.mmm)( DPn)( TPn)] ``. Logs that reach
us second-hand carry other wrappers too (cloud-logging exports, docker compose, kubectl
timestamps, torch's ``[rankN]:``); those are peeled off so the message can be matched,
while the raw text is kept for evidence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The timestamp, the ranks (each after a space) and the whitespace after the prefix: what
# follows is the message, already stripped (the line is stripped before).
_SGLANG_PREFIX = re.compile(
    r"\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{3})?)"
    r"((?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*)\]\s*"
)
_TP_RANK = re.compile(r"TP(\d+)")
# Wrappers added by whatever collected the log, outermost first.
_FOREIGN_PREFIXES = (
    # Cloud logging export: "ERROR 2025-04-05T00:01:19.209110975Z "
    re.compile(
        r"(?:DEFAULT|DEBUG|INFO|NOTICE|WARNING|ERROR|CRITICAL) "
        r"(?P<fts>\d{4}-\d{2}-\d{2}T[\d:.]+Z?) "
    ),
    # kubectl logs --timestamps: "2025-04-05T00:01:19.209Z "
    re.compile(r"(?P<fts>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?) "),
    # journalctl (systemd): "Dec 01 10:00:00 gpu-7 sglang-sentinel[1234]: "
    re.compile(r"(?P<fts>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d) [\w.-]+ [\w.@/-]+\[\d+\]: "),
    # docker compose: "sglang-1  | "
    re.compile(r"[\w.-]+\s+\| "),
    # kubectl logs --prefix: "[pod/ds-r1-lws-0/sglang] "
    re.compile(r"\[pod/[\w.-]+/[\w.-]+\] "),
    # a Ray worker's output: "(ServeReplica:app:SGLang pid=5120) ", "(task, pid=412, ip=10.0.0.2) "
    re.compile(r"\((?:[\w:.-]+,? )?pid=\d+(?:, ip=[\d.]+)?\) "),
    # torch distributed: "[rank3]:"
    re.compile(r"\[rank\d+\]:"),
)


# Not frozen: a frozen dataclass's __init__ costs ~20% of the whole reading pipeline (one
# object per line); nothing mutates a LogLine after parse_line builds it.
@dataclass(slots=True)
class LogLine:
    """A line of an attempt's log: its position, raw text and parsed prefix."""

    number: int  # 1-based position in the file (or stream)
    raw: str  # as read, without the line terminator
    message: str  # the text after every prefix, stripped of surrounding whitespace
    timestamp: str | None  # SGLang's own "[...]" timestamp, when present
    ranks: str  # e.g. "TP0" or "DP1 TP0"; "" for the main process or unprefixed lines
    foreign_timestamp: str | None = None  # a collector's timestamp (cloud export, kubectl)

    @property
    def tp_rank(self) -> int | None:
        match = _TP_RANK.search(self.ranks)
        return int(match.group(1)) if match else None

    @property
    def has_sglang_prefix(self) -> bool:
        return self.timestamp is not None


def parse_line(number: int, raw: str) -> LogLine:
    """Split ``raw`` into wrappers and message; never raises."""
    text = raw.strip()
    foreign_ts = None
    # Each foreign wrapper starts with something other than "[" except torch's "[rankN]:",
    # so a line opening with SGLang's own "[" skips the search (most lines of a log).
    if not text.startswith("[") or text.startswith(("[rank", "[pod/")):
        for pattern in _FOREIGN_PREFIXES:
            match = pattern.match(text)
            if match:
                foreign_ts = foreign_ts or match.groupdict().get("fts")
                text = text[match.end() :].lstrip()
    match = _SGLANG_PREFIX.match(text)
    if match is None:
        return LogLine(number, raw, text, None, "", foreign_ts)
    timestamp, ranks = match.groups()
    return LogLine(number, raw, text[match.end() :], timestamp, ranks[1:], foreign_ts)
