"""Where in an attempt a failure happened: which OOM an out-of-memory error is, the phase,
and the lines that are its evidence."""

from __future__ import annotations

import re
from collections.abc import Sequence

from exporter.diagnosis.frames import frames_before, source_line
from exporter.diagnosis.reading import SERVING, Hit, Reading
from exporter.diagnosis.signatures import OOM_FRAME_RULES
from exporter.diagnosis.taxonomy import FailureClass, Phase
from exporter.logs.events import Event, EventKind
from exporter.logs.lines import LogLine

MAX_EVIDENCE = 8
# Where an OOM happened, from the last lifecycle step before it.
_OOM_BY_STEP = {
    EventKind.DIST_INIT_BEGIN: FailureClass.WEIGHTS_OOM,
    EventKind.WEIGHT_LOAD_BEGIN: FailureClass.WEIGHTS_OOM,
    # Loading ends at "Load weight end": after the last shard the quantization and MoE
    # backends still repack the weights.
    EventKind.WEIGHT_SHARDS: FailureClass.WEIGHTS_OOM,
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
# A serving engine given new weights or its memory back (an RL trainer's weight sync,
# torch_memory_saver's resume): through the model's load_weights, but at runtime.
_SERVING_ENGINE_FRAMES = ("update_weights_from", "resume_memory_occupation")
_RUNTIME_CLASSES = {FailureClass.RUNTIME_OOM, FailureClass.KV_POOL_EXHAUSTED}
# A forward pass through SGLang's model code, cut above the scheduler's frames: loading
# weights and sizing the pools run no forward, so it was a batch (or a warmup's). Computing
# the logits and sampling from them happen only in one.
_MODEL_FORWARD = re.compile(
    r"/sglang/srt/(?:models|layers)/\S+:forward\w*(?:\s|$)"
    r"|/sglang/srt/layers/(?:logits_processor|sampler)\.py:"
)


def where_oom(attempt: Reading, root: int) -> tuple[FailureClass, bool]:
    ordered = attempt.ordered
    nearby = _chain_text(ordered, root).lower()
    if "graph failed" in nearby and "capture" in nearby:
        return FailureClass.CUDA_GRAPH_OOM, True
    found = frames_before(ordered, root)
    frames = " ".join(frame.text for frame in found)
    # ... and the calls printed under them: a traceback a collector cut short may keep only
    # its first frame, whose code says where it went ("scheduler.run_event_loop()")
    calls = " ".join(
        ordered[p].message for f in found if (p := source_line(ordered, f)) is not None
    )
    if any(fragment in frames for fragment in _SERVING_ENGINE_FRAMES):
        return FailureClass.RUNTIME_OOM, True
    for fragments, failure_class in OOM_FRAME_RULES:
        if any(fragment in frames for fragment in fragments):
            return failure_class, True
    if any(fragment in frames or fragment in calls for fragment in _RUNTIME_FRAMES):
        return FailureClass.RUNTIME_OOM, True
    last_step = _last_step_before(attempt.steps, root)
    if last_step is not None and last_step.kind in _OOM_BY_STEP:
        return _OOM_BY_STEP[last_step.kind], True
    if last_step is not None and last_step.kind in SERVING:
        return FailureClass.RUNTIME_OOM, True
    if last_step is None and _MODEL_FORWARD.search(frames):
        return FailureClass.RUNTIME_OOM, False
    return _guessed_from_wording(ordered[root].message), False


# PyTorch's caching allocator reports memory held by CUDA graphs' private pools only when
# there is some ("..., with 2.17 GiB allocated in private pools (e.g., CUDA Graphs), and ...").
_ALLOCATOR_REPORT = "is allocated by PyTorch"
_GRAPH_POOLS = "allocated in private pools"
_FREE = re.compile(r"of which (?P<amount>[\d.]+) (?P<unit>[KMG]iB|bytes) is free")
# The error as a request's reply quotes it: the server was serving.
_REPLY = re.compile(r'"message"|\bError code: \d{3}\b|HTTP(?:/[\d.]+)? 5\d\d')


def _guessed_from_wording(message: str) -> FailureClass:
    """Where an OOM that nothing around it places (a pasted line) most likely happened,
    from its own words. Loading the weights fills the GPU tensor by tensor until a few
    hundred MiB are left: an allocator report with no graph pools and under a GiB free.
    A batch's activations fail with gigabytes still free that the pools left over; that, or
    anything else, is a server that was serving: the commonest case."""
    free = _FREE.search(message)
    if (
        _ALLOCATOR_REPORT in message
        and _GRAPH_POOLS not in message
        and not _REPLY.search(message)
        and free is not None
        and (free.group("unit") != "GiB" or float(free.group("amount")) < 1)
    ):
        return FailureClass.WEIGHTS_OOM
    return FailureClass.RUNTIME_OOM


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


def phase_of(
    failure_class: FailureClass,
    ordered: Sequence[LogLine],
    root: int,
    steps: Sequence[tuple[int, Event]],
    hinted: Phase | None,
) -> Phase:
    before = {event.kind for position, event in steps if position <= root}
    if EventKind.SIGTERM_RECEIVED in before:
        return Phase.SHUTDOWN
    if before & (SERVING | {EventKind.RETRACTION}):
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


def evidence_lines(
    ordered: Sequence[LogLine],
    hits: Sequence[Hit],
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
