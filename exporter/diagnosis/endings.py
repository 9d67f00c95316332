"""The last layers: what the log's end says when no line names a cause. A traceback the
paste cut off before its exception, the first error-shaped line, SGLang's teardown alone, a
restart with no last words, a startup that stopped printing, a server gone silent while
serving (layers.py asks them last)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from exporter.diagnosis.frames import frames_before, source_line
from exporter.diagnosis.order import stamped_later, stamped_no_later
from exporter.diagnosis.origins import by_origin
from exporter.diagnosis.reading import (
    CARETS,
    SERVING,
    Reading,
    ended_on_purpose,
    is_exception,
    last_meaningful,
)
from exporter.diagnosis.report import (
    after_the_log,
    answers_the_report,
    pasted_around,
    typed_by_operator,
)
from exporter.diagnosis.taxonomy import FailureClass
from exporter.diagnosis.verdict import Confidence, Verdict
from exporter.diagnosis.vocabulary import TEARDOWN, reports_error
from exporter.logs.events import EventKind
from exporter.logs.lines import LogLine

_EXIT_STATUS_ASKED = re.compile(r"\becho \$\?$")
_NEXT_CELL = re.compile(r"In \[\d+\]: \S")  # IPython's prompt, with the code typed at it
# The operator's curl of the server's health, and its answer: the status alone or the line
_HEALTH_PROBE = re.compile(r"\bcurl\b.*/(?:health(?:_generate)?|v1/models|get_model_info)\b")
_ANSWERED_200 = re.compile(r"(?:HTTP/[\d.]+ )?200(?: OK)?$")
# What those around a server say when it stops answering without a word: a health checker's
# or a client's timeouts and failed checks, a balancer taking it out, the operator's "nothing
# in the log for 20 minutes". Phrases, not the word "timeout": a flag names it too.
_WENT_SILENT = re.compile(
    r"(?i)\btimed[ -]?out\b|\w*Timeout(?:Error|Exception)?:|\bno (?:response|reply)\b"
    r"|not (?:responding|answering)|unresponsive|\b(?:hung|hangs|hanging|stuck|froze|frozen)\b"
    r"|\bnothing (?:[\w,]+ ){0,5}for (?:\d+|an?|over|about|almost) (?:[\w+]+ )?(?:min|hour|h\b)"
    r"|\bnothing (?:else |more |new )?(?:after|since) (?:that|this|it)\b"
    r"|\bno (?:new )?(?:output|logs?|lines?|progress|batch|tokens|entries) (?:[\w,]+ ){0,4}"
    r"(?:for|since|after)\b|timeout of \d+ ?m?s exceeded"
    r"|failed (?:protocol|health|liveness|readiness) (?:test|check|probe)"
    r"|(?:health ?checks?|probes?) (?:failed|failing|timed out)|(?:Liveness|Readiness) probe failed"
    r"|out of (?:the )?(?:pool|rotation)|\bunhealthy\b|exceeded (?:the )?(?:timeout|deadline)"
    r"|(?-i:Gateway Time-?out)|upstream[_ ](?:reset|request timeout|timed out)"
    r"|(?<![\w.])504(?![\w.])"  # a proxy's status for an upstream that never answered
)
# A question ("is it hung?") asks; a refused connection is a server not listening (yet).
_NOT_SILENCE = re.compile(r"\?|connection refused")
# A command that starts the server: what it printed is the server's run, not a look at it.
_LAUNCH = re.compile(
    r"sglang\.launch_server|sglang serve|docker(?:-compose| compose)? (?:run|up)\b"
)
# A platform or a supervisor saying it stopped the server on its own account: a stop verb,
# with a reason no operator's own stop gives (automatically, a limit, idleness, a spot
# reclaim, a drain, an updater's or a reaper's name).
_STOPPED = re.compile(
    r"(?i)\b(?:stop(?:ped|ping|s)?|kill(?:ed|ing|s)?|terminat(?:ed|ing|es?)|restart(?:ed|ing|s)?"
    r"|drain(?:ed|ing|s)?|evict(?:ed|ing|s)?|cull(?:ed|ing|s)?|reap(?:ed|ing|s)?"
    r"|reclaim(?:ed|ing|s)?|recreat\w*|shut(?:ting)? down|disrupt(?:ed|ing|s)?)\b"
    r"|Restart Signaled"
)
_ON_ITS_OWN = re.compile(
    r"(?i)automatic|unexpected|longer than|maximum|\blimit\b|inactiv|\bidle\b|\bTTL\b|\bspot\b"
    r"|preempt|reclaim|drain|evict|cull|\breap|watchtower|needrestart|scheduled event"
    r"|\brepair\b|underutili[sz]ed|consolidat"  # Karpenter's reasons for a node it removes
)
# ... and what it stopped: something that runs (a cache evicted on demand is no stop).
_RUNNING_THING = re.compile(
    r"(?i)\b(?:server|container|pod|node|instance|vm|machine|job|task|step|notebook|workspace"
    r"|session|process|pid|service|driver|kernel|replica|worker|deployment|alloc\w*|sglang)e?s?\b"
    r"|\.service\b|/sglang"
)
# SGLang's count of what its drain still waits for ("Gracefully exiting... Remaining number
# of requests 36.")
_DRAINING = re.compile(r"Remaining number of requests (\d+)")
# On layers.py's scale, below everything a line names.
_STOPPED_FROM_OUTSIDE_SCORE = 18
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


def _typed_before(attempt: Reading, position: int) -> bool:
    """The operator's Ctrl-C came first in the file, or on this line."""
    return attempt.typed_at is not None and attempt.ordered[position].number >= attempt.typed_at


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
        if is_teardown and (i > attempt.stopped_at or _typed_before(attempt, i)):
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
        and not _answered_a_probe(attempt.ordered, attempt.steps[-1][0])
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


