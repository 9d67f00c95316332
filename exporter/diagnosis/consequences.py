"""Verdicts that are another's consequence: ranked below their cause, or replaced by it.
Applied to every layer's verdicts before the best one is taken (classify.py)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from exporter.diagnosis.layers import CONFIDENT
from exporter.diagnosis.reading import IGNORED_ERRORS, Reading
from exporter.diagnosis.taxonomy import FailureClass
from exporter.diagnosis.verdict import Confidence, Verdict
from exporter.logs.lines import LogLine

# A client's report of a request refused for its own fault.
_REFUSED = re.compile(
    r"\b(?:Error code: 4\d\d|BadRequestError|RateLimitError|UnprocessableEntityError)\b"
)
# SGLang's OpenAI layer catching a request's error (logger.exception, then a 500 for it).
_CAUGHT = "Error in request:"
_HANDLER_SPAN = 30  # lines of the caught error's traceback under its record
_GROUP_CLASSES = (FailureClass.HANG_TIMEOUT, FailureClass.DISTRIBUTED_INIT)
_DEVICE_OOM = (
    FailureClass.POOL_INIT_OOM,
    FailureClass.WEIGHTS_OOM,
    FailureClass.CUDA_GRAPH_OOM,
    FailureClass.RUNTIME_OOM,
)


def after_causes(attempt: Reading, verdicts: Sequence[Verdict]) -> list[Verdict]:
    """The verdicts best first, each consequence below its cause."""
    ranked = [_ranked_below_its_cause(v, verdicts) for v in verdicts]
    return _survived(attempt, _swallowed_import(attempt, sorted(ranked, key=lambda v: -v.score)))


def _survived(attempt: Reading, verdicts: list[Verdict]) -> list[Verdict]:
    """One request's failure, with nothing naming a failure of the server and the server
    serving after it, is no failure: a request refused for its own fault (a 4xx: too long,
    over a rate limit), or one whose error the server's handler caught and answered."""
    best = verdicts[0]
    if (
        best.failure_class is not FailureClass.OTHER
        or best.confidence is Confidence.HIGH
        or best.root is None
        or not _one_request(attempt.ordered, best.root)
        or not attempt.serves_after(best.root)
    ):
        return verdicts
    healthy = next(v for v in verdicts if v.failure_class is FailureClass.NONE)
    return [healthy, *verdicts]


def _one_request(ordered: Sequence[LogLine], root: int) -> bool:
    if _REFUSED.search(ordered[root].message):
        return True
    above = ordered[max(0, root - _HANDLER_SPAN) : root]
    return any(line.message.startswith(_CAUGHT) for line in above)


def _ranked_below_its_cause(verdict: Verdict, verdicts: Sequence[Verdict]) -> Verdict:
    """A consequence ranks just below its cause: a collective that timed out or failed after
    a rank's own named crash (an OOM, a CUDA error) is the other ranks waiting for the one
    that died; a memory fault after an allocation failed is a kernel running on without the
    memory it asked for."""
    if verdict.root is None:
        return verdict
    if verdict.failure_class in _GROUP_CLASSES:
        causes = [v for v in verdicts if v.failure_class not in _GROUP_CLASSES]
    elif verdict.failure_class is FailureClass.CUDA_ERROR:
        causes = [v for v in verdicts if v.failure_class in _DEVICE_OOM]
    else:
        return verdict
    earlier = [
        cause.score
        for cause in causes
        if cause.root is not None and cause.root < verdict.root and cause.score >= CONFIDENT
    ]
    return replace(verdict, score=max(earlier) - 1) if earlier else verdict


def _swallowed_import(attempt: Reading, verdicts: list[Verdict]) -> list[Verdict]:
    """SGLang imports its models and multimodal processors lazily and logs a failed import as
    ``Ignore import error when loading ...``; an architecture "not supported" or with "no
    processor registered" after such lines is that import's consequence: a package."""
    if verdicts[0].failure_class is not FailureClass.UNSUPPORTED_MODEL:
        return verdicts
    ignored = next(
        (i for i, line in enumerate(attempt.ordered) if line.message.startswith(IGNORED_ERRORS)),
        None,
    )
    if ignored is None:
        return verdicts
    cause = Verdict(
        FailureClass.DEPENDENCY_ERROR,
        ignored,
        "wording",
        "swallowed_import_error",
        Confidence.MEDIUM,
        verdicts[0].score + 1,
    )
    return [cause, *verdicts]
