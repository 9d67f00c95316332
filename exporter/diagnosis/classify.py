"""One attempt's log (and, when known, how its process ended) -> one classification.

The steps, all pure:
1. put the lines in time order (cloud-log exports arrive newest first);
2. find every line that matches a signature (signatures.py), also across a hard-wrapped
   line break;
3. the highest priority decides the class, its earliest line is the root cause;
4. resolve the classes that need context (where an OOM happened, a native crash in NCCL);
5. with no signature at all, fall back to the first real exception and its frames, then to
   how the process ended and how far startup got.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from exporter.diagnosis import explain
from exporter.diagnosis.signatures import (
    CONSEQUENCE_EXCEPTIONS,
    FRAME_RULES,
    OOM_FRAME_RULES,
    SIGNATURES,
    Resolve,
    Signature,
)
from exporter.diagnosis.taxonomy import REMEDIES, FailureClass, Phase
from exporter.logs.events import Event, EventKind
from exporter.logs.lines import LogLine
from exporter.logs.tracebacks import EXCEPTION_LINE, TRACEBACK_START

MAX_EVIDENCE = 8
# Below this priority a signature names a condition or a consequence; a Python exception of
# its own (judged by its frames) says more about the cause.
DECISIVE = 50
_FRAME = re.compile(r'^File "(?P<path>[^"]+)", line \d+,? in (?P<func>\S+)')
_ASSERT_SOURCE = re.compile(r"^assert\s")
_CARETS = re.compile(r"^[\s^~]+$")
_PY_WARNING = re.compile(r"\.py:\d+: \w*Warning: ")
_IGNORED_ERRORS = ("Ignore import error when loading",)
_VERSION = re.compile(
    r"(?:sglang[=\- _]=?v?|sglang version:? v?)(\d+\.\d+\.\d+(?:\.post\d+)?)", re.I
)
# Lines that start a new thought: a wrapped line never continues into one of these.
_NOT_A_CONTINUATION = re.compile(r"^(?:File \"|Traceback|\[|During handling|The above)")
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
)
_RUNTIME_CLASSES = {FailureClass.RUNTIME_OOM, FailureClass.KV_POOL_EXHAUSTED}


@dataclass(frozen=True)
class Outcome:
    """How the attempt's launcher ended, when the caller knows it."""

    exit_code: int | None = None  # returncode: negative means killed by that signal
    stalled: bool = False  # the supervisor gave up waiting (startup timeout, hang)
    # A process of the attempt (e.g. "sglang::scheduler") vanished while the launcher lived:
    # 0.5.9's launcher does not notice a dead scheduler and the log stays silent.
    lost_process: str | None = None
    stall_evidence: str | None = None  # what the supervisor saw when it called a hang


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
        }


@dataclass(frozen=True)
class _Hit:
    signature: Signature
    position: int  # index into the time-ordered lines


def classify(
    lines: Sequence[LogLine],
    events: Sequence[Event],
    outcome: Outcome | None = None,
    version: str | None = None,
) -> Classification:
    """Classify one attempt. ``version`` is what the caller knows; the log may say more."""
    outcome = outcome or Outcome()
    ordered = list(reversed(lines)) if _is_reversed(lines) else list(lines)
    position_of = {line.number: i for i, line in enumerate(ordered)}
    skip = {e.line.number for e in events if e.kind in _NO_SIGNATURE_HERE}
    hits = _find_hits(ordered, skip)
    hits = _drop_expected(hits, ordered, events, position_of)
    steps = sorted(
        ((position_of[e.line.number], e) for e in events if e.kind in _LIFECYCLE),
        key=lambda pair: pair[0],
    )
    version = detect_version(lines, events) or version

    best = max(hits, key=lambda h: (h.signature.priority, -h.position)) if hits else None
    if best is not None and (
        best.signature.priority >= DECISIVE or _first_real_exception(ordered) is None
    ):
        root = min(h.position for h in hits if h.signature is best.signature)
        failure_class = _resolve(best.signature, ordered, root, steps)
        name: str | None = best.signature.name
    else:
        failure_class, root, name = _without_signature(ordered, steps, outcome)

    if root is None:  # no failure in the log, or an empty log and the outcome says why
        diagnosis = explain.without_log(failure_class, outcome)
        return Classification(failure_class, None, None, version, diagnosis=diagnosis)
    root = _assert_source(ordered, root)
    hinted = best.signature.phase if best is not None and name == best.signature.name else None
    phase = _phase(failure_class, ordered, root, steps, hinted)
    evidence = _evidence(ordered, hits, root, steps)
    root_line = ordered[root]
    return Classification(
        failure_class=failure_class,
        root_cause_line=root_line.raw.strip(),
        phase=phase,
        sglang_version=version,
        evidence=evidence,
        diagnosis=explain.diagnose(failure_class, root_line, events, outcome),
        root_cause_number=root_line.number,
        signature=name,
    )


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


