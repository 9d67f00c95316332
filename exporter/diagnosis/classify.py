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

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from exporter.diagnosis import explain
from exporter.diagnosis.frames import frame_at, frames_before, is_frame_text, source_line
from exporter.diagnosis.order import in_time_order
from exporter.diagnosis.origins import by_origin
from exporter.diagnosis.signatures import (
    CONSEQUENCE_EXCEPTIONS,
    OOM_FRAME_RULES,
    SIGNATURES,
    Resolve,
    Signature,
)
from exporter.diagnosis.taxonomy import REMEDIES, FailureClass, Phase
from exporter.diagnosis.vocabulary import TEARDOWN, Family, family_of, reports_error, says_failed
from exporter.logs.events import Event, EventKind
from exporter.logs.lines import LogLine
from exporter.logs.tracebacks import EXCEPTION_LINE, TRACEBACK_START

MAX_EVIDENCE = 8
# Below this priority a signature names a condition or a consequence; a Python exception of
# its own (judged by its frames and wording) says more about the cause.
DECISIVE = 50
_CONFIDENT = 80  # a signature of a named family or better (signatures.py's tiers)
# The other layers on the signatures' priority scale: an exception outranks a condition, a
# worded error line or telling numbers outrank an exception nothing knows (41), and how the
# process ended outranks "other".
_EXCEPTION_SCORE = 48
_LINE_WORDING_SCORE = 45
_NUMBERS_SCORE = 42
_OBSERVED_SCORE = 17  # the supervisor saw it: a stall, a process gone
_ERROR_LINE_SCORE = 16
_EXIT_SCORE = 14
# A runner-up is reported when another answer scored at most this much lower.
RUNNER_UP_MARGIN = 15
_ASSERT_SOURCE = re.compile(r"^assert\s")
_CARETS = re.compile(r"^[\s^~]+$")
_PY_WARNING = re.compile(r"\.py:\d+: \w*Warning: ")
_IGNORED_ERRORS = ("Ignore import error when loading",)
_VERSION = re.compile(
    r"(?:sglang[=\- _]=?v?|sglang version:? v?)(\d+\.\d+\.\d+(?:\.post\d+)?)", re.I
)
# Lines that start a new thought: a wrapped line never continues into one of these.
_NOT_A_CONTINUATION = re.compile(r"^(?:File \"|Traceback|\[|During handling|The above)")
# A graph capture that starts with almost no memory left, then fails.
_STARVED_CAPTURE = re.compile(r"Capturing .*avail_mem=(?P<gb>\d+(?:\.\d+)?) ?GB")
_STARVED_GB = 0.5
_FULL_USAGE = 0.99
_COLLECTIVE_SPAN = 10  # lines after a collective's error where its failed allocation shows
_STATEMENT_MIN = 24  # an exception message this long, said earlier too, was said first there
_LIFECYCLE = {
    EventKind.DIST_INIT_BEGIN,
    EventKind.WEIGHT_LOAD_BEGIN,
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
    EventKind.RETRACTION,
    EventKind.SIGTERM_RECEIVED,
}
_NO_SIGNATURE_HERE = {EventKind.DECODE_BATCH, EventKind.PREFILL_BATCH, EventKind.SERVER_ARGS}
_SERVING = {EventKind.SERVER_READY, EventKind.DECODE_BATCH, EventKind.PREFILL_BATCH}
# Where an OOM happened, from the last lifecycle step before it.
_OOM_BY_STEP = {
    EventKind.DIST_INIT_BEGIN: FailureClass.WEIGHTS_OOM,
    EventKind.WEIGHT_LOAD_BEGIN: FailureClass.WEIGHTS_OOM,
    EventKind.WEIGHT_LOAD_END: FailureClass.POOL_INIT_OOM,
    EventKind.MAMBA_CACHE_ALLOCATED: FailureClass.POOL_INIT_OOM,
    EventKind.KV_CACHE_ALLOCATED: FailureClass.POOL_INIT_OOM,
    EventKind.MEMORY_POOL_END: FailureClass.CUDA_GRAPH_OOM,
    EventKind.CUDA_GRAPH_BEGIN: FailureClass.CUDA_GRAPH_OOM,
}
_RUNTIME_FRAMES = (
    "event_loop",
    "run_batch",
    "forward_batch_generation",
    "process_batch_result",
    "forward_thread_func",
    "handle_generate_request",
    "recv_requests",
    "exposed_step",
    "forward_step",
    "get_next_batch_to_run",
    "forward_extend",
    "forward_decode",
    "forward_idle",
    "forward_prefill_batch",
    "resolve_batch_result",
    "retract_decode",
    "update_running_batch",
)
_RUNTIME_CLASSES = {FailureClass.RUNTIME_OOM, FailureClass.KV_POOL_EXHAUSTED}


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
        return REMEDIES[self.failure_class].advice

    def to_json(self) -> dict[str, object]:
        remedy = REMEDIES[self.failure_class]
        return {
            "failure_class": self.failure_class.value,
            "root_cause_line": self.root_cause_line,
            "root_cause_line_number": self.root_cause_number,
            "phase": self.phase.value if self.phase else None,
            "sglang_version": self.sglang_version,
            "evidence": self.evidence,
            "diagnosis": self.diagnosis,
            "remedy": remedy.advice,
            "mem_fraction_static": remedy.mem_fraction_static.value,
            "retry_unchanged": remedy.retry_unchanged,
            "signature": self.signature,
            "layer": self.layer,
            "confidence": self.confidence.value,
            "runner_up": self.runner_up.value if self.runner_up else None,
        }


