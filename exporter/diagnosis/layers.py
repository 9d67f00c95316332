"""The classifier's layers: each reads the attempt and answers with verdicts on one scale
of scores (the signatures' priorities); see classify.py for the order and the rules."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from exporter.diagnosis.endings import (
    by_error_lines,
    by_outside_stop,
    by_progress,
    by_restart,
    by_silence,
)
from exporter.diagnosis.frames import chained_frames, frames_before, is_frame_text
from exporter.diagnosis.order import stamped_no_later
from exporter.diagnosis.origins import by_origin
from exporter.diagnosis.placement import where_oom
from exporter.diagnosis.reading import (
    PY_WARNING,
    Hit,
    Reading,
    first_real_exception,
    is_exception,
    last_meaningful,
)
from exporter.diagnosis.report import reporters_words
from exporter.diagnosis.signatures import DECISIVE, Resolve, Signature
from exporter.diagnosis.taxonomy import FailureClass
from exporter.diagnosis.verdict import Confidence, Verdict
from exporter.diagnosis.vocabulary import Family, family_of
from exporter.logs.events import EventKind
from exporter.logs.lines import LogLine
from exporter.logs.tracebacks import RAISED_LINE, TRACEBACK_START

# The kernel's report of what SGLang then failed for, logged first: a GPU fault under a CUDA
# error, an OOM kill under the death SGLang noticed.
_KERNEL_REPORTS = {
    FailureClass.CUDA_ERROR: frozenset({"gpu_xid"}),
    FailureClass.KILLED_BY_SIGNAL: frozenset({"host_oom_killer"}),
}
CONFIDENT = 80  # a signature of a named family or better (signatures.py's tiers)
# The other layers on the signatures' priority scale: an exception outranks a condition, a
# worded error line or telling numbers outrank an exception nothing knows, and how the
# process ended outranks "other"; a startup that merely stopped printing is the last resort.
_EXCEPTION_SCORE = 48
_LINE_WORDING_SCORE = 45
_NUMBERS_SCORE = 42
_OBSERVED_SCORE = 17  # the supervisor saw it: a stall, a process gone
_EXIT_SCORE = 14
_UNKNOWN_EXCEPTION_SCORE = 41
# A graph capture that starts with almost no memory left, then fails.
_STARVED_CAPTURE = re.compile(r"Capturing .*avail_mem=(?P<gb>\d+(?:\.\d+)?) ?GB")
_STARVED_GB = 0.5
_FULL_USAGE = 0.99
_MAMBA_CAP = "by the mamba state cache"  # "max_running_requests is capped to 12 by the ..."
# tqdm's bars, and SGLang's shard loader's, once they moved (at 0 of N they say no more than
# the step that drew them)
_PROGRESS_BAR = re.compile(r"\d%\|(?!.*\| 0/\d+ \[00:00<\?)|% Completed \|")
_C10D_CLIENT_RETRY = re.compile(r"\[W\d{3,4} [\d:.]+ [\w.]+:\d+\] \[c10d\] The client socket has")
_DIST_ERROR = re.compile(
    r"(?:torch\.distributed\.)?Dist(?:Network|Store)Error: "
    r"|RuntimeError: Gloo connectFullMesh failed"
)
_SEQUENCE = re.compile(r"SeqNum=(\d+)")
_FIRST_COLLECTIVES = 10  # setup's own collectives (barriers, the first all-reduces)
_COLLECTIVE_SPAN = 10  # lines after a collective's error where its failed allocation shows
_JSON_FLAG = re.compile(r"json[-_]model[-_]override[-_]args")
_FIRST_LINE_OF_JSON = ": line 1 column "
_STATEMENT_MIN = 24  # an exception message this long, said earlier too, was said first there


def verdicts(attempt: Reading) -> list[Verdict]:
    """Every layer's answer; the highest score decides, a close other one is the runner-up."""
    found = _by_signatures(attempt)
    exception = first_real_exception(attempt.ordered)
    if exception is not None:
        found += _by_exception(attempt, exception)
    layers = (
        _by_error_wording,
        _by_numbers,
        _by_outcome,
        by_error_lines,
        by_restart,
        by_outside_stop,
        by_silence,
    )
    for layer in layers:
        verdict = layer(attempt)
        if verdict is not None:
            found.append(verdict)
    found.append(by_progress(attempt))
    return found


