"""An attempt's log as every layer of the classifier reads it: in time order, with the
lines that match a signature and the lifecycle steps it reached."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property

from exporter.diagnosis.frames import LOOKBACK, frame_at, frames_before, is_frame_text
from exporter.diagnosis.order import in_time_order, stamped_later
from exporter.diagnosis.report import (
    after_the_log,
    pasted_around,
    reporters_words,
    sentences,
    the_reports_own,
    typed_by_operator,
)
from exporter.diagnosis.signatures import (
    ANY_LITERAL,
    CI_STEP_FAILED,
    CONSEQUENCE_EXCEPTIONS,
    DECISIVE,
    LONGEST_LITERAL,
    SIGNATURES,
    Signature,
)
from exporter.diagnosis.verdict import Outcome
from exporter.diagnosis.vocabulary import says_failed
from exporter.logs.events import Event, EventKind
from exporter.logs.lines import LogLine
from exporter.logs.tracebacks import (
    DIRECT_CAUSE,
    EXCEPTION_LINE,
    HANDLED,
    PY_WARNING,
    RAISED_LINE,
)

_ASSERT_SOURCE = re.compile(r"^assert\s")
_SCANCEL = "scancel "
_CANCELLED = re.compile(r"^(?:asyncio\.(?:exceptions\.)?)?CancelledError$")
# IPython (a notebook, Jupyter) heads a traceback with the exception's type, padded:
# "GatedRepoError          Traceback (most recent call last)"; its own line comes last.
_IPYTHON_HEADER = re.compile(r"^(?P<type>\S+) {3,}Traceback \(most recent call last\)$")
# ... and quotes the code of each frame (``File /x/y.py:402, in f(a)``) numbered, the line
# that raised under an arrow: "401 try:", "--> 402     response.raise_for_status()".
_IPYTHON_CODE = re.compile(r"^(?:-+> +)?\d+ ")
# The last line of an assert written over several lines, its message's literal: code, under
# a frame or where a newest-first export put it.
_ASSERT_TAIL = re.compile(r"\), f?[\"']")
_IPYTHON_FRAME_OR_CODE = re.compile(r"^(?:File \S+\.py:\d+, in |(?:-+> +)?\d+ )")
CARETS = re.compile(r"^[\s^~]+$")
# Engine.shutdown() and launch_server's finally end the process tree this way; the crash
# and SIGTERM paths include the parent.
# The process taking its own tree down, or its SIGTERM drain done (the drain's watchdog runs
# in the serving event loop: a server that was up).
_OWN_SHUTDOWN = re.compile(
    r"kill_process_tree called: .*include_parent=False"
    r"|Gracefully exiting\.\.\. Remaining number of requests 0\b"
)
_CUDA_INIT_WARNING = "UserWarning: CUDA initialization: "
_QUOTED_MIN = 24  # of the caught error's message: words, not a bare code
_NOTES_SPAN = 8  # lines from a caught error down to the "During handling" under it
_CAUSE_SPAN = 4  # lines from a cause's exception down to "The above exception ..."
_CUDA_INIT_WORDS = 30  # of the exception's message, found in the warning
_CUDA_INIT_SPAN = 300  # lines from the warning (at import) to the exception (at first use)
_OWN_EXIT_CODE = re.compile(r"^Exit code: \d+$")
# A command that follows a log and prints it (a ^C ends the command, not what wrote the log)
_FOLLOWER = re.compile(
    r"\btail\b.*\s-[a-zA-Z]*[fF]\b|--follow\b|\blogs\b.*\s-f\b|\bjournalctl\b.*\s-[a-zA-Z]*f"
    r"|\bwatch\b|\bless\b.*\+F"
)
_PROCESS_HEADER = re.compile(r"Process [\w-]+:$")  # multiprocessing, above a child's traceback
# A progress bar drawn once, naming nothing and never moved ("  0%|    | 0/23 [00:00<?, ?it/s]"):
# it says no more than the step that drew it.
_UNMOVED_BAR = re.compile(r"\s*0%\|[^|]*\| 0/\d+ \[00:00<\?")
# Signatures of a process group that lost a member: after a requested stop, its teardown.
GROUP_TORN_DOWN = frozenset({"collective_setup", "nccl_warning", "peer_lost", "collective_timeout"})
IGNORED_ERRORS = ("Ignore import error when loading",)
# Python's report of an exception it could not raise (a __del__ or a callback at interpreter
# exit, the unraisable hook): printed and ignored, the program goes on or exits as it would.
_UNRAISABLE = "Exception ignored in"
# An import that failed inside ``try``: its handler took a fallback, and when what the
# handler then raised ("During handling of the above exception ...") is decisive and of
# another class (an OOM in the fallback loader), that is the failure.
_IMPORT_ERRORS = ("ImportError", "ModuleNotFoundError")
# Lines that start a new thought: a wrapped line never continues into one of these.
_NOT_A_CONTINUATION = re.compile(r"^(?:File \"|Traceback|\[|During handling|The above)")
_LIFECYCLE = {
    EventKind.DIST_INIT_BEGIN,
    EventKind.WEIGHT_LOAD_BEGIN,
    EventKind.WEIGHT_SHARDS,
    EventKind.WEIGHT_LOAD_END,
    EventKind.MAMBA_CACHE_ALLOCATED,
    EventKind.KV_CACHE_ALLOCATED,
    EventKind.MEMORY_POOL_END,
    EventKind.CUDA_GRAPH_BEGIN,
    EventKind.CUDA_GRAPH_END,
    EventKind.SCHEDULER_READY,
    EventKind.HTTP_STARTED,
    EventKind.SERVER_READY,
    EventKind.PREFILL_BATCH,
    EventKind.DECODE_BATCH,
    EventKind.REQUEST_SERVED,
    EventKind.RETRACTION,
    EventKind.SIGTERM_RECEIVED,
}
_NO_SIGNATURE_HERE = {EventKind.DECODE_BATCH, EventKind.PREFILL_BATCH, EventKind.SERVER_ARGS}
SERVING = {
    EventKind.SERVER_READY,
    EventKind.DECODE_BATCH,
    EventKind.PREFILL_BATCH,
    EventKind.REQUEST_SERVED,
}
# kubectl describe's probe settings ("Liveness: http-get http://:30000/health delay=360s
# timeout=5s ..."): configuration, not a timeout that happened.
_PROBE_SPEC = re.compile(r"(?:Liveness|Readiness|Startup):\s+(?:http-get|exec|tcp-socket|grpc)\b")
# Signatures of what a server can serve after: a group that recovered, a download that fit,
# a GPU build warning that did not matter, a GPU fault of another process, a startup probe
# that failed before the server was up, an ssh session dropped under a server that nohup or
# tmux kept, a container paused (or a unit frozen) and let go, a pod that waited for a node
# and got one.
RECOVERABLE = frozenset(
    {
        "nccl_warning",
        "download_disk_full",
        "torch_build_lacks_gpu",
        "gpu_xid",
        "startup_probe_failed",
        "session_hangup",
        "frozen",
        "pod_unschedulable",
        "transformers_fallback",
    }
)
# The kernel's words for an OOM kill: of the server, unless it served on (``_outlived``).
_KERNEL_KILLS = frozenset({"host_oom_killer", "host_oom_killer_report"})
_SGLANG_PROCESS = "(sglang::"  # the name SGLang gives its subprocesses, as the kernel shows it


@dataclass(frozen=True)
class Hit:
    signature: Signature
    position: int  # index into the time-ordered lines


@dataclass(frozen=True)
class Reading:
    """The time-ordered log and what was found in it, as every layer reads it."""

    ordered: list[LogLine]
    hits: list[Hit]
    steps: list[tuple[int, Event]]  # lifecycle events by position
    batches: list[tuple[int, Event]]  # decode batch lines by position
    outcome: Outcome
    # Where SGLang was asked to stop (SIGTERM), or the end: what a stop brings about comes
    # after it.
    stopped_at: int
    # Serving and each launch (SGLang printing its arguments), by position: a supervisor's
    # relaunch starts another run, whose serving says nothing of the run before.
    runs: list[tuple[int, Event]]
    recovered: frozenset[int] = frozenset()  # warnings the server served after (no failure)
    # The number of the operator's Ctrl-C's line by the file's own order, or None: a kernel's
    # stamped lines pasted below move what was typed after them up, in time order.
    typed_at: int | None = None

    def served_before(self, position: int) -> bool:
        """Whether the server had served (ready, a batch) by the line at ``position``."""
        return any(event.kind in SERVING for p, event in self.steps if p <= position)

    def serves_after(self, position: int) -> bool:
        """Whether the server served (a batch, ready again) after the line at ``position``,
        before any relaunch."""
        served = _serves_after(self.runs, position)
        # below a command the operator typed, another capture (`kubectl logs --previous`
        # under the pod's events): of another moment, not after the line
        return served is not None and not any(
            typed_by_operator(line) for line in self.ordered[position + 1 : served]
        )

    @cached_property
    def interrupted(self) -> int:
        """Where the operator's Ctrl-C stopped the process (``interrupted_at``), or the end."""
        return interrupted_at(self.ordered)

    @cached_property
    def failure_lines(self) -> list[int]:
        """Positions of the lines that say something failed (vocabulary.says_failed), outside
        traceback frames and the code lines printed under them, and not a Ctrl-C's traceback;
        several layers ask."""
        ordered = self.ordered
        ignored = unraisable(ordered)
        found = []
        for i, line in enumerate(ordered):
            message = line.message
            if (
                says_failed(message)
                and not is_frame_text(ordered, i)
                and not (i > 0 and frame_at(ordered, i - 1) is not None and not is_exception(line))
                and not PY_WARNING.search(message)
                and not message.startswith(IGNORED_ERRORS)
                and i not in ignored
                and not _interrupted(ordered, i)
                and not reporters_words(line)
                and i not in self.recovered
                and not _PROBE_SPEC.match(message)
            ):
                found.append(i)
        return found


