"""One attempt's log (and, when known, how its process ended) -> one classification.

The layers, each general, each data plus one small function, asked in this order:
1. signatures (signatures.py): decisive shapes of line, the highest priority decides and its
   earliest line is the root cause; classes that need context (where an OOM happened, a
   native crash in NCCL) are resolved from frames and lifecycle;
2. the first real exception, by its type and the package of the code that raised it
   (origins.py), then by the wording of its message (vocabulary.py);
3. error lines no signature knows (ERROR records, glog ``E`` lines, plain "failed to ...")
   by their wording; numbers that show a pool too small (usage 1.00 with requests waiting,
   a graph capture started with no memory left);
4. how the process ended and how far startup got; a traceback cut off before its exception;
   at worst ``other`` with the first error-shaped line. ``none`` only for a log that shows no
   failure at all.

Each answer says which layer decided (``layer``, ``signature``), how sure it is
(``confidence``) and, when another layer or signature pointed elsewhere, the runner-up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from exporter.diagnosis import consequences, explain, layers
from exporter.diagnosis.placement import evidence_lines, phase_of
from exporter.diagnosis.reading import (
    assert_source,
    caught_cause,
    compiler_cause,
    cuda_init_warning,
    read,
)
from exporter.diagnosis.signatures import SIGNATURES
from exporter.diagnosis.taxonomy import SPECS, FailureClass, Phase
from exporter.diagnosis.verdict import Confidence, Outcome, Verdict
from exporter.logs.events import Event
from exporter.logs.lines import LogLine
from exporter.sglang.versions import detect_version

__all__ = ["Classification", "Confidence", "Outcome", "classify"]

# A runner-up is reported when another answer scored at most this much lower.
RUNNER_UP_MARGIN = 15


@dataclass
class Classification:
    failure_class: FailureClass
    root_cause_line: str | None
    phase: Phase | None
    sglang_version: str | None
    evidence: list[str] = field(default_factory=list)
    diagnosis: str = ""
    root_cause_number: int | None = None  # 1-based line in the log as given
    signature: str | None = None
    layer: str | None = None
    confidence: Confidence = Confidence.HIGH
    runner_up: FailureClass | None = None

    @property
    def remedy(self) -> str:
        return SPECS[self.failure_class].advice

    def to_json(self) -> dict[str, object]:
        spec = SPECS[self.failure_class]
        return {
            "failure_class": self.failure_class.value,
            "root_cause_line": self.root_cause_line,
            "root_cause_line_number": self.root_cause_number,
            "phase": self.phase.value if self.phase else None,
            "sglang_version": self.sglang_version,
            "evidence": self.evidence,
            "diagnosis": self.diagnosis,
            "remedy": spec.advice,
            "mem_fraction_static": spec.mem_fraction_static.value,
            "retry_unchanged": spec.retry_unchanged,
            "signature": self.signature,
            "layer": self.layer,
            "confidence": self.confidence.value,
            "runner_up": self.runner_up.value if self.runner_up else None,
        }


def classify(
    lines: Sequence[LogLine],
    events: Sequence[Event],
    outcome: Outcome | None = None,
    version: str | None = None,
) -> Classification:
    """Classify one attempt. ``version`` is what the caller knows; the log may say more."""
    attempt = read(lines, events, outcome or Outcome())
    version = detect_version(lines, events) or version
    verdicts = consequences.after_causes(attempt, layers.verdicts(attempt))
    decided = layers.rooted_earliest(attempt, verdicts)
    runner_up = next(
        (
            v.failure_class
            for v in verdicts[1:]
            if v.failure_class not in (decided.failure_class, FailureClass.NONE)
            and v.score >= decided.score - RUNNER_UP_MARGIN
        ),
        None,
    )
    known = dict(
        signature=decided.rule,
        layer=decided.layer,
        confidence=decided.confidence,
        runner_up=runner_up,
    )
    if decided.root is None:  # no failure in the log, or only the outcome says why
        diagnosis = explain.without_log(decided.failure_class, attempt.outcome, decided.caveat)
        return Classification(
            decided.failure_class, None, None, version, diagnosis=diagnosis, **known
        )
    ordered = attempt.ordered
    root = compiler_cause(ordered, caught_cause(ordered, decided.root))
    root = cuda_init_warning(ordered, assert_source(ordered, root))
    hinted = _signature_phase(decided)
    phase = phase_of(decided.failure_class, ordered, root, attempt.steps, hinted)
    root_line = ordered[root]
    diagnosis = explain.diagnose(decided.failure_class, root_line, events, attempt.outcome)
    if decided.caveat:
        diagnosis = f"{diagnosis.rstrip('.')}; {decided.caveat}."
    return Classification(
        failure_class=decided.failure_class,
        root_cause_line=root_line.raw.strip(),
        phase=phase,
        sglang_version=version,
        evidence=evidence_lines(ordered, attempt.hits, root, attempt.steps),
        diagnosis=diagnosis,
        root_cause_number=root_line.number,
        **known,
    )


def _signature_phase(decided: Verdict) -> Phase | None:
    if decided.layer != "signature":
        return None
    return next((s.phase for s in SIGNATURES if s.name == decided.rule), None)