def rooted_earliest(attempt: Reading, verdicts: Sequence[Verdict]) -> Verdict:
    """The best verdict; one decided by an exception is rooted at an earlier error line of
    the same class when there is one (a transport's or a compiler's own error line above the
    exception SGLang raised for it), one decided by the numbers at SGLang's line that says
    the same. Signatures keep their own root (their priorities already say which of several
    lines is the cause), unless the server served on after it: then it was one request's
    end, and the condition's first sign (a retraction before the abort) is the root."""
    decided = verdicts[0]
    if decided.layer == "numbers":
        # The numbers corroborate; SGLang's own statement of the same condition is the root.
        return _rooted_at(decided, verdicts, "signature", before=None)
    if decided.rule == "startup_probe_failed":
        # The kubelet saw a server that never came up; where it stopped is the root,
        # wherever the paste put the pod's events.
        progress = _last_progress(attempt, before=len(attempt.ordered))
        return decided if progress is None else replace(decided, root=progress)
    if decided.layer == "signature" and decided.root is not None:
        if attempt.serves_after(decided.root):
            return _rooted_at(decided, verdicts, "signature", before=decided.root)
        gave_up = _where_the_retries_gave_up(attempt.ordered, decided.root)
        if gave_up is not None:
            return replace(decided, root=gave_up)
        # The kernel's report of a GPU fault or an OOM kill is the root of what it caused:
        # logged before it, or in the same second (a kill comes before its notice).
        reports = _KERNEL_REPORTS.get(decided.failure_class, frozenset())
        ordered = attempt.ordered
        found = [
            v.root
            for v in verdicts
            if v.rule in reports
            and v.root is not None
            and (
                v.root < decided.root
                or stamped_no_later(ordered[v.root], ordered[decided.root], ordered)
            )
        ]
        return replace(decided, root=min(found)) if found else decided
    if decided.root is None:
        return decided
    if decided.rule == "timed_out" and not attempt.ordered[decided.root].has_sglang_prefix:
        # A client's or a waiter's timeout says the server went quiet, not where: the
        # server's last progress before it is the root, or anywhere in the server's log
        # pasted below the client's words.
        progress = _last_progress(attempt, before=decided.root)
        if progress is None:
            progress = _last_progress(attempt, before=len(attempt.ordered))
        return decided if progress is None else replace(decided, root=progress)
    if decided.layer != "exception":
        return decided
    return _rooted_at(decided, verdicts, "wording", before=decided.root)


def _last_progress(attempt: Reading, before: int) -> int | None:
    """The server's last step, batch or progress bar before ``before``."""
    ordered = attempt.ordered
    bars = (i for i in range(before - 1, -1, -1) if _PROGRESS_BAR.search(ordered[i].message))
    found = [p for p, _ in (*attempt.steps, *attempt.batches) if p < before]
    found.append(next(bars, -1))
    return max(found) if max(found) >= 0 else None


def _where_the_retries_gave_up(ordered: Sequence[LogLine], position: int) -> int | None:
    """c10d's warning that its client socket failed to connect is one retry of many; the
    DistNetworkError or DistStoreError after it (gloo's connectFullMesh failing), where the
    connect gave up, is the failure. Its server socket that failed to bind is no retry: that
    warning says it first."""
    if not _C10D_CLIENT_RETRY.search(ordered[position].message):
        return None
    return next(
        (i for i in range(position + 1, len(ordered)) if _DIST_ERROR.match(ordered[i].message)),
        None,
    )


def _rooted_at(
    decided: Verdict, verdicts: Sequence[Verdict], layer: str, before: int | None
) -> Verdict:
    """``decided`` rooted at the earliest line ``layer`` found of the same class (before
    ``before``, when given); unchanged when there is none."""
    roots = [
        v.root
        for v in verdicts
        if v.layer == layer
        and v.failure_class is decided.failure_class
        and v.root is not None
        and (before is None or v.root < before)
    ]
    return replace(decided, root=min(roots)) if roots else decided


def _by_signatures(attempt: Reading) -> list[Verdict]:
    first: dict[str, Hit] = {}
    for hit in attempt.hits:
        known = first.get(hit.signature.name)
        if known is None or hit.position < known.position:
            first[hit.signature.name] = hit
    verdicts = []
    for hit in sorted(first.values(), key=lambda h: (-h.signature.priority, h.position)):
        failure_class, resolved = _resolve(hit.signature, attempt, hit.position)
        priority = hit.signature.priority
        if priority >= CONFIDENT and resolved:
            confidence = Confidence.HIGH
        elif priority >= DECISIVE:
            confidence = Confidence.MEDIUM
        else:
            confidence = Confidence.LOW
        name = hit.signature.name
        verdicts.append(
            Verdict(failure_class, hit.position, "signature", name, confidence, priority)
        )
        if hit.signature.resolve is Resolve.COLLECTIVE:
            memory = _failed_allocation_below(attempt, hit)
            verdicts += [memory] if memory is not None else []
    return verdicts