def read(lines: Sequence[LogLine], events: Sequence[Event], outcome: Outcome) -> Reading:
    # What the report around the log wrote reads as blank lines: no layer takes it for the
    # server's (the evidence keeps the raw text of every line).
    own = the_reports_own(lines)
    ordered = in_time_order([_blanked(line) if line.number in own else line for line in lines])
    position_of = {line.number: i for i, line in enumerate(ordered)}
    placed = sorted(
        ((position_of[e.line.number], e) for e in events if e.line.number in position_of),
        key=lambda pair: pair[0],
    )
    steps = [(p, e) for p, e in placed if e.kind in _LIFECYCLE]
    runs = [(p, e) for p, e in placed if e.kind in SERVING or e.kind is EventKind.SERVER_ARGS]
    batches = [(p, e) for p, e in placed if e.kind is EventKind.DECODE_BATCH]
    sigterms = (p for p, e in steps if e.kind is EventKind.SIGTERM_RECEIVED)
    stopped_at = next(sigterms, len(ordered))
    skip = {e.line.number for e in events if e.kind in _NO_SIGNATURE_HERE}
    # The operator's Ctrl-C, by the file's own order (a newest-first export or another
    # node's log merged by time would move what was typed after the log into it).
    interrupted = interrupted_at(lines)
    typed_at = lines[interrupted].number if interrupted < len(lines) else None
    hits = _drop_expected(_find_hits(ordered, skip), ordered, stopped_at, typed_at)
    recovered = frozenset(
        h.position
        for h in hits
        if _recovered_from(h, runs, ordered)
        or _outlived(h, runs, ordered)
        or _cancelled_as_asked(ordered, h)
    )
    hits = [h for h in hits if h.position not in recovered]
    return Reading(ordered, hits, steps, batches, outcome, stopped_at, runs, recovered, typed_at)