@dataclass(frozen=True)
class _Hit:
    signature: Signature
    position: int  # index into the time-ordered lines


@dataclass(frozen=True)
class _Attempt:
    """The time-ordered log and what was found in it, as every layer reads it."""

    ordered: list[LogLine]
    hits: list[_Hit]
    steps: list[tuple[int, Event]]  # lifecycle events by position
    batches: list[tuple[int, Event]]  # decode batch lines by position
    outcome: Outcome


def classify(
    lines: Sequence[LogLine],
    events: Sequence[Event],
    outcome: Outcome | None = None,
    version: str | None = None,
) -> Classification:
    """Classify one attempt. ``version`` is what the caller knows; the log may say more."""
    attempt = _read(lines, events, outcome or Outcome())
    version = detect_version(lines, events) or version
    verdicts = sorted(_verdicts(attempt), key=lambda v: -v.score)
    decided = verdicts[0]
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
        diagnosis = explain.without_log(decided.failure_class, attempt.outcome)
        return Classification(
            decided.failure_class, None, None, version, diagnosis=diagnosis, **known
        )
    ordered = attempt.ordered
    root = _assert_source(ordered, decided.root)
    hinted = _signature_phase(decided)
    phase = _phase(decided.failure_class, ordered, root, attempt.steps, hinted)
    root_line = ordered[root]
    diagnosis = explain.diagnose(decided.failure_class, root_line, events, attempt.outcome)
    if decided.caveat:
        diagnosis = f"{diagnosis.rstrip('.')}; {decided.caveat}."
    return Classification(
        failure_class=decided.failure_class,
        root_cause_line=root_line.raw.strip(),
        phase=phase,
        sglang_version=version,
        evidence=_evidence(ordered, attempt.hits, root, attempt.steps),
        diagnosis=diagnosis,
        root_cause_number=root_line.number,
        **known,
    )


def _read(lines: Sequence[LogLine], events: Sequence[Event], outcome: Outcome) -> _Attempt:
    ordered = in_time_order(lines)
    position_of = {line.number: i for i, line in enumerate(ordered)}
    skip = {e.line.number for e in events if e.kind in _NO_SIGNATURE_HERE}
    hits = _drop_expected(_find_hits(ordered, skip), ordered, events, position_of)
    placed = sorted(
        ((position_of[e.line.number], e) for e in events if e.line.number in position_of),
        key=lambda pair: pair[0],
    )
    steps = [(p, e) for p, e in placed if e.kind in _LIFECYCLE]
    batches = [(p, e) for p, e in placed if e.kind is EventKind.DECODE_BATCH]
    return _Attempt(ordered, hits, steps, batches, outcome)