def _resolve(signature: Signature, attempt: Reading, root: int) -> tuple[FailureClass, bool]:
    """The class, and whether the log showed what it needed to name it."""
    if signature.resolve is Resolve.OUT_OF_MEMORY:
        return where_oom(attempt, root)
    if signature.resolve is Resolve.COLLECTIVE_TIMEOUT:
        # Serving before it, or NCCL's own count of collectives done (SeqNum): a group that
        # worked and then stuck hangs; one whose first collectives never completed never formed.
        count = _SEQUENCE.search(attempt.ordered[root].message)
        counted = count is not None and int(count.group(1)) > _FIRST_COLLECTIVES
        worked = attempt.served_before(root) or counted
        return (FailureClass.HANG_TIMEOUT if worked else FailureClass.DISTRIBUTED_INIT), True
    if signature.resolve is Resolve.NATIVE_MESSAGE:
        family = family_of(attempt.ordered[root].message)
        failure_class = signature.failure_class
        return (_worded_class(family, attempt, root) if family else failure_class), True
    if signature.resolve is Resolve.JSON_SOURCE:
        # --json-model-override-args written as a Python dict, or empty: its value is one line
        one_line = _FIRST_LINE_OF_JSON in attempt.ordered[root].message
        # (the report's own lines read blank: their raw text; a wrapped record: its message)
        flag = any(_JSON_FLAG.search(line.message or line.raw) for line in attempt.ordered)
        return (
            FailureClass.INVALID_ARGUMENT if one_line and flag else signature.failure_class
        ), True
    if signature.resolve is Resolve.NATIVE_CRASH:
        backtrace = " ".join(line.message for line in attempt.ordered[root : root + 30]).lower()
        nccl = "nccl" in backtrace
        return (FailureClass.DISTRIBUTED_INIT if nccl else signature.failure_class), True
    return signature.failure_class, True


def _failed_allocation_below(attempt: Reading, hit: Hit) -> Verdict | None:
    """NCCL's "Failed to CUDA calloc" under a collective's error: while setting up, the
    network is the class (that is where it failed) and memory the runner-up (why it did);
    once serving, a group that worked failed for memory (a channel set up lazily at a peak)."""
    following = attempt.ordered[hit.position : hit.position + _COLLECTIVE_SPAN]
    for offset, line in enumerate(following):
        family = family_of(line.message)
        if family is not None and family.out_of_memory:
            position = hit.position + offset
            failure_class = _worded_class(family, attempt, position)
            score = hit.signature.priority + (1 if attempt.served_before(hit.position) else -1)
            return Verdict(failure_class, position, "wording", family.name, Confidence.LOW, score)
    return None


def _by_exception(attempt: Reading, position: int) -> list[Verdict]:
    ordered = attempt.ordered
    match = RAISED_LINE.match(ordered[position].message)
    assert match is not None  # first_real_exception found it by this pattern
    exception_type, message = match.group("type"), match.group("message") or ""
    root = _earliest_statement(ordered, position, message)
    verdicts = []
    # A command that timed out is quoted whole: its flags are no setting rejected.
    quotes_a_command = exception_type.endswith("TimeoutExpired")
    family = family_of(message) if message and not quotes_a_command else None
    if family is not None:
        failure_class = _worded_class(family, attempt, position)
        confidence = Confidence.MEDIUM if family.specific else Confidence.LOW
        score = _EXCEPTION_SCORE + (1 if family.specific else -1)
        verdicts.append(Verdict(failure_class, root, "exception", family.name, confidence, score))
    # The exception's own frames first, then those of the tracebacks chained after it (a
    # socket's timeout that the download going on through the hub's code re-raised).
    rule = by_origin(frames_before(ordered, position), exception_type) or by_origin(
        chained_frames(ordered, position), exception_type
    )
    if rule is not None:
        verdict = Verdict(
            rule.failure_class, root, "exception", rule.name, Confidence.MEDIUM, _EXCEPTION_SCORE
        )
        verdicts.append(verdict)
    elif position > 0 and "loaded_weight" in ordered[position - 1].message:
        verdict = Verdict(
            FailureClass.MODEL_LOAD_ERROR,
            root,
            "exception",
            "weight_shape_check",
            Confidence.MEDIUM,
            _EXCEPTION_SCORE,
        )
        verdicts.append(verdict)
    if not verdicts:
        name = exception_type.rsplit(".", 1)[-1]
        verdict = Verdict(
            FailureClass.OTHER, root, "exception", name, Confidence.LOW, _UNKNOWN_EXCEPTION_SCORE
        )
        verdicts.append(verdict)
    return verdicts