def _recovered_from(
    hit: Hit, runs: Sequence[tuple[int, Event]], ordered: Sequence[LogLine]
) -> bool:
    """A warning or a passing condition (RECOVERABLE: c10d retrying a peer not listening
    yet, a download warning, a probe failed while starting) that the server went on to serve
    after: no failure. A line with no stamp of its own (the shell's auto-logout) comes after
    the stamped lines above it: serving below it counts where it was not stamped earlier
    than they were (a `tail` of the log read the next morning repeats what came before)."""
    if hit.signature.name not in RECOVERABLE:
        return False
    last_stamped = None
    if ordered[hit.position].timestamp is None:
        stamped = (line for line in reversed(ordered[: hit.position]) if line.timestamp)
        last_stamped = next(stamped, None)
    return any(
        last_stamped is None
        or ordered[p].timestamp is None
        or stamped_later(ordered[p], last_stamped, ordered)
        for p in _serving_after(runs, hit.position)
    )


def _outlived(hit: Hit, runs: Sequence[tuple[int, Event]], ordered: Sequence[LogLine]) -> bool:
    """The kernel's OOM kill of a process while the server, by the clocks of both, went on
    serving with no relaunch between: it killed another program. Not one of SGLang's own
    ("sglang::detoken"): the scheduler prints on while the requests wait on the dead one."""
    if hit.signature.name not in _KERNEL_KILLS:
        return False
    kill = ordered[hit.position]
    if _SGLANG_PROCESS in kill.message:
        return False
    # the first of the server's steps after the kill: serving, not a relaunch
    after = (event for p, event in runs if stamped_later(ordered[p], kill, ordered))
    return next((event.kind in SERVING for event in after), False)