def _verdicts(attempt: _Attempt) -> list[Verdict]:
    """Every layer's answer; the highest score decides, a close other one is the runner-up."""
    verdicts = _by_signatures(attempt)
    exception = _first_real_exception(attempt.ordered)
    if exception is not None:
        verdicts += _by_exception(attempt, exception)
    for layer in (_by_error_wording, _by_numbers, _by_outcome, _by_error_lines):
        verdict = layer(attempt)
        if verdict is not None:
            verdicts.append(verdict)
    verdicts.append(_by_progress(attempt))
    return verdicts


def _signature_phase(decided: Verdict) -> Phase | None:
    if decided.layer != "signature":
        return None
    return next((s.phase for s in SIGNATURES if s.name == decided.rule), None)


# --- layer 1: signatures


def _by_signatures(attempt: _Attempt) -> list[Verdict]:
    first: dict[str, _Hit] = {}
    for hit in attempt.hits:
        known = first.get(hit.signature.name)
        if known is None or hit.position < known.position:
            first[hit.signature.name] = hit
    verdicts = []
    for hit in sorted(first.values(), key=lambda h: (-h.signature.priority, h.position)):
        failure_class, resolved = _resolve(hit.signature, attempt, hit.position)
        priority = hit.signature.priority
        if priority >= _CONFIDENT and resolved:
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


def _resolve(signature: Signature, attempt: _Attempt, root: int) -> tuple[FailureClass, bool]:
    """The class, and whether the log showed what it needed to name it."""
    if signature.resolve is Resolve.OUT_OF_MEMORY:
        return _where_oom(attempt, root)
    if signature.resolve is Resolve.NATIVE_CRASH:
        backtrace = " ".join(line.message for line in attempt.ordered[root : root + 30]).lower()
        nccl = "nccl" in backtrace
        return (FailureClass.DISTRIBUTED_INIT if nccl else signature.failure_class), True
    return signature.failure_class, True


def _failed_allocation_below(attempt: _Attempt, hit: _Hit) -> Verdict | None:
    """NCCL's "Failed to CUDA calloc" under a collective's error: the network is the class
    (that is where it failed), memory the runner-up (why it did)."""
    following = attempt.ordered[hit.position : hit.position + _COLLECTIVE_SPAN]
    for offset, line in enumerate(following):
        family = family_of(line.message)
        if family is not None and family.out_of_memory:
            failure_class, _ = _where_oom(attempt, hit.position + offset)
            score = hit.signature.priority - 1
            position = hit.position + offset
            return Verdict(failure_class, position, "wording", family.name, Confidence.LOW, score)
    return None


def _where_oom(attempt: _Attempt, root: int) -> tuple[FailureClass, bool]:
    ordered = attempt.ordered
    nearby = _chain_text(ordered, root).lower()
    if "graph failed" in nearby and "capture" in nearby:
        return FailureClass.CUDA_GRAPH_OOM, True
    frames = " ".join(frame.text for frame in frames_before(ordered, root))
    for fragments, failure_class in OOM_FRAME_RULES:
        if any(fragment in frames for fragment in fragments):
            return failure_class, True
    if any(fragment in frames for fragment in _RUNTIME_FRAMES):
        return FailureClass.RUNTIME_OOM, True
    last_step = _last_step_before(attempt.steps, root)
    if last_step is not None and last_step.kind in _OOM_BY_STEP:
        return _OOM_BY_STEP[last_step.kind], True
    if last_step is not None and last_step.kind in _SERVING:
        return FailureClass.RUNTIME_OOM, True
    return FailureClass.RUNTIME_OOM, False  # nothing says where: the commonest case


def _chain_text(ordered: Sequence[LogLine], position: int, span: int = 60) -> str:
    """The text around a root line, for wrappers that quote it (``Capture cuda graph failed``)."""
    return "\n".join(line.message for line in ordered[max(0, position - span) : position + span])


def _last_step_before(steps: Sequence[tuple[int, Event]], position: int) -> Event | None:
    last = None
    for step_position, event in steps:
        if step_position > position:
            break
        last = event
    return last


