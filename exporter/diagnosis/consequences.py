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
# uvicorn's access record of a request answered 4xx: refused for its own fault.
_ANSWERED_4XX = re.compile(r'"[A-Z]+ /\S* HTTP/[\d.]+" 4\d\d\b')
_ANSWER_SPAN = 3  # lines from the server's error record to its answer
# A request its client aborted, whatever was under way for it (a KV transfer, in PD).
_ABORTED = "Aborted by AbortReq"
# A request's id where a line names it ("req.rid='8c1f...'", "rid=8c1f..."), and another
# line's word that the request was aborted (the PD router's, for a client gone).
_REQUEST_ID = re.compile(r"\brid[=:] ?'?([0-9a-f]{8,})")
_ABORTING = re.compile(r"(?i)\babort(?:ed|ing)?\b")
# A client that gave up waiting: a hang only if the server stopped serving too.
_CLIENT_TIMED_OUT = re.compile(
    r"(?:httpx|httpcore|openai|requests|urllib3|aiohttp)[\w.]*\.\w*Timeout\w*(?::|$)"
)
# SGLang's OpenAI layer catching a request's error (logger.exception, then a 500 for it).
_CAUGHT = "Error in request:"
# uvicorn catching what a handler raised: no failure of the server when all it shows is the
# client gone mid-response (a stream cancelled, a send on a closed connection).
_ASGI = "Exception in ASGI application"
_ASGI_SPAN = 60  # lines of the traceback under it, nested exception groups and all
_RAISED = re.compile(r"^(?:\|\s*)?((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Group)):")
_CLIENT_GONE = re.compile(
    r"(?:CancelledError|ClosedResourceError|BrokenResourceError|EndOfStream|ClientDisconnect"
    r"|LocalProtocolError|BrokenPipeError|ConnectionResetError|[Ee]xceptionGroup)$"
)
_HANDLER_SPAN = 30  # lines of the caught error's traceback under its record
_GROUP_CLASSES = (FailureClass.HANG_TIMEOUT, FailureClass.DISTRIBUTED_INIT)
_SAYS_ANOTHER_FAILED = frozenset({"peer_lost"})
# A member of the group killed from outside: what its peers then fail for, however weakly
# the kill ranks alone (a kernel's OOM kill, a job cancelled, a pod evicted).
_MEMBER_KILLED = frozenset(
    {"host_oom_killer", "batch_oom_kill", "job_cancelled", "process_killed_by", "host_shutdown"}
)
_EVICTION = re.compile(r"\bEvicted\b|\b[Pp]reempt")  # not a time limit: a hang's own end
# "Model architectures ['Llama4ForConditionalGeneration'] are not supported for now."
_ARCHITECTURES = re.compile(r"[Aa]rchitectures? (\[[^\]]*\]|\S+)")
_ARCHITECTURE_NAME = re.compile(r"\b[A-Z][A-Za-z0-9_]+")
# ... or a model class named anywhere ("Mamba2ForCausalLM has no SGlang implementation")
_MODEL_CLASS = re.compile(r"\b[A-Z][A-Za-z0-9_]*For[A-Z][A-Za-z0-9_]*")
_MODEL_MODULE = re.compile(r"sglang\.srt\.models\.(\w+)")
_MODEL_CLASS_SUFFIX = re.compile(r"(?:For[A-Z]\w*|Model)$")
_NAMING = ("signature", "exception", "wording")  # the layers that read what a line says
_NAMED = frozenset(FailureClass) - {FailureClass.NONE, FailureClass.OTHER}
# What a server that serves on can still be short of.
_SERVER_CONDITIONS = frozenset({FailureClass.KV_POOL_EXHAUSTED, FailureClass.MAMBA_CACHE_EXHAUSTED})
# A device gone from torch's view: after the driver reported it lost, or torch's CUDA could
# not start on it, that fault's consequence.
_DEVICE_GONE = re.compile(
    r"No CUDA GPUs are available|no CUDA-capable device|No accelerator .*is available"
)
_DEVICE_OOM = (
    FailureClass.POOL_INIT_OOM,
    FailureClass.WEIGHTS_OOM,
    FailureClass.CUDA_GRAPH_OOM,
    FailureClass.RUNTIME_OOM,
)


