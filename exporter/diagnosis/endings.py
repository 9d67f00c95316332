"""The last layers: what the log's end says when no line names a cause. A traceback the
paste cut off before its exception, the first error-shaped line, SGLang's teardown alone, a
restart with no last words, a startup that stopped printing (layers.py asks them last)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from exporter.diagnosis.frames import frames_before, source_line
from exporter.diagnosis.origins import by_origin
from exporter.diagnosis.reading import (
    CARETS,
    SERVING,
    Reading,
    ended_on_purpose,
    is_exception,
    last_meaningful,
)
from exporter.diagnosis.report import after_the_log, pasted_around, typed_by_operator
from exporter.diagnosis.taxonomy import FailureClass
from exporter.diagnosis.verdict import Confidence, Verdict
from exporter.diagnosis.vocabulary import TEARDOWN, reports_error
from exporter.logs.events import EventKind
from exporter.logs.lines import LogLine

_EXIT_STATUS_ASKED = re.compile(r"\becho \$\?$")
_NEXT_CELL = re.compile(r"In \[\d+\]: \S")  # IPython's prompt, with the code typed at it
# On layers.py's scale, below everything a line names.
_ERROR_LINE_SCORE = 16
_RESTARTED_SCORE = 10
_STOPPED_SCORE = 5
# Steps a rank is still in until the next one: a fresh init then means the run died in it.
_UNFINISHED = {
    EventKind.WEIGHT_LOAD_BEGIN,
    EventKind.WEIGHT_SHARDS,
    EventKind.CUDA_GRAPH_BEGIN,
    *SERVING,
}


def by_error_lines(attempt: Reading) -> Verdict | None:
    """At worst ``other``: a traceback cut off before its exception, the first error line,
    or SGLang's teardown with the cause cut off above it."""
    cut = _cut_traceback(attempt)
    if cut is not None:
        return cut
    teardown = None
    for i in attempt.failure_lines:
        if not reports_error(attempt.ordered[i].message):
            continue  # worded, not an error by its form: layer 3 read it
        is_teardown = TEARDOWN.search(attempt.ordered[i].message) is not None
        if is_teardown and (i > attempt.stopped_at or i >= attempt.interrupted):
            continue  # a clean stop tears down too (on a Ctrl-C's own line, "^C[...] ...")
        if not is_teardown:
            return Verdict(
                FailureClass.OTHER,
                i,
                "error_line",
                "first_error",
                Confidence.LOW,
                _ERROR_LINE_SCORE,
            )
        teardown = i if teardown is None else teardown
    if teardown is None:
        return None
    return Verdict(
        FailureClass.OTHER,
        teardown,
        "error_line",
        "teardown_only",
        Confidence.LOW,
        _ERROR_LINE_SCORE,
        caveat="the log shows SGLang tearing down, not the error that started it (cut off above)",
    )


def _cut_traceback(attempt: Reading) -> Verdict | None:
    """A paste that ends inside a traceback: the frames say what the code was doing."""
    ordered = attempt.ordered
    frames = frames_before(ordered, len(ordered))
    if not frames or not _ends_the_log(ordered, frames[-1].position):
        return None
    rule = by_origin(frames, "")
    own = [frame for frame in frames if "/sglang/" in frame.path]
    anchor = own[-1] if own else frames[-1]
    root = source_line(ordered, anchor)
    return Verdict(
        rule.failure_class if rule else FailureClass.OTHER,
        anchor.position if root is None else root,
        "error_line",
        f"cut_traceback:{rule.name}" if rule else "cut_traceback",
        Confidence.LOW,
        _ERROR_LINE_SCORE,
        caveat="the traceback is cut off before its exception: read from the code it was in",
    )


def _ends_the_log(ordered: Sequence[LogLine], position: int) -> bool:
    """Whether the log ends at the frame at ``position``: after it only the frame's code
    (a statement, the lines its open brackets continue onto, Python 3.11's carets), then what
    the paste added, or the operator's or the report's own lines (``after_the_log``)."""
    code_lines = 0
    open_brackets = 0
    for line in ordered[position + 1 :]:
        if after_the_log(line):
            return True
        if pasted_around(line):
            continue
        code = code_lines == 0 or open_brackets > 0 or CARETS.match(line.message) is not None
        if not code or is_exception(line):
            return False
        code_lines += 1
        open_brackets += _balance(line.message)
    return True


def _balance(code: str) -> int:
    return sum(code.count(c) for c in "([{") - sum(code.count(c) for c in ")]}")


def by_restart(attempt: Reading) -> Verdict | None:
    """SGLang starting over (a rank initializing again while a step it had begun, or its
    serving, was still going) with no stop between: the run before died without a word,
    killed from outside (a container's memory limit, a kill -9), and a restart policy
    launched it again. A draft model's own init follows a finished one: no restart."""
    last: dict[int | None, EventKind] = {}  # each rank's latest step
    stopping = False  # asked to stop: what it still serves while draining ends with it
    for _, event in attempt.steps:
        rank = event.line.tp_rank
        if event.kind is EventKind.SIGTERM_RECEIVED:
            last.clear()
            stopping = True
            continue
        if stopping and event.kind is not EventKind.DIST_INIT_BEGIN:
            continue
        stopping = False
        if event.kind is EventKind.DIST_INIT_BEGIN and last.get(rank) in _UNFINISHED:
            return Verdict(
                FailureClass.KILLED_BY_SIGNAL,
                None,
                "progress",
                "restarted_silently",
                Confidence.LOW,
                _RESTARTED_SCORE,
                caveat="the log shows SGLang starting again with no last words from the run "
                "before: killed from outside (a memory limit, a kill -9), then relaunched",
            )
        last[rank] = event.kind
    return None


def by_progress(attempt: Reading) -> Verdict:
    """A log that stops mid-startup with no error: nothing more was ever printed (an
    in-process Engine, which never says it is serving, shutting down is no stop)."""
    reached = {event.kind for _, event in attempt.steps}
    last = last_meaningful(attempt.ordered[: attempt.interrupted])
    if (
        attempt.outcome.exit_code is None
        and reached
        and not reached & SERVING
        and last is not None
        and not ended_on_purpose(attempt.ordered, attempt.steps[-1][0])
        and not _returned_to_the_shell(attempt.ordered, attempt.steps[-1][0])
    ):
        return Verdict(
            FailureClass.HANG_TIMEOUT,
            last,
            "progress",
            "startup_stopped",
            Confidence.LOW,
            _STOPPED_SCORE,
        )
    return Verdict(FailureClass.NONE, None, "none", None, Confidence.HIGH, 0)


def _returned_to_the_shell(ordered: Sequence[LogLine], after: int) -> bool:
    """The shell says, after the last step and with no Ctrl-C or error before, that the
    program exited 0 (``$ echo $?`` then ``0``): it ended by itself (an in-process Engine's
    script that finished), it did not stop printing. Or IPython asks for the next cell
    (``In [5]:``): the cell that started an Engine returned, as a stuck one never does. A
    shell's prompt alone says nothing: ``docker logs`` returns one while the server it reads
    is stuck."""
    for i in range(after + 1, len(ordered)):
        message = ordered[i].message
        if message.startswith("^C") or reports_error(message):
            return False
        if _NEXT_CELL.match(message):
            return True
        if _EXIT_STATUS_ASKED.search(message) and typed_by_operator(ordered[i]):
            return i + 1 < len(ordered) and ordered[i + 1].message == "0"
    return False