# --- layer 2: the first real exception, by the code that raised it and its wording


def _by_exception(attempt: _Attempt, position: int) -> list[Verdict]:
    ordered = attempt.ordered
    match = EXCEPTION_LINE.match(ordered[position].message)
    assert match is not None  # _first_real_exception found it by this pattern
    exception_type, message = match.group("type"), match.group("message") or ""
    root = _earliest_statement(ordered, position, message)
    verdicts = []
    family = family_of(message) if message else None
    if family is not None:
        failure_class, _ = _worded_class(family, attempt, position)
        confidence = Confidence.MEDIUM if family.specific else Confidence.LOW
        score = _EXCEPTION_SCORE + (1 if family.specific else -1)
        verdicts.append(Verdict(failure_class, root, "exception", family.name, confidence, score))
    rule = by_origin(frames_before(ordered, position), exception_type)
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
        verdicts.append(Verdict(FailureClass.OTHER, root, "exception", name, Confidence.LOW, 41))
    return verdicts


def _worded_class(family: Family, attempt: _Attempt, position: int) -> tuple[FailureClass, bool]:
    if family.out_of_memory:
        return _where_oom(attempt, position)
    return family.failure_class, True


def _earliest_statement(ordered: Sequence[LogLine], position: int, message: str) -> int:
    """SGLang often logs an error's message before it raises it: the root is where it was
    said first."""
    if len(message) < _STATEMENT_MIN:
        return position
    quoted = (f'"{message}"', f"'{message}'")  # the code that raises it, not a record
    for i in range(max(0, position - 200), position):
        text = ordered[i].message
        if message in text and not is_frame_text(ordered, i) and not any(q in text for q in quoted):
            return i
    return position


def _first_real_exception(ordered: Sequence[LogLine]) -> int | None:
    for i, line in enumerate(ordered):
        match = EXCEPTION_LINE.match(line.message)
        if match and match.group("type").rsplit(".", 1)[-1] not in CONSEQUENCE_EXCEPTIONS:
            if frames_before(ordered, i) or (i > 0 and "Traceback" in ordered[i - 1].message):
                return i
            if match.group("message"):
                return i
    return None


# --- layer 3: error lines by their wording, and numbers that show a pool too small


def _error_lines(ordered: Sequence[LogLine], strict: bool):
    """Positions of the lines that report an error (by form alone when ``strict``), outside
    traceback frames and the code lines printed under them."""
    shaped = reports_error if strict else says_failed
    for i, line in enumerate(ordered):
        message = line.message
        if (
            not shaped(message)
            or is_frame_text(ordered, i)
            or (i > 0 and frame_at(ordered, i - 1) is not None and not _is_exception(line))
            or _PY_WARNING.search(message)
            or message.startswith(_IGNORED_ERRORS)
        ):
            continue
        yield i


def _by_error_wording(attempt: _Attempt) -> Verdict | None:
    for i in _error_lines(attempt.ordered, strict=False):
        message = attempt.ordered[i].message
        family = family_of(message, in_exception=_is_exception(attempt.ordered[i]))
        if family is not None:
            failure_class, _ = _worded_class(family, attempt, i)
            return Verdict(
                failure_class, i, "wording", family.name, Confidence.LOW, _LINE_WORDING_SCORE
            )
    return None


def _by_numbers(attempt: _Attempt) -> Verdict | None:
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
    ordered = attempt.ordered
    for i, line in enumerate(ordered):
        match = _STARVED_CAPTURE.search(line.message)
        if match and float(match.group("gb")) < _STARVED_GB and _fails_after(ordered, i):
            return Verdict(
                FailureClass.CUDA_GRAPH_OOM,
                i,
                "numbers",
                "graph_capture_without_memory",
                Confidence.LOW,
                _NUMBERS_SCORE,
            )
    return None


def _fails_after(ordered: Sequence[LogLine], position: int, span: int = 60) -> bool:
    if ordered[position].message.endswith(TRACEBACK_START):
        return True
    return any(says_failed(line.message) for line in ordered[position + 1 : position + span])