def _serves_after(runs: Sequence[tuple[int, Event]], position: int) -> int | None:
    """Where the server first served after ``position``, before any relaunch."""
    return next(_serving_after(runs, position), None)


def _serving_after(runs: Sequence[tuple[int, Event]], position: int) -> Iterator[int]:
    """Where the server served after ``position``, before any relaunch."""
    for p, event in runs:
        if p <= position:
            continue
        if event.kind is EventKind.SERVER_ARGS:
            return
        if event.kind in SERVING:
            yield p


def _blanked(line: LogLine) -> LogLine:
    return LogLine(line.number, line.raw, "", line.timestamp, line.ranks, line.foreign_timestamp)


def _interrupted(ordered: Sequence[LogLine], position: int) -> bool:
    """A traceback that ends in KeyboardInterrupt, or that exception: a Ctrl-C (SIGINT)
    stopped the process where it was, which reports a stop, not a failure. asyncio.run
    first cancels its task: a CancelledError is the Ctrl-C's when the traceback chained
    under it ends in KeyboardInterrupt."""
    line = ordered[position]
    if _CANCELLED.match(line.message):
        return _chained_interrupt(ordered, position)
    if not line.message.removeprefix("^C").startswith("Traceback"):
        return _is_interrupt(line)
    for i in range(position + 1, len(ordered)):
        following = ordered[i]
        if following.message.startswith("Traceback") or following.has_sglang_prefix:
            return False  # another traceback, or the server again: this one was cut off
        if is_exception(following):
            if _CANCELLED.match(following.message):
                return _chained_interrupt(ordered, i)
            return _is_interrupt(following)
    return False


def _chained_interrupt(ordered: Sequence[LogLine], cancelled: int) -> bool:
    """Whether the traceback chained under the CancelledError at ``cancelled`` ("During
    handling of the above exception ...") ends in KeyboardInterrupt."""
    marker = _next_said(ordered, cancelled)
    if marker is None or not ordered[marker].message.startswith(HANDLED):
        return False
    chained = _next_said(ordered, marker)
    return chained is not None and _interrupted(ordered, chained)


def _next_said(ordered: Sequence[LogLine], after: int) -> int | None:
    """The next line below ``after`` that is not blank, within a few."""
    for i in range(after + 1, min(len(ordered), after + 4)):
        if ordered[i].message:
            return i
    return None


def ended_on_purpose(ordered: Sequence[LogLine], after: int) -> bool:
    """The process took its own tree down after ``after`` (``Engine.shutdown()``, or
    ``run_server`` returning), and no Ctrl-C made it."""
    return any(_OWN_SHUTDOWN.search(line.message) for line in ordered[after:]) and not any(
        _is_interrupt(line) for line in ordered
    )


def _is_interrupt(line: LogLine) -> bool:
    """A KeyboardInterrupt: Python's exception line, or IPython's header above its frames."""
    match = EXCEPTION_LINE.match(line.message) or _IPYTHON_HEADER.match(line.message)
    return match is not None and match.group("type") == "KeyboardInterrupt"


def interrupted_at(ordered: Sequence[LogLine]) -> int:
    """Where the operator's Ctrl-C (its echo, "^C", or the KeyboardInterrupt's traceback)
    stopped the process, as a SIGTERM does: what follows is the stop's, not the run's."""
    return next(
        (
            i
            for i, line in enumerate(ordered)
            if (line.message.startswith("^C") and not _stops_a_follower(ordered, i))
            or (line.message.startswith("Traceback") and _interrupted(ordered, i))
            or (_IPYTHON_HEADER.match(line.message) and _is_interrupt(line))
        ),
        len(ordered),
    )