def after_causes(attempt: Reading, verdicts: Sequence[Verdict]) -> list[Verdict]:
    """The verdicts best first, each consequence below its cause."""
    ranked = [_ranked_below_its_cause(attempt, v, verdicts) for v in verdicts]
    return _survived(attempt, _swallowed_import(attempt, sorted(ranked, key=lambda v: -v.score)))


def _survived(attempt: Reading, verdicts: list[Verdict]) -> list[Verdict]:
    """One request's failure, with nothing naming a failure of the server and the server
    serving after it, is no failure: a request refused for its own fault (a 4xx: too long,
    over a rate limit), one whose error the server's handler caught and answered, one its
    client aborted, or a client that stopped waiting for a long generation. A condition the
    server's own lines name (its KV pool full, retracting) is then what the log shows."""
    best = verdicts[0]
    if (
        best.confidence is Confidence.HIGH
        or best.root is None
        or not _one_request(attempt.ordered, best.root)
        or not (attempt.serves_after(best.root) or _answered_before_a_stop(attempt, best.root))
        # ... unless the server then went silent and was found not answering: the client
        # pasted above the log stopped waiting on a hung server
        or any(v.rule == "went_silent" for v in verdicts)
    ):
        return verdicts
    named = (
        v for v in verdicts if v.layer == "signature" and v.failure_class in _SERVER_CONDITIONS
    )
    healthy = next(v for v in verdicts if v.failure_class is FailureClass.NONE)
    return [next(named, healthy), *verdicts]


def _answered_before_a_stop(attempt: Reading, root: int) -> bool:
    """A client's error reply pasted below a log that the operator then stopped: it was
    answered while the server served, which it did until the stop."""
    stop = min(attempt.stopped_at, attempt.interrupted)
    return (
        root > stop
        and _REFUSED.search(attempt.ordered[root].message) is not None
        and attempt.served_before(stop)
    )


def _one_request(ordered: Sequence[LogLine], root: int) -> bool:
    message = ordered[root].message
    if _REFUSED.search(message) or _CLIENT_TIMED_OUT.match(message) or _ABORTED in message:
        return True
    rid = _REQUEST_ID.search(message)
    if rid is not None and any(_aborts(line.message, rid.group(1)) for line in ordered):
        return True  # a request its client gave up on: aborted, by the router's word
    answers = ordered[root + 1 : root + 1 + _ANSWER_SPAN]
    if any(_ANSWERED_4XX.search(line.message) for line in answers):
        return True  # the server logged why it refused the request, then answered it 4xx
    for at in range(max(0, root - _HANDLER_SPAN), root + 1):
        message = ordered[at].message
        if message.startswith(_CAUGHT) or (message.endswith(_ASGI) and _client_gone(ordered, at)):
            return True
    return False


def _aborts(message: str, rid: str) -> bool:
    return rid in message and _ABORTING.search(message) is not None


def _client_gone(ordered: Sequence[LogLine], at: int) -> bool:
    raised = []
    for line in ordered[at + 1 : at + 1 + _ASGI_SPAN]:
        if line.has_sglang_prefix:
            break
        match = _RAISED.match(line.message)
        if match:
            raised.append(match.group(1))
    return bool(raised) and all(_CLIENT_GONE.search(name) for name in raised)