# --- layer 4: how the process ended, how far startup got, and the last resorts


def _by_outcome(attempt: _Attempt) -> Verdict | None:
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
        last = _last_meaningful(attempt.ordered)
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


def _by_error_lines(attempt: _Attempt) -> Verdict | None:
    """At worst ``other``: a traceback cut off before its exception, the first error line,
    or SGLang's teardown with the cause cut off above it."""
    cut = _cut_traceback(attempt)
    if cut is not None:
        return cut
    teardown = None
    stopped_at = next(
        (p for p, e in attempt.steps if e.kind is EventKind.SIGTERM_RECEIVED), len(attempt.ordered)
    )
    for i in _error_lines(attempt.ordered, strict=True):
        is_teardown = TEARDOWN.search(attempt.ordered[i].message) is not None
        if is_teardown and i > stopped_at:
            continue  # a clean stop tears down too
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


def _cut_traceback(attempt: _Attempt) -> Verdict | None:
    """A paste that ends inside a traceback: the frames say what the code was doing."""
    ordered = attempt.ordered
    frames = frames_before(ordered, len(ordered))
    if not frames or len(ordered) - frames[-1].position > 4:
        return None
    if any(_is_exception(line) for line in ordered[frames[-1].position :]):
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


def _by_progress(attempt: _Attempt) -> Verdict:
    """A log that stops mid-startup with no error: nothing more was ever printed."""
    reached = {event.kind for _, event in attempt.steps}
    last = _last_meaningful(attempt.ordered)
    if (
        attempt.outcome.exit_code is None
        and reached
        and not reached & _SERVING
        and last is not None
    ):
        return Verdict(
            FailureClass.HANG_TIMEOUT, last, "progress", "startup_stopped", Confidence.LOW, 5
        )
    return Verdict(FailureClass.NONE, None, "none", None, Confidence.HIGH, 0)


# --- reading the lines


def detect_version(lines: Sequence[LogLine], events: Sequence[Event]) -> str | None:
    """The SGLang version when the log reveals it: stated, or by 0.5.23-only lines."""
    for line in lines[:200]:
        match = _VERSION.search(line.message)
        if match:
            return match.group(1)
    kinds = {e.kind for e in events}
    new_only = {
        EventKind.MEMORY_BASELINE,
        EventKind.STARTUP_TIMINGS,
        EventKind.KILL_PROCESS_TREE,
        EventKind.MAMBA_REQUESTS_CAPPED,
        EventKind.KV_POOL_BELOW_CONTEXT,
    }
    if kinds & new_only or any(
        e.kind is EventKind.SERVER_ARGS and e.get("format") == "dict" for e in events
    ):
        return "0.5.23"
    return None


def _is_exception(line: LogLine) -> bool:
    return EXCEPTION_LINE.match(line.message) is not None


def _find_hits(ordered: Sequence[LogLine], skip: set[int]) -> list[_Hit]:
    hits: list[_Hit] = []
    previous: LogLine | None = None
    for i, line in enumerate(ordered):
        # The source line under a traceback frame quotes code ('raise RuntimeError("NCCL
        # error...")'), not an error that happened.
        is_source = (
            previous is not None
            and previous.message.startswith('File "')
            and not _is_exception(line)
            and not _asserts_bare(ordered, i)
        )
        if line.number in skip or is_source:
            previous = line if is_source else None
            continue
        text = line.message
        matched = False
        for signature in SIGNATURES:
            if signature.matches(text):
                hits.append(_Hit(signature, i))
                matched = True
        if not matched and previous is not None and not _NOT_A_CONTINUATION.match(text):
            hits.extend(_Hit(s, i - 1) for s in _wrapped(previous.message, text))
        previous = line
    return hits


def _asserts_bare(ordered: Sequence[LogLine], position: int) -> bool:
    """An ``assert ...`` source line whose AssertionError carries no message: the source
    line is the message."""
    if not _ASSERT_SOURCE.match(ordered[position].message):
        return False
    following = position + 1
    while following < len(ordered) and _CARETS.match(ordered[following].message):
        following += 1
    return following < len(ordered) and ordered[following].message == "AssertionError"