def _worded_class(family: Family, attempt: Reading, position: int) -> FailureClass:
    """A family's class; an out-of-memory wording's depends on where it happened."""
    return where_oom(attempt, position)[0] if family.out_of_memory else family.failure_class


def _earliest_statement(ordered: Sequence[LogLine], position: int, message: str) -> int:
    """SGLang often logs an error's message before it raises it: the root is where it was
    said first (by the server: a report's title quoting it is not)."""
    if len(message) < _STATEMENT_MIN:
        return position
    quoted = (f'"{message}"', f"'{message}'")  # the code that raises it, not a record
    for i in range(max(0, position - 200), position):
        text = ordered[i].message
        if (
            message in text
            and not is_frame_text(ordered, i)
            and not any(q in text for q in quoted)
            and not reporters_words(ordered[i])
            and not PY_WARNING.search(text)  # a warning at import that says it first
        ):
            return i
    return position


def _by_error_wording(attempt: Reading) -> Verdict | None:
    for i in attempt.failure_lines:
        message = attempt.ordered[i].message
        family = family_of(message, in_exception=is_exception(attempt.ordered[i]))
        if family is not None:
            if family.name == "peers_and_transport" and i > attempt.stopped_at:
                continue  # a stop tears the group down under its ranks (reading._after_a_stop)
            failure_class = _worded_class(family, attempt, i)
            return Verdict(
                failure_class, i, "wording", family.name, Confidence.LOW, _LINE_WORDING_SCORE
            )
    return None


def _by_numbers(attempt: Reading) -> Verdict | None:
    for position, event in attempt.batches:
        usage, queued = event.get("token_usage"), event.get("queued_requests")
        if usage is not None and float(usage) >= _FULL_USAGE and queued:
            return Verdict(
                FailureClass.KV_POOL_EXHAUSTED,
                position,
                "numbers",
                "pool_full_with_requests_waiting",
                Confidence.LOW,
                _NUMBERS_SCORE,
            )
        # A hybrid model's state slots all taken while requests wait: the mamba cache bounds
        # the batch. SGLang said so first when its startup capped the running requests, or
        # when it retracted requests for want of room.
        state = event.get("mamba_usage")
        if state is not None and float(state) >= _FULL_USAGE and queued:
            said = (i for i in range(position) if _MAMBA_CAP in attempt.ordered[i].message)
            retracted = (p for p, step in attempt.steps if step.kind is EventKind.RETRACTION)
            return Verdict(
                FailureClass.MAMBA_CACHE_EXHAUSTED,
                next(said, next(retracted, position)),
                "numbers",
                "mamba_full_with_requests_waiting",
                Confidence.LOW,
                _NUMBERS_SCORE,
            )
    ordered = attempt.ordered
    for i, line in enumerate(ordered):
        if "avail_mem=" not in line.message:  # a literal test first: this reads every line
            continue
        match = _STARVED_CAPTURE.search(line.message)
        if (
            match
            and float(match.group("gb")) < _STARVED_GB
            and _fails_after(attempt, i)
            and not reporters_words(line)
        ):
            return Verdict(
                FailureClass.CUDA_GRAPH_OOM,
                i,
                "numbers",
                "graph_capture_without_memory",
                Confidence.LOW,
                _NUMBERS_SCORE,
            )
    return None


def _fails_after(attempt: Reading, position: int, span: int = 60) -> bool:
    if attempt.ordered[position].message.endswith(TRACEBACK_START):
        return True
    return any(position < i <= position + span for i in attempt.failure_lines)


def _by_outcome(attempt: Reading) -> Verdict | None:
    outcome = attempt.outcome
    if outcome.lost_process:
        return Verdict(
            FailureClass.KILLED_BY_SIGNAL,
            None,
            "outcome",
            "process_lost",
            Confidence.MEDIUM,
            _OBSERVED_SCORE,
        )
    if outcome.stalled:
        last = last_meaningful(attempt.ordered)
        return Verdict(
            FailureClass.HANG_TIMEOUT,
            last,
            "outcome",
            "stalled",
            Confidence.MEDIUM,
            _OBSERVED_SCORE,
        )
    # Killed from outside, or an exit status alone: no line of the log explains it.
    if outcome.exit_code is not None and outcome.exit_code < 0:
        return Verdict(
            FailureClass.KILLED_BY_SIGNAL, None, "outcome", "signal", Confidence.LOW, _EXIT_SCORE
        )
    if outcome.exit_code not in (None, 0):
        return Verdict(
            FailureClass.OTHER, None, "outcome", "exit_status", Confidence.LOW, _EXIT_SCORE
        )
    return None