def _stops_a_follower(ordered: Sequence[LogLine], position: int) -> bool:
    """The ^C at ``position`` ended what the operator last typed, and that follows a log
    (``tail -f sgl.log`` on a server started with ``&``): the server ran on."""
    typed = (line.message for line in reversed(ordered[:position]) if typed_by_operator(line))
    command = next(typed, "")
    return _FOLLOWER.search(command) is not None


def unraisable(ordered: Sequence[LogLine]) -> frozenset[int]:
    """The lines of what Python reported as ignored (``Exception ignored in: ...``, its
    traceback, the exception that ends it)."""
    found: set[int] = set()
    for i, line in enumerate(ordered):
        if not line.message.startswith(_UNRAISABLE):
            continue
        end = min(len(ordered), i + LOOKBACK)
        ends = (j for j in range(i + 1, end) if is_exception(ordered[j]) or _raised(ordered, j))
        found.update(range(i, next(ends, i) + 1))
    return frozenset(found)


def _raised(ordered: Sequence[LogLine], position: int) -> bool:
    return RAISED_LINE.match(ordered[position].message) is not None and bool(
        frames_before(ordered, position)
    )


def first_real_exception(ordered: Sequence[LogLine]) -> int | None:
    ignored = unraisable(ordered)
    for i, line in enumerate(ordered):
        if i in ignored or CI_STEP_FAILED.match(line.message):
            continue
        match = RAISED_LINE.match(line.message)
        if match and match.group("type").rsplit(".", 1)[-1] not in CONSEQUENCE_EXCEPTIONS:
            if frames_before(ordered, i) or (i > 0 and "Traceback" in ordered[i - 1].message):
                return i
            if match.group("message") and EXCEPTION_LINE.match(line.message):
                return i
    return None


def is_exception(line: LogLine) -> bool:
    return EXCEPTION_LINE.match(line.message) is not None


def _handled_import(ordered: Sequence[LogLine], position: int) -> bool:
    match = EXCEPTION_LINE.match(ordered[position].message)
    if match is None or match.group("type").rsplit(".", 1)[-1] not in _IMPORT_ERRORS:
        return False
    # a blank line between, which a wrapper may have left its mark on
    return any(line.message.startswith(HANDLED) for line in ordered[position + 1 : position + 4])


def _find_hits(ordered: Sequence[LogLine], skip: set[int]) -> list[Hit]:
    hits: list[Hit] = []
    previous: LogLine | None = None
    for i, line in enumerate(ordered):
        # The source line under a traceback frame quotes code ('raise RuntimeError("NCCL
        # error...")'), not an error that happened.
        text = line.message
        is_source = _ASSERT_TAIL.match(text) is not None or (
            previous is not None
            and (
                previous.message.startswith('File "')
                or (_IPYTHON_CODE.match(text) and _IPYTHON_FRAME_OR_CODE.match(previous.message))
            )
            and not is_exception(line)
            and not text.startswith('File "')  # a frame of its own (lines a chat joined)
            and not _asserts_bare(ordered, i)
        )
        if (
            line.number in skip
            or is_source
            or reporters_words(line)
            or typed_by_operator(line)
            or _IPYTHON_HEADER.match(text)
        ):
            previous = line if is_source else None
            continue
        matched = False
        # One search for every signature's literals: most lines hold none of them.
        for signature in SIGNATURES if ANY_LITERAL.search(text) else ():
            if signature.matches(text):
                hits.append(Hit(signature, i))
                matched = True
        if not matched and previous is not None and not _NOT_A_CONTINUATION.match(text):
            hits.extend(Hit(s, i - 1) for s in _wrapped(previous.message, text))
        previous = line
    return hits


def _asserts_bare(ordered: Sequence[LogLine], position: int) -> bool:
    """An ``assert ...`` source line whose AssertionError carries no message: the source
    line is the message."""
    if not _ASSERT_SOURCE.match(ordered[position].message):
        return False
    following = position + 1
    while following < len(ordered) and CARETS.match(ordered[following].message):
        following += 1
    return following < len(ordered) and ordered[following].message == "AssertionError"