def _drop_expected(
    hits: list[_Hit], ordered: Sequence[LogLine], events: Sequence[Event], position_of: dict
) -> list[_Hit]:
    """Hits that are no failure: an error SGLang says it ignores (``Ignore import error when
    loading ...`` and the text it quotes on the next line), and weak signs such as a shell's
    ``Killed`` after a graceful SIGTERM (SGLang ends even a clean drain with SIGKILL)."""
    ignored = set()
    for i, line in enumerate(ordered):
        if line.message.startswith(_IGNORED_ERRORS):
            ignored.add(i)
            if i + 1 < len(ordered) and not ordered[i + 1].has_sglang_prefix:
                ignored.add(i + 1)
    sigterm = min(
        (position_of[e.line.number] for e in events if e.kind is EventKind.SIGTERM_RECEIVED),
        default=None,
    )
    return [
        h
        for h in hits
        if h.position not in ignored
        and not (sigterm is not None and h.position > sigterm and h.signature.priority < DECISIVE)
    ]


def _wrapped(first: str, second: str) -> list[Signature]:
    """Signatures that match only across a hard wrap between two lines (``EAD``/``DRINUSE``)."""
    found = []
    for joined in (first + second, first + " " + second):
        for signature in SIGNATURES:
            if (
                signature not in found
                and signature.matches(joined)
                and not (signature.matches(first) or signature.matches(second))
            ):
                found.append(signature)
    return found


def _last_meaningful(ordered: Sequence[LogLine]) -> int | None:
    """The last thing the server said before it went silent; Python's UserWarnings (and the
    ``warnings.warn(...)`` source line under each) are import-time noise, not progress."""
    for i in range(len(ordered) - 1, -1, -1):
        message = ordered[i].message
        if message and not _PY_WARNING.search(message) and not message.startswith("warnings.warn("):
            return i
    return None


def _assert_source(ordered: Sequence[LogLine], root: int) -> int:
    """A bare ``AssertionError`` says nothing; the ``assert ...`` source line above it does."""
    if ordered[root].message != "AssertionError":
        return root
    source = root - 1
    while source > 0 and _CARETS.match(ordered[source].message):  # Python 3.11's ^^^^ markers
        source -= 1
    return source if source >= 0 and _ASSERT_SOURCE.match(ordered[source].message) else root


def _phase(
    failure_class: FailureClass,
    ordered: Sequence[LogLine],
    root: int,
    steps: Sequence[tuple[int, Event]],
    hinted: Phase | None,
) -> Phase:
    before = {event.kind for position, event in steps if position <= root}
    if EventKind.SIGTERM_RECEIVED in before:
        return Phase.SHUTDOWN
    if before & (_SERVING | {EventKind.RETRACTION}):
        return Phase.RUNTIME
    if before:
        return Phase.STARTUP
    if hinted is not None:
        return hinted
    # The root line's own frames, else any frames the excerpt shows.
    frames = " ".join(frame.text for frame in frames_before(ordered, root)) or " ".join(
        line.message for line in ordered if line.message.startswith('File "')
    )
    if any(fragment in frames for fragment in _RUNTIME_FRAMES):
        return Phase.RUNTIME
    if failure_class in _RUNTIME_CLASSES:
        return Phase.RUNTIME
    return Phase.STARTUP


def _evidence(
    ordered: Sequence[LogLine],
    hits: Sequence[_Hit],
    root: int,
    steps: Sequence[tuple[int, Event]],
) -> list[str]:
    """The root line, the other decisive lines (one per signature), the last step reached."""
    positions = {root}
    seen = set()
    for hit in sorted(hits, key=lambda h: (-h.signature.priority, h.position)):
        if hit.signature.name not in seen and len(positions) < MAX_EVIDENCE - 1:
            seen.add(hit.signature.name)
            positions.add(hit.position)
    last_step = None
    for position, _event in steps:
        if position < root:
            last_step = position
    if last_step is not None:
        positions.add(last_step)
    return [ordered[p].raw.strip() for p in sorted(positions)]