def _is_reversed(lines: Sequence[LogLine]) -> bool:
    """Newest-first exports: timestamps run backwards, or tracebacks read bottom-up."""
    score = 0
    previous = None
    for line in lines:
        stamp = line.foreign_timestamp or line.timestamp
        if stamp is not None:
            if previous is not None and stamp != previous:
                score += 1 if stamp < previous else -1
            previous = stamp
    for i, line in enumerate(lines):
        message = line.message
        if message.endswith(TRACEBACK_START):
            after = lines[i + 1].message if i + 1 < len(lines) else ""
            before = lines[i - 1].message if i > 0 else ""
            score += (before.startswith('File "') and not after.startswith('File "')) * 2
            score -= after.startswith('File "') * 2
    return score > 0


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


def _frames_before(ordered: Sequence[LogLine], position: int) -> list[str]:
    """The frames of the traceback that ends at ``position``, innermost last."""
    frames: list[str] = []
    for line in reversed(ordered[max(0, position - 400) : position]):
        message = line.message
        if message.endswith(TRACEBACK_START) or message.startswith(
            ("During handling", "The above")
        ):
            break
        match = _FRAME.match(message)
        if match:
            frames.append(f"{match.group('path')}:{match.group('func')}")
    frames.reverse()
    return frames


def _chain_text(ordered: Sequence[LogLine], position: int, span: int = 60) -> str:
    """The text around a root line, for wrappers that quote it (``Capture cuda graph failed``)."""
    return "\n".join(line.message for line in ordered[max(0, position - span) : position + span])


def _resolve(
    signature: Signature,
    ordered: Sequence[LogLine],
    root: int,
    steps: Sequence[tuple[int, Event]],
) -> FailureClass:
    if signature.resolve is Resolve.OUT_OF_MEMORY:
        return _where_oom(ordered, root, steps)
    if signature.resolve is Resolve.NATIVE_CRASH:
        backtrace = " ".join(line.message for line in ordered[root : root + 30]).lower()
        return FailureClass.DISTRIBUTED_INIT if "nccl" in backtrace else signature.failure_class
    return signature.failure_class


def _where_oom(ordered, root, steps) -> FailureClass:
    nearby = _chain_text(ordered, root).lower()
    if "graph failed" in nearby and "capture" in nearby:
        return FailureClass.CUDA_GRAPH_OOM
    frames = " ".join(_frames_before(ordered, root))
    for fragments, failure_class in OOM_FRAME_RULES:
        if any(fragment in frames for fragment in fragments):
            return failure_class
    if any(fragment in frames for fragment in _RUNTIME_FRAMES):
        return FailureClass.RUNTIME_OOM
    last_step = _last_step_before(steps, root)
    if last_step is not None and last_step.kind in _OOM_BY_STEP:
        return _OOM_BY_STEP[last_step.kind]
    return FailureClass.RUNTIME_OOM


def _last_step_before(steps: Sequence[tuple[int, Event]], position: int) -> Event | None:
    last = None
    for step_position, event in steps:
        if step_position > position:
            break
        last = event
    return last


def _without_signature(
    ordered: Sequence[LogLine], steps: Sequence[tuple[int, Event]], outcome: Outcome
) -> tuple[FailureClass, int | None, str | None]:
    exception = _first_real_exception(ordered)
    if exception is not None:
        frames = " ".join(_frames_before(ordered, exception))
        source = ordered[exception - 1].message if exception > 0 else ""
        for fragments, failure_class in FRAME_RULES:
            if any(fragment in frames for fragment in fragments):
                return failure_class, exception, "exception_frames"
        if "loaded_weight" in source:
            return FailureClass.MODEL_LOAD_ERROR, exception, "exception_frames"
        return FailureClass.OTHER, exception, "exception"
    last_line = _last_meaningful(ordered)
    if outcome.lost_process:
        return FailureClass.KILLED_BY_SIGNAL, None, "process_lost"
    if outcome.stalled:
        return FailureClass.HANG_TIMEOUT, last_line, "stalled"
    if outcome.exit_code is not None and outcome.exit_code < 0:
        return FailureClass.KILLED_BY_SIGNAL, last_line, "signal"
    if outcome.exit_code not in (None, 0):
        return FailureClass.OTHER, last_line, "exit_status"
    reached = {event.kind for _, event in steps}
    serving = reached & {EventKind.SERVER_READY, EventKind.DECODE_BATCH, EventKind.PREFILL_BATCH}
    if outcome.exit_code is None and steps and not serving and last_line is not None:
        # A log that stops mid-startup with no error: nothing more was ever printed.
        return FailureClass.HANG_TIMEOUT, last_line, "startup_stopped"
    return FailureClass.NONE, None, None


def _first_real_exception(ordered: Sequence[LogLine]) -> int | None:
    for i, line in enumerate(ordered):
        match = EXCEPTION_LINE.match(line.message)
        if match and match.group("type").rsplit(".", 1)[-1] not in CONSEQUENCE_EXCEPTIONS:
            if _frames_before(ordered, i) or (i > 0 and "Traceback" in ordered[i - 1].message):
                return i
            if match.group("message"):
                return i
    return None


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
    serving = {EventKind.SERVER_READY, EventKind.DECODE_BATCH, EventKind.PREFILL_BATCH}
    if before & (serving | {EventKind.RETRACTION}):
        return Phase.RUNTIME
    if before:
        return Phase.STARTUP
    if hinted is not None:
        return hinted
    # The root line's own frames, else any frames the excerpt shows.
    frames = " ".join(_frames_before(ordered, root)) or " ".join(
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