def _drop_expected(
    hits: list[Hit], ordered: Sequence[LogLine], stopped_at: int, interrupted: int | None
) -> list[Hit]:
    """Hits that are no failure: an error SGLang says it ignores (``Ignore import error when
    loading ...`` and the text it quotes on the next line) or Python does (``unraisable``),
    an import whose handler took a fallback that failed for a reason of its own, a scheduler
    SGLang found dead that exited by itself (its own error is above), after a graceful
    SIGTERM weak signs such as a shell's ``Killed`` (SGLang ends even a clean drain with
    SIGKILL) and the process group torn down (``_after_a_stop``), and weak signs after the
    operator's Ctrl-C (``interrupted``: its line's number in the file)."""
    ignored = {
        h.position
        for h in hits
        if _handled_import(ordered, h.position)
        and any(
            o.position > h.position
            and o.signature.priority >= DECISIVE
            and o.signature.failure_class is not h.signature.failure_class
            for o in hits
        )
    }
    ignored |= unraisable(ordered)
    for i, line in enumerate(ordered):
        if line.message.startswith(IGNORED_ERRORS):
            ignored.add(i)
            if i + 1 < len(ordered) and not ordered[i + 1].has_sglang_prefix:
                ignored.add(i + 1)
    return [
        h
        for h in hits
        if h.position not in ignored
        and not (h.position > stopped_at and _after_a_stop(h.signature))
        and not (
            interrupted is not None
            and ordered[h.position].number > interrupted
            and h.signature.priority < DECISIVE
        )
        and not (h.signature.name == "scheduler_died" and _exited_by_itself(ordered, h.position))
    ]


def _cancelled_as_asked(ordered: Sequence[LogLine], hit: Hit) -> bool:
    """Slurm's CANCELLED with no reason of its own (no "DUE TO ...") under the job's own
    ``scancel`` (a batch script ending its background server once its client is done): a
    stop asked for."""
    message = ordered[hit.position].message
    return (
        hit.signature.name == "job_cancelled"
        and "CANCELLED AT" in message
        and "DUE TO" not in message
        and any(_SCANCEL in (line.message or line.raw) for line in ordered[: hit.position])
    )


def _exited_by_itself(ordered: Sequence[LogLine], position: int) -> bool:
    """SGLang's "scheduler is dead", then the dead process's exit code on the next line: a
    status of 0 or more is an exit of its own (a Python error's 1), a negative one a signal."""
    following = position + 1
    return following < len(ordered) and _OWN_EXIT_CODE.match(ordered[following].message) is not None


def _after_a_stop(signature: Signature) -> bool:
    """What a requested stop brings about: weak signs, and the process group torn down under
    the ranks still in it (a peer's store gone, a collective cut short)."""
    return signature.priority < DECISIVE or signature.name in GROUP_TORN_DOWN


def _wrapped(first: str, second: str) -> list[Signature]:
    """Signatures that match only across a hard wrap between two lines (``EAD``/``DRINUSE``):
    those with a literal that spans the break, looked for around the break alone."""
    found: list[Signature] = []
    for separator in ("", " "):
        around = first[-LONGEST_LITERAL:] + separator + second[:LONGEST_LITERAL]
        if not ANY_LITERAL.search(around):
            continue
        joined = first + separator + second
        for signature in SIGNATURES:
            if (
                signature not in found
                and any(lit in around and lit not in first for lit in signature.literals)
                and signature.matches(joined)
                and not (signature.matches(first) or signature.matches(second))
            ):
                found.append(signature)
    return found


def last_meaningful(ordered: Sequence[LogLine]) -> int | None:
    """The last thing the server said before it went silent. Python's UserWarnings (and the
    ``warnings.warn(...)`` source line under each) are import-time noise, not progress; what
    the paste added (a closing fence, a reporter's "(nothing after this)") is no log line,
    nor is what followed the server's last line from an operator (a ``^C``, a Ctrl-C's
    traceback, a shell prompt and the output of its commands) or in the report's next
    section (under a heading: its environment)."""
    end = tail_end = len(ordered)
    server_last = -1
    for i in range(len(ordered) - 1, -1, -1):
        if ordered[i].has_sglang_prefix:
            end = tail_end  # the server spoke before that tail: it is not the server's
            server_last = i
            break
        message = ordered[i].message
        if (
            after_the_log(ordered[i])
            or _interrupted(ordered, i)
            or (i + 1 == tail_end and _PROCESS_HEADER.match(message))
        ):
            tail_end = i
    for i in range(end - 1, -1, -1):
        message = ordered[i].message
        if (
            not pasted_around(ordered[i])
            and not (i > server_last >= 0 and sentences(message))
            and not _UNMOVED_BAR.match(message)
            and not PY_WARNING.search(message)
            and not message.startswith("warnings.warn(")
        ):
            return i
    return None