def _ranked_below_its_cause(
    attempt: Reading, verdict: Verdict, verdicts: Sequence[Verdict]
) -> Verdict:
    """A consequence ranks just below its cause: a collective that timed out or failed after
    a rank's own named crash (an OOM, a CUDA error) is the other ranks waiting for the one
    that died; a memory fault after an allocation failed is a kernel running on without the
    memory it asked for; no GPU to be found after the driver lost one (an Xid 79) is that
    loss."""
    if verdict.root is None:
        return verdict
    group = verdict.failure_class in _GROUP_CLASSES
    if group:
        causes = [v for v in verdicts if v.failure_class not in _GROUP_CLASSES]
    elif verdict.failure_class is FailureClass.CUDA_ERROR:
        causes = [v for v in verdicts if v.failure_class in _DEVICE_OOM]
    elif _DEVICE_GONE.search(attempt.ordered[verdict.root].message):
        causes = [v for v in verdicts if v.failure_class is FailureClass.CUDA_ERROR]
    else:
        return verdict
    # A rank that says another failed ("other ranks that didn't finish loading") follows
    # whatever named a failure before it; other consequences only a confident cause.
    if verdict.rule in _SAYS_ANOTHER_FAILED:
        causes = [v for v in causes if v.layer in _NAMING and v.failure_class in _NAMED]
        least = 0
    else:
        least = CONFIDENT
    earlier = [
        cause.score
        for cause in causes
        if cause.root is not None
        and (cause.root < verdict.root or (group and _evicted(attempt, cause)))
        and (
            cause.score >= least
            or (group and cause.rule in _MEMBER_KILLED)
            or (_worded_timeout(verdict) and _server_condition(cause))
        )
    ]
    return replace(verdict, score=max(earlier) - 1) if earlier else verdict


def _evicted(attempt: Reading, cause: Verdict) -> bool:
    """A member evicted or preempted (the kubelet's event, the scheduler's): a kill from
    outside for reasons of its own, whatever its peers logged before the paste shows it
    (``kubectl describe`` comes after the logs, its events stamped only with their age)."""
    return (
        cause.rule == "job_cancelled"
        and _EVICTION.search(attempt.ordered[cause.root].message) is not None
    )


def _worded_timeout(verdict: Verdict) -> bool:
    """A line saying only that something timed out (a client's, a gateway's), no watchdog."""
    return verdict.failure_class is FailureClass.HANG_TIMEOUT and verdict.layer == "wording"


def _server_condition(verdict: Verdict) -> bool:
    """The server's own line saying it is short of a pool (its KV cache full, retracting):
    what makes requests wait until their clients give up."""
    return verdict.layer == "signature" and verdict.failure_class in _SERVER_CONDITIONS


def _swallowed_import(attempt: Reading, verdicts: list[Verdict]) -> list[Verdict]:
    """SGLang imports its models and multimodal processors lazily and logs a failed import as
    ``Ignore import error when loading ...``; an architecture "not supported" or with "no
    processor registered" after such lines is that import's consequence: a package."""
    if verdicts[0].failure_class is not FailureClass.UNSUPPORTED_MODEL:
        return verdicts
    said = attempt.ordered[verdicts[0].root].message if verdicts[0].root is not None else ""
    architectures = _ARCHITECTURES.search(said)
    if architectures:
        named = _ARCHITECTURE_NAME.findall(architectures.group(1))
    else:
        named = _MODEL_CLASS.findall(said)
    ignored = next(
        (
            i
            for i, line in enumerate(attempt.ordered)
            if line.message.startswith(IGNORED_ERRORS) and _may_hold(line.message, named)
        ),
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


def _may_hold(ignored: str, architectures: Sequence[str]) -> bool:
    """Whether the module whose import failed may be the one that holds the architecture the
    error names (``sglang.srt.models.llama4`` for ``Llama4ForConditionalGeneration``): every
    release fails to import some models it does not need, and says so."""
    module = _MODEL_MODULE.search(ignored)
    if module is None or not architectures:
        return True  # a multimodal processor's, or no architecture named: as likely as any
    name = _squeezed(module.group(1))
    return any(
        (family := _squeezed(_MODEL_CLASS_SUFFIX.sub("", a))) in name or name in family
        for a in architectures
    )


def _squeezed(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())