def by_outside_stop(attempt: Reading) -> Verdict | None:
    """A platform's or a supervisor's word that it stopped the server on its own account
    (a workspace's autostop, a notebook's session limit, a spot reclaim, a node drain, an
    updater restarting the container), at the log's end, with no stop of SGLang's own after
    it: killed from outside. A server that drained on the SIGTERM it got stopped cleanly."""
    ordered = attempt.ordered
    stopped = attempt.stopped_at < len(ordered)
    cut = stopped and _drain_cut(ordered, attempt.stopped_at)
    if stopped and not cut:
        return None
    last = attempt.steps[-1][0] if attempt.steps else -1
    for i, line in enumerate(ordered):
        # above the server's last line only a stamped one can have come at its end (the
        # cheap tests first: this reads every line)
        if line.has_sglang_prefix or (i <= last and line.foreign_timestamp is None):
            continue
        message = line.message  # the report's own words are blank: they tell, not record
        if (
            not _STOPPED.search(message)
            or not _RUNNING_THING.search(message)
            # who did it may be the record's program (in the raw line: its first row only,
            # where a hard wrap was rejoined); a SIGKILL that cut the drain needs no reason
            or not (
                _ON_ITS_OWN.search(message)
                or _ON_ITS_OWN.search(line.raw)
                or (cut and "SIGKILL" in message)
            )
            or typed_by_operator(line)
        ):
            continue
        if i > last or stamped_no_later(ordered[last], line, ordered):
            if ended_on_purpose(ordered, 0):
                return None
            return Verdict(
                FailureClass.KILLED_BY_SIGNAL,
                i,
                "outcome",
                "stopped_on_its_own_account",
                Confidence.LOW,
                _STOPPED_FROM_OUTSIDE_SCORE,
            )
    return None


def _drain_cut(ordered: Sequence[LogLine], sigterm: int) -> bool:
    """The drain SGLang began on its SIGTERM still had requests when the log ends: the
    grace period ran out and whoever sent the SIGTERM killed it."""
    left = (_DRAINING.search(line.message) for line in reversed(ordered[sigterm:]))
    last = next((match for match in left if match is not None), None)
    return last is not None and int(last.group(1)) > 0


def by_silence(attempt: Reading) -> Verdict | None:
    """A server that served, then printed nothing more, while what follows says it stopped
    answering (a health checker's failed checks, a client's timeouts, the operator's
    "nothing after that for 40 minutes"): hung, at its last progress line. A log that just
    ends while serving says nothing of the kind: a paste cut there, healthy."""
    if not attempt.steps:
        return None
    last, event = attempt.steps[-1]
    if event.kind not in SERVING or ended_on_purpose(attempt.ordered, last):
        return None
    if not _found_not_answering(attempt.ordered, last):
        return None
    return Verdict(
        FailureClass.HANG_TIMEOUT,
        last,
        "progress",
        "went_silent",
        Confidence.LOW,
        _STOPPED_SCORE,
        caveat="the server stopped printing while serving and was found not answering",
    )


def _found_not_answering(ordered: Sequence[LogLine], last: int) -> bool:
    """Whether a line not the server's says it stopped answering: after its last line, or
    above it, stamped later (a proxy's 504s pasted first) or shown by a command the operator
    ran (a load balancer's target health). A reporter's words above the log tell a story,
    not the state it ended in ("I almost killed it thinking it hung")."""
    command = None  # where the operator's latest command above the server's lines was typed
    for i, line in enumerate(ordered):
        if typed_by_operator(line):
            command = None if _LAUNCH.search(line.message) else i
        elif line.has_sglang_prefix:
            command = None
        if line.has_sglang_prefix:
            continue
        if i <= last and command is None and line.foreign_timestamp is None:
            continue  # above the server's last line, neither shown by a command nor stamped
        if answers_the_report(line):
            continue  # a reply explains ("Health reports unhealthy until warmup finishes")
        # a record rejoined from a hard wrap reads whole; the report's own words (blanked
        # for the other layers) as written
        text = line.message or line.raw
        if not _WENT_SILENT.search(text) or _NOT_SILENCE.search(text):
            continue
        if i > last or command is not None or stamped_later(line, ordered[last], ordered):
            return True
    return False


def _answered_a_probe(ordered: Sequence[LogLine], after: int) -> bool:
    """The operator asked the server's health after its last step and it answered 200: it
    is up, however little it printed (``--log-level warning``)."""
    for i in range(after + 1, len(ordered) - 1):
        if typed_by_operator(ordered[i]) and _HEALTH_PROBE.search(ordered[i].message):
            return _ANSWERED_200.match(ordered[i + 1].message) is not None
    return False


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