# Triton's compile error names only where in the kernel it failed ("CompilationError: at
# 96:27:"), then quotes the kernel's source up to a caret; what failed is the error it wraps:
# printed under the caret (its repr), or the exception chained into it ("The above exception
# was the direct cause ...").
_TRITON_WRAPPER = re.compile(r"CompilationError: at \d+:\d+:$")
_WRAPPED_ERROR = re.compile(r"^(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception)(?:\(|: )")
_KERNEL_EXCERPT = 40  # lines of kernel source Triton quotes, at most


def compiler_cause(ordered: Sequence[LogLine], root: int) -> int:
    """The error a Triton compile error wraps, when the log shows it; else ``root``."""
    if not _TRITON_WRAPPER.search(ordered[root].message):
        return root
    below = ordered[root + 1 : root + 1 + _KERNEL_EXCERPT]
    caret = next((i for i, line in enumerate(below) if line.message == "^"), None)
    if (
        caret is not None
        and caret + 1 < len(below)
        and _WRAPPED_ERROR.match(below[caret + 1].message)
    ):
        return root + 2 + caret
    for i in range(root - 1, max(-1, root - LOOKBACK), -1):
        if ordered[i].has_sglang_prefix or ordered[i].message.startswith(HANDLED):
            break  # the traceback's chain starts no further up
        if ordered[i].message.startswith(DIRECT_CAUSE):
            cause = _raised_above(ordered, i, _CAUSE_SPAN)
            return root if cause is None else cause
    return root


def _raised_above(ordered: Sequence[LogLine], marker: int, span: int) -> int | None:
    """The exception line of the traceback a chain marker ("The above exception ...",
    "During handling ...") follows: within ``span`` lines above it, under any notes."""
    above = range(marker - 1, max(-1, marker - span), -1)
    return next((j for j in above if is_exception(ordered[j])), None)


def caught_cause(ordered: Sequence[LogLine], root: int) -> int:
    """A handler that raises anew with the caught error's words in its own ("Capture cuda
    graph failed: {e}"): the caught error, above "During handling ...", is where it failed."""
    match = EXCEPTION_LINE.match(ordered[root].message)
    said = (match.group("message") or "") if match else ""
    if len(said) < _QUOTED_MIN:
        return root
    for i in range(root - 1, max(-1, root - LOOKBACK), -1):
        if ordered[i].has_sglang_prefix:
            break  # the traceback's chain starts no further up
        if ordered[i].message.startswith(HANDLED):
            # under any notes the caught error printed (CUDA's "might be asynchronously
            # reported ...")
            caught = _raised_above(ordered, i, _NOTES_SPAN)
            words = EXCEPTION_LINE.match(ordered[caught].message) if caught is not None else None
            message = (words.group("message") or "") if words else ""
            return caught if len(message) >= _QUOTED_MIN and message in said else root
    return root


def cuda_init_warning(ordered: Sequence[LogLine], root: int) -> int:
    """torch warns when its CUDA initialization fails ("UserWarning: CUDA initialization:
    Found no NVIDIA driver on your system ..."), then raises the same words when CUDA is
    used: the warning is where it failed first."""
    match = EXCEPTION_LINE.match(ordered[root].message)
    said = (match.group("message") or "")[:_CUDA_INIT_WORDS] if match else ""
    if len(said) < _CUDA_INIT_WORDS:
        return root
    for i in range(max(0, root - _CUDA_INIT_SPAN), root):
        text = ordered[i].message
        if _CUDA_INIT_WARNING in text and said in text and not reporters_words(ordered[i]):
            return i
    return root


def assert_source(ordered: Sequence[LogLine], root: int) -> int:
    """A bare ``AssertionError`` says nothing; the ``assert ...`` source line above it does."""
    if ordered[root].message != "AssertionError":
        return root
    source = root - 1
    while source > 0 and CARETS.match(ordered[source].message):  # Python 3.11's ^^^^ markers
        source -= 1
    return source if source >= 0 and _ASSERT_SOURCE.match(ordered[source].message) else root
