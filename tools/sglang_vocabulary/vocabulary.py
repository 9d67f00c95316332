"""The vocabulary test set: load the extracted messages, label them by rules, render each as
the crash tail an operator would see, and classify it.

Pure functions over the committed data in tests/data/sglang_vocabulary/; the test and
report.py both use them, so the figures they print are the same figures.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from exporter.diagnosis.classify import classify
from exporter.diagnosis.taxonomy import FailureClass
from exporter.logs.reader import read_log

DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "sglang_vocabulary"
RULES = DATA / "rules.toml"
LOWER_LAYERS = DATA / "lower_layers.jsonl"
SITE = "/usr/local/lib/python3.10/dist-packages/"
STAMP = "[2025-01-01 00:00:00{rank}] "
# Modules that run in a scheduler (TP) process: their log lines carry a rank prefix.
_RANKED = re.compile(
    r"^sglang/srt/(?:managers/scheduler|managers/tp_worker|model_executor/|model_loader/"
    r"|layers/|models/|mem_cache/|distributed/|speculative/|lora/|disaggregation/)"
)
MISSED = {FailureClass.OTHER, FailureClass.NONE}
PATTERN_KEYS = ("kind", "module", "function", "type", "message")


@dataclass(frozen=True)
class Rule:
    """One labelling rule; every pattern it has must match (regexes, searched)."""

    failure_class: FailureClass
    reason: str
    module: re.Pattern[str] | None = None
    type: re.Pattern[str] | None = None
    message: re.Pattern[str] | None = None
    function: re.Pattern[str] | None = None
    kind: re.Pattern[str] | None = None

    def matches(self, row: dict) -> bool:
        for key in PATTERN_KEYS:
            pattern = getattr(self, key)
            if pattern is not None and pattern.search(row[key]) is None:
                return False
        return True


def load_rules(path: Path = RULES) -> list[Rule]:
    """The ordered rules; a bad rule is rejected naming its position and what is wrong."""
    with open(path, "rb") as handle:
        table = tomllib.load(handle)
    rules = []
    for number, entry in enumerate(table.get("rule", []), start=1):
        where = f"{path.name}: rule {number}"
        unknown = set(entry) - {"class", "reason", *PATTERN_KEYS}
        if unknown:
            raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
        try:
            failure_class = FailureClass(entry["class"])
        except (KeyError, ValueError):
            raise ValueError(
                f"{where}: class {entry.get('class')!r} is not in the taxonomy"
            ) from None
        if failure_class is FailureClass.NONE:
            raise ValueError(f"{where}: 'none' is no label for an error message")
        if not entry.get("reason", "").strip():
            raise ValueError(f"{where}: every rule needs a reason")
        patterns = {}
        for key in PATTERN_KEYS:
            if key in entry:
                try:
                    patterns[key] = re.compile(entry[key])
                except re.error as error:
                    raise ValueError(f"{where}: bad {key} regex: {error}") from error
        if not patterns:
            raise ValueError(f"{where}: matches everything (give a module, type or message)")
        rules.append(Rule(failure_class, entry["reason"], **patterns))
    return rules


def label(row: dict, rules: Iterable[Rule]) -> tuple[FailureClass, int | None]:
    """The first matching rule's class and its 1-based number; ``other`` (None) by default."""
    for number, rule in enumerate(rules, start=1):
        if rule.matches(row):
            return rule.failure_class, number
    return FailureClass.OTHER, None


def releases() -> list[str]:
    """The releases with committed data, oldest first."""
    names = [p.stem for p in DATA.glob("*.jsonl") if p != LOWER_LAYERS]
    return sorted(names, key=_version_key)


def _version_key(version: str) -> tuple:
    return tuple(int(x) if x.isdigit() else x for x in re.findall(r"\d+|[a-z]+", version))


@cache
def load(name: str) -> tuple[dict, ...]:
    """A release's messages (or ``lower_layers``), as committed."""
    with open(DATA / f"{name}.jsonl") as handle:
        return tuple(json.loads(line) for line in handle if line.strip())


def crash_tail(row: dict) -> str:
    """The message as a dying server's log shows it: a one-frame traceback for a raise or an
    assert, an SGLang log line for a log call, and verbatim for a ``line`` (what a library
    prints on stderr by itself, e.g. NCCL's watchdog)."""
    if row["kind"] == "line":
        return row["message"] + "\n"
    if row["kind"] == "log":
        rank = " TP0" if _RANKED.match(row["module"]) else ""
        return STAMP.format(rank=rank) + row["message"] + "\n"
    return (
        "Traceback (most recent call last):\n"
        f'  File "{SITE}{row["module"]}", line {row["line"]}, in {row["function"]}\n'
        f"    {row['code']}\n"
        f"{row['type']}: {row['message']}\n"
    )


@dataclass(frozen=True)
class Verdict:
    row: dict
    want: FailureClass
    rule: int | None
    got: FailureClass

    @property
    def missed(self) -> bool:
        """A class-worthy message the classifier calls other or none."""
        return self.want is not FailureClass.OTHER and self.got in MISSED

    @property
    def wrong_class(self) -> bool:
        """A class-worthy message given another class."""
        return self.want is not FailureClass.OTHER and self.got not in MISSED | {self.want}

    @property
    def false_class(self) -> bool:
        """A message labelled other that the classifier gives a class."""
        return self.want is FailureClass.OTHER and self.got not in MISSED

    def describe(self) -> str:
        row = self.row
        first = row["message"].splitlines()[0][:160]
        return (
            f"{row['module']}:{row['line']} want {self.want} got {self.got} "
            f"(rule {self.rule}): {row['type']}: {first}"
        )


def verdicts(rows: Iterable[dict], rules: list[Rule]) -> list[Verdict]:
    """Each message: its label, and what the classifier says about its crash tail. A row may
    carry its own hand label (``label``, in lower_layers.jsonl) instead of a rule's."""
    out = []
    for row in rows:
        if "label" in row:
            want, rule = FailureClass(row["label"]), None
        else:
            want, rule = label(row, rules)
        got = classify(*read_log(crash_tail(row))).failure_class
        out.append(Verdict(row, want, rule, got))
    return out


@dataclass(frozen=True)
class Summary:
    messages: int
    class_worthy: int
    missed: int
    wrong_class: int
    labelled_other: int
    false_class: int

    @staticmethod
    def of(results: list[Verdict]) -> Summary:
        worthy = [v for v in results if v.want is not FailureClass.OTHER]
        return Summary(
            messages=len(results),
            class_worthy=len(worthy),
            missed=sum(v.missed for v in results),
            wrong_class=sum(v.wrong_class for v in results),
            labelled_other=len(results) - len(worthy),
            false_class=sum(v.false_class for v in results),
        )

    @property
    def missed_share(self) -> float:
        return self.missed / self.class_worthy if self.class_worthy else 0.0

    @property
    def wrong_share(self) -> float:
        return self.wrong_class / self.class_worthy if self.class_worthy else 0.0

    @property
    def false_share(self) -> float:
        return self.false_class / self.labelled_other if self.labelled_other else 0.0
