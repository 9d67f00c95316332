"""One log line split into what wraps it and what SGLang said.

SGLang prefixes its records with ``[2026-05-01 12:00:00(.mmm)( DPn)( TPn)] ``. Logs that reach
us second-hand carry other wrappers too (cloud-logging exports, docker compose, JSON-lines
records (docker's json-file, Loki, GCP, CloudWatch, Datadog, journald), kubectl timestamps
and pod prefixes, the kubelet's CRI files, journald, Slurm's ``srun -l`` labels, Ray, torch's
``[rankN]:``, a Markdown quote's ``> ``), often one inside another, and a terminal's colour
codes around them, or a chat's inline-code backticks; those are peeled off, in any order, so
the message can be matched, while the raw text is kept for evidence.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

# The timestamp, the ranks (each after a space) and the whitespace after the prefix: what
# follows is the message, already stripped (the line is stripped before).
_SGLANG_PREFIX = re.compile(
    r"\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{3})?)"
    r"((?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*)\]\s*"
)
_TP_RANK = re.compile(r"TP(\d+)")
# A terminal's control sequences that `docker compose up` and other tools leave in a paste:
# colours and cursor moves (ESC [ ... final byte), titles (ESC ] ... BEL or ESC \), and
# character sets (ESC ( B, as `tput sgr0` ends).
_ANSI_ESCAPE = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[()][0-9A-Za-z])"
)
_INLINE_CODE = re.compile(r"`[^`]+`$")
# A JSON-lines record's fields that hold the line, and its time (_json_record).
_JSON_TEXT = ("log", "line", "textPayload", "message", "msg", "MESSAGE")
_JSON_TIME = ("time", "timestamp", "@timestamp", "ts", "date", "__REALTIME_TIMESTAMP")
# Datadog's export, GCP's structured record, an Elasticsearch or OpenSearch search hit
_JSON_NESTED = ("content", "jsonPayload", "_source")
_RFC3339 = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
# Wrappers added by whatever collected the log; the first that matches is peeled, then the
# search starts again on what is left (a kubectl prefix over a Ray worker's, ...). A wrapper
# around an empty line ends the (stripped) line: "sglang-1  |".
_FOREIGN_PREFIXES = (
    # Cloud logging export: "ERROR 2025-04-05T00:01:19.209110975Z "
    re.compile(
        r"(?:DEFAULT|DEBUG|INFO|NOTICE|WARNING|ERROR|CRITICAL) "
        r"(?P<fts>\d{4}-\d{2}-\d{2}T[\d:.]+Z?) "
    ),
    # the kubelet's CRI log files (/var/log/pods): "2025-04-05T00:01:19.209Z stderr F "
    re.compile(rf"(?P<fts>{_RFC3339}) (?:stdout|stderr) [FP](?: |$)"),
    # Loki's logcli, its default output: the time, the stream's labels, the line
    # ('2026-10-27T13:55:24Z {container="sglang", pod="qwen-0"} ...')
    re.compile(rf'(?P<fts>{_RFC3339}) \{{(?:[\w.-]+="[^"]*"(?:, )?)*\}}(?: |$)'),
    # journalctl -o short-iso: "2025-06-26T08:12:44+02:00 gpu-7 sglang[1198]: "
    re.compile(rf"(?P<fts>{_RFC3339}) [\w.-]+ \(?[\w.@/-]+\)?\[\d+\]:(?: |$)"),
    # kubectl logs --timestamps: "2025-04-05T00:01:19.209Z "; a tab-separated export's
    # (CloudWatch Logs Insights: "@timestamp<TAB>@message")
    re.compile(rf"(?P<fts>{_RFC3339})(?:[ \t]|$)"),
    # the same export with its time in epoch milliseconds (the AWS CLI's text output of
    # get-log-events: "1748865641001<TAB>...", or seconds, micro- or nanoseconds), or with a
    # space for the "T" (Grafana's copy of a Loki query: "2026-02-14 11:00:07.500<TAB>...")
    re.compile(
        r"(?P<fts>1\d{9}(?:\d{3}|\d{6}|\d{9})?"
        r"|\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?)\t"
    ),
    # journalctl (systemd): "Dec 01 10:00:00 gpu-7 sglang-sentinel[1234]: "; a unit's process
    # before its command runs is named in parentheses: "(python)[3120]: "
    re.compile(
        r"(?P<fts>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d) [\w.-]+ \(?[\w.@/-]+\)?\[\d+\]:(?: |$)"
    ),
    # stern, following a Deployment's pods: "<pod> <container> ", the pod named by its
    # ReplicaSet's hash and its own suffix (Kubernetes' alphabet: no vowels, no 0, 1 or 3)
    re.compile(
        r"[a-z0-9][a-z0-9-]*-[bcdfghjklmnpqrstvwxz2456789]{8,10}-[bcdfghjklmnpqrstvwxz2456789]{5}"
        r" [a-z0-9][a-z0-9-]*(?: |$)"
    ),
    # docker compose: "sglang-1  | "
    re.compile(r"[\w.-]+\s+\|(?: |$)"),
    # a platform's stream tag after its timestamp, in lower case (RunPod's worker logs):
    # "[error] " for stderr, not a level SGLang wrote
    re.compile(r"\[(?:info|error|warn|warning|debug)\](?: |$)"),
    # kubectl logs --prefix: "[pod/ds-r1-lws-0/sglang] "
    re.compile(r"\[pod/[\w.-]+/[\w.-]+\](?: |$)"),
    # a Ray worker's output: "(ServeReplica:app:SGLang pid=5120) ", "(task, pid=412, ip=10.0.0.2) "
    # (and an actor named after its class: "(MapWorker(MapBatches(Predictor)) pid=8812, ...")
    re.compile(r"\((?:[\w:.()-]+,? )?pid=\d+(?:, ip=[\d.]+)?\)(?: |$)"),
    # Metaflow's step output: "2026-06-02 01:12:03.101 [1780362701221845/generate/4 (pid 61)] "
    re.compile(
        r"(?P<fts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) \[[\w-]+/[\w-]+/\d+ \(pid \d+\)\](?: |$)"
    ),
    # pytest's report of a failed test: its exception's lines under an "E" ("E   RuntimeError: ...")
    re.compile(r"E {3}"),
    # torch distributed: "[rank3]:"
    re.compile(r"\[rank\d+\]:"),
    # Slurm's srun --label: "0: ", "12: " (the task number)
    re.compile(r"\d{1,5}:(?: |$)"),
    # a Markdown quote of the log in a reply ("> ", once per level; not a REPL's ">>> ")
    re.compile(r">(?: |$)"),
)

_BRACKETED_WRAPPERS = ("[rank", "[pod/", "[info]", "[error]", "[warn", "[debug]")


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
    foreign_timestamp: str | None = None  # a collector's timestamp (the innermost one)

    @property
    def tp_rank(self) -> int | None:
        match = _TP_RANK.search(self.ranks)
        return int(match.group(1)) if match else None

    @property
    def has_sglang_prefix(self) -> bool:
        return self.timestamp is not None


def parse_line(number: int, raw: str, nodes: NodeLabels | None = None) -> LogLine:
    """Split ``raw`` into wrappers and message; never raises. ``nodes``: the names of the
    nodes the log has shown so far, learned and peeled (a reader's, for its whole log)."""
    text = raw.strip()
    if "\x1b" in text:
        text = _ANSI_ESCAPE.sub("", text).strip()
    foreign_ts = None
    # Each foreign wrapper starts with something other than "[" except torch's "[rankN]:",
    # kubectl's "[pod/" and a platform's stream tag, so a line opening with SGLang's own "["
    # skips the search (most lines of a log).
    while not text.startswith("[") or text.startswith(_BRACKETED_WRAPPERS):
        peeled, timestamp = _peel(text)
        if peeled is None:
            break
        # The innermost timestamp is the writer's; outer ones are when a collector saw it.
        text, foreign_ts = peeled, timestamp or foreign_ts
    match = _SGLANG_PREFIX.match(text)
    if match is None and nodes is not None and text.startswith("["):
        peeled = nodes.peel(text)
        if peeled is not None:
            text, match = peeled, _SGLANG_PREFIX.match(peeled)
    if match is None:
        return LogLine(number, raw, text, None, "", foreign_ts)
    timestamp, ranks = match.groups()
    return LogLine(number, raw, text[match.end() :], timestamp, ranks[1:], foreign_ts)


class NodeLabels:
    """The names a multi-node paste puts before each node's lines ("[node1] ", "[gpu-b07] "),
    learned where one stands before a record, a traceback or its frame: only a learned name
    is peeled, so a library's own bracketed tag ("[aiter] ", "[c10d] ") stays its words."""

    def __init__(self) -> None:
        self._known: set[str] = set()

    def peel(self, text: str) -> str | None:
        """``text`` without its node's name, or None when it has none."""
        match = _NODE_LABEL.match(text)
        if match is None:
            return None
        label, rest = match.group(1), text[match.end() :].lstrip()
        if label not in self._known:
            if not _LABELLED_LOG.match(rest):
                return None
            self._known.add(label)
        return rest


_NODE_LABEL = re.compile(r"\[([a-z][\w.-]*)\](?: |$)")
_LABELLED_LOG = re.compile(r"\[\d{4}-\d\d-\d\d |Traceback \(most recent call last\)|File \"")


# One match says whether any wrapper is there at all: most lines without SGLang's prefix
# (a traceback's) have none, and nine separate tries cost them 40% more.
_ANY_FOREIGN = re.compile(
    "|".join(f"(?:{p.pattern})" for p in _FOREIGN_PREFIXES).replace("?P<fts>", "")
)


def opens_a_record(raw: str) -> bool:
    """Whether ``raw`` starts with SGLang's prefix or a collector's wrapper: a record of its
    own, not the rest of the row above it."""
    text = raw.lstrip()
    if "\x1b" in text:
        text = _ANSI_ESCAPE.sub("", text).lstrip()
    return (
        _SGLANG_PREFIX.match(text) is not None
        or _ANY_FOREIGN.match(text) is not None
        or text.startswith('{"')
    )


def _peel(text: str) -> tuple[str | None, str | None]:
    """``text`` without its outermost collector's wrapper, and that wrapper's timestamp;
    (None, None) when no wrapper is left."""
    if text.startswith('{"'):
        record = _json_record(text)
        if record is not None:
            return record
    if text.startswith("`") and _INLINE_CODE.match(text):  # inline code, in a chat or an issue
        return text[1:-1].strip(), None
    if _ANY_FOREIGN.match(text) is None:
        return None, None
    for pattern in _FOREIGN_PREFIXES:
        match = pattern.match(text)
        if match:
            return text[match.end() :].lstrip(), match.groupdict().get("fts")
    return None, None


def _json_record(text: str) -> tuple[str, str | None] | None:
    """A JSON-lines export's record: the log line in its text field, and its timestamp.
    docker's json-file driver (``{"log":"...\\n","stream":"stderr","time":"..."}``), Loki's
    ``logcli --output=jsonl`` (``line``), GCP (``textPayload``, or ``jsonPayload.message``),
    CloudWatch, Datadog (``content.message``, or ``message`` and ``date``), Elasticsearch's
    search hits (``_source.message``) and most shippers (``message``, ``msg``),
    ``journalctl -o json`` (``MESSAGE``). Only docker's record has no time of its own: an
    HTTP error body (``{"object":"error","message":...}``) is a reply, not a record."""
    try:
        record = json.loads(text)
    except ValueError:  # cut short, or a line that only looks like JSON
        return None
    if not isinstance(record, dict):
        return None
    for fields in (record, *(record[k] for k in _JSON_NESTED if isinstance(record.get(k), dict))):
        key = next((k for k in _JSON_TEXT if isinstance(fields.get(k), str)), None)
        if key is None:
            continue
        stamp = next((r[k] for r in (fields, record) for k in _JSON_TIME if k in r), None)
        if stamp is None and key != "log":
            return None
        said = fields[key]
        if "\x1b" in said:  # the colours of what the collector kept
            said = _ANSI_ESCAPE.sub("", said)
        return said.strip(), None if stamp is None else str(stamp)
    return None
