"""What one layer of the classifier answers, and what the caller knows of how it ended."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from exporter.diagnosis.taxonomy import FailureClass


class Confidence(enum.StrEnum):
    """How sure a classification is; automatic remedies act on ``high`` only."""

    HIGH = "high"  # a decisive signature, its context (where an OOM happened) in the log
    MEDIUM = "medium"  # a weaker signature, the code that raised, what the supervisor saw
    LOW = "low"  # wording alone, numbers, an exit status, or nothing better than "other"


@dataclass(frozen=True)
class Outcome:
    """How the attempt's launcher ended, when the caller knows it."""

    exit_code: int | None = None  # returncode: negative means killed by that signal
    stalled: bool = False  # the supervisor gave up waiting (startup timeout, hang)
    # A process of the attempt (e.g. "sglang::scheduler") vanished while the launcher lived:
    # 0.5.9's launcher does not notice a dead scheduler and the log stays silent.
    lost_process: str | None = None
    stall_evidence: str | None = None  # what the supervisor saw when it called a hang


@dataclass(frozen=True)
class Verdict:
    """One layer's answer: a class, the line that shows it, and how much that weighs."""

    failure_class: FailureClass
    root: int | None  # position in the time-ordered lines; None: no line explains it
    layer: str  # signature, exception, wording, numbers, outcome, error_line, none
    rule: str | None  # the signature, origin rule, family or outcome that decided
    confidence: Confidence
    score: int  # on the signatures' priority scale
    caveat: str | None = None  # said in the diagnosis: what the log does not show
