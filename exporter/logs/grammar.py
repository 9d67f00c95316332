"""The grammar of SGLang's log: one table of line patterns per SGLang version.

Every pattern has a literal that must occur in the message before its regex runs: a
substring test costs tens of nanoseconds, a regex search microseconds, and most lines of a
serving log are batch lines that the first two patterns take. Adding a version means adding
a table here; the classifier never looks at these patterns.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from exporter.logs.events import Event, EventKind, FieldValue, LazyFields
from exporter.logs.lines import LogLine

GIB = 1 << 30


def gib(text: str) -> int:
    """SGLang's "GB" is GiB (GB = 1024**3 in memory_pool.py); return whole bytes."""
    return round(float(text) * GIB)


def boolean(text: str) -> bool:
    return text == "True"


Converter = Callable[[str], FieldValue]


@dataclass(frozen=True)
class LinePattern:
    """A line shape: a literal prefilter, a regex and how to convert its named groups.

    A group named ``x__alt`` fills field ``x``, so alternative spellings of one value can
    live in one regex. Groups without a converter are kept as strings.
    """

    kind: EventKind
    literal: str
    regex: re.Pattern[str]
    converters: MappingProxyType[str, Converter]
    constants: MappingProxyType[str, FieldValue]
    # Extra (field, regex, converter) searched after the main match: fields whose order
    # differs between versions.
    extras: tuple[tuple[str, re.Pattern[str], Converter], ...] = ()
    # Convert the fields when they are first read (LazyFields): for batch lines, whose
    # numbers are read for few of them.
    lazy: bool = False
    # (index in match.groups(), field, converter or None) per named group, in group order:
    # worked out once here rather than from groupdict() on every matching line.
    groups: tuple[tuple[int, str, Converter | None], ...] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        groups = []
        for name, number in sorted(self.regex.groupindex.items(), key=lambda item: item[1]):
            name = name.split("__", 1)[0]
            groups.append((number - 1, name, self.converters.get(name)))
        object.__setattr__(self, "groups", tuple(groups))

    def fields_of(self, match: re.Match[str]) -> dict[str, FieldValue]:
        """The fields of a message this pattern's regex matched."""
        fields: dict[str, FieldValue] = dict(self.constants) if self.constants else {}
        texts = match.groups()
        for index, name, convert in self.groups:
            text = texts[index]
            if text is not None:
                fields[name] = convert(text) if convert else text
        message = match.string
        for name, regex, convert in self.extras:
            extra = regex.search(message)
            if extra:
                fields[name] = convert(extra.group(1))
        return fields


def pattern(
    kind: EventKind,
    literal: str,
    regex: str,
    extras: Sequence[tuple[str, str, Converter]] = (),
    lazy: bool = False,
    **spec: Converter | FieldValue,
) -> LinePattern:
    """Build a LinePattern: callable keyword values convert groups, others are constants."""
    converters = {k: v for k, v in spec.items() if callable(v)}
    constants = {k: v for k, v in spec.items() if not callable(v)}
    return LinePattern(
        kind,
        literal,
        re.compile(regex),
        MappingProxyType(converters),
        MappingProxyType(constants),
        tuple((name, re.compile(rx), conv) for name, rx, conv in extras),
        lazy,
    )


_NUM = r"(-?[\d.]+)"
_BATCH_EXTRAS = (
    ("token_usage", r"token usage: " + _NUM, float),
    ("mamba_usage", r"mamba usage: " + _NUM, float),
    ("running_requests", r"#running-req: (\d+)", int),
    ("queued_requests", r"#queue-req: (\d+)", int),
    ("pending_tokens", r"#pending-token: (\d+)", int),
    ("input_throughput", r"input throughput \(token/s\): " + _NUM, float),
    ("cuda_graph", r"graph: (True|False)", boolean),
)


def _server_arg(name: str, value: str, convert: Converter) -> tuple[str, str, Converter]:
    """0.5.9 prints ``name=value`` (a dataclass repr), 0.5.23 ``'name': value`` (a dict)."""
    return (name, rf"(?:[(, ]{name}=|'{name}': ){value}", convert)


_INT = r"(-?\d+)"
_SERVER_ARGS_EXTRAS = (
    _server_arg("model_path", r"'([^']*)'", str),
    _server_arg("device", r"'([^']*)'", str),
    _server_arg("tp_size", _INT, int),
    _server_arg("mem_fraction_static", _NUM, float),
    _server_arg("max_running_requests", _INT, int),
    _server_arg("max_total_tokens", _INT, int),
    _server_arg("chunked_prefill_size", _INT, int),
    _server_arg("context_length", _INT, int),
    _server_arg("port", _INT, int),
    _server_arg("disable_radix_cache", r"(True|False)", boolean),
    _server_arg("speculative_algorithm", r"'([^']*)'", str),
    _server_arg("speculative_num_draft_tokens", _INT, int),
    _server_arg("max_mamba_cache_size", _INT, int),
    _server_arg("mamba_full_memory_ratio", _NUM, float),
    _server_arg("cuda_graph_max_bs", _INT, int),
)

# Runtime lines first: they are most of a serving log.
COMMON: tuple[LinePattern, ...] = (
    pattern(
        EventKind.DECODE_BATCH,
        "Decode batch",
        r"Decode batch(?: \[\d+\])?[.,] #running-req: (?P<running_requests>\d+), "
        r"(?:#token: (?P<tokens>\d+), token usage: (?P<token_usage>[\d.]+)"
        r"|#full token: (?P<tokens__full>\d+), full token usage: (?P<token_usage__full>[\d.]+)"
        r"(?:, mamba num: (?P<mamba_used>\d+), mamba usage: (?P<mamba_usage>[\d.]+))?)"
        # accept len right after the usage: 0.5.23 may add "block accept len" further on
        r"(?:, accept len: (?P<accept_len>[\d.]+)(?:, accept rate: (?P<accept_rate>[\d.]+))?)?"
        r".*?(?:(?:cuda|cpu|npu|musa|xpu|hpu) graph: (?P<cuda_graph>True|False), )?"
        r"gen throughput \(token/s\): (?P<gen_throughput>[\d.]+), "
        r"#queue-req: (?P<queued_requests>\d+)",
        lazy=True,
        running_requests=int,
        tokens=int,
        token_usage=float,
        mamba_used=int,
        mamba_usage=float,
        accept_len=float,
        accept_rate=float,
        cuda_graph=boolean,
        gen_throughput=float,
        queued_requests=int,
    ),
    pattern(
        EventKind.PREFILL_BATCH,
        "Prefill batch",
        r"Prefill batch(?: \[\d+\])?[.,] #new-seq: (?P<new_seqs>\d+), "
        r"#new-token: (?P<new_tokens>\d+), #cached-token: (?P<cached_tokens>\d+)",
        extras=_BATCH_EXTRAS,
        lazy=True,
        new_seqs=int,
        new_tokens=int,
        cached_tokens=int,
    ),
    pattern(
        EventKind.RETRACTION,
        "#retracted_reqs",
        r"(?:KV cache pool is full\. Retract requests|Decode out of memory happened)\. "
        r"#retracted_reqs: (?P<retracted_requests>\d+)",
        retracted_requests=int,
    ),
    pattern(
        EventKind.SERVER_ARGS,
        "server_args=",
        r"^server_args=(?P<format>ServerArgs\(|\{)",
        extras=_SERVER_ARGS_EXTRAS,
        format=lambda text: "dict" if text == "{" else "ServerArgs",
    ),
    pattern(
        EventKind.WEIGHT_LOAD_BEGIN,
        "Load weight begin",
        r"Load weight begin\. avail mem=(?P<avail_bytes>[\d.]+) GB",
        avail_bytes=gib,
    ),
    pattern(
        EventKind.WEIGHT_LOAD_END,
        "Load weight end",
        r"Load weight end\. (?:elapsed=(?P<elapsed_s>[\d.]+) s, )?type=(?P<model_type>\w+), "
        r"(?:dtype=(?P<dtype>[\w.]+), )?(?:quant=(?P<quant>[^,]+), (?:fmt=[^,]+, )?)?"
        r"avail mem=(?P<avail_bytes>[\d.]+) GB, mem usage=(?P<usage_bytes>-?[\d.]+) GB",
        elapsed_s=float,
        avail_bytes=gib,
        usage_bytes=gib,
    ),
    pattern(
        EventKind.MAMBA_CACHE_ALLOCATED,
        "Mamba Cache is allocated",
        r"Mamba Cache is allocated\. max_mamba_cache_size: (?P<slots>\d+), "
        r"conv_state size: (?P<conv_bytes>[\d.]+) ?GB,? ssm_state size: (?P<ssm_bytes>[\d.]+) ?GB"
        r"(?:,? intermediate_ssm_state_cache size: (?P<intermediate_ssm_bytes>[\d.]+) ?GB"
        r",? intermediate_conv_window_cache size: (?P<intermediate_conv_bytes>[\d.]+) ?GB)?",
        slots=int,
        conv_bytes=gib,
        ssm_bytes=gib,
        intermediate_ssm_bytes=gib,
        intermediate_conv_bytes=gib,
    ),
    pattern(
        EventKind.KV_CACHE_ALLOCATED,
        "Cache is allocated",
        r"(?P<cache>(?:Full |SWA )?KV Cache) is allocated\. (?:dtype: (?P<dtype>[\w.]+), )?"
        r"#tokens: (?P<tokens>\d+), "
        r"(?:K size: (?P<k_bytes>[\d.]+) GB, V size: (?P<v_bytes>[\d.]+) GB"
        r"|KV size: (?P<kv_bytes>[\d.]+) GB)",
        tokens=int,
        k_bytes=gib,
        v_bytes=gib,
        kv_bytes=gib,
    ),
    pattern(
        EventKind.MEMORY_POOL_END,
        "Memory pool end",
        r"Memory pool end\. avail mem=(?P<avail_bytes>[\d.]+) GB",
        avail_bytes=gib,
    ),
    pattern(
        EventKind.CUDA_GRAPH_BEGIN,
        "Capture ",
        r"^Capture (?P<stage>.+?) begin\.(?:.*?avail mem=(?P<avail_bytes>[\d.]+) ?GB)?",
        avail_bytes=gib,
        stage=lambda text: graph_stage(text),
    ),
    pattern(
        EventKind.CUDA_GRAPH_END,
        "Capture ",
        r"^Capture (?P<stage>.+?) end\. (?:Time elapsed: (?P<elapsed_s>[\d.]+) s\. "
        r"mem usage=(?P<usage_bytes>-?[\d.]+) GB\. avail mem=(?P<avail_bytes>[\d.]+) GB"
        r"|(?:bs=\[[^\]]*\], )?elapsed=(?P<elapsed_s__new>[\d.]+) s, "
        r"mem usage=(?P<usage_bytes__new>-?[\d.]+) GB, avail mem=(?P<avail_bytes__new>[\d.]+) GB)?",
        elapsed_s=float,
        usage_bytes=gib,
        avail_bytes=gib,
        stage=lambda text: graph_stage(text),
    ),
    pattern(
        EventKind.SCHEDULER_READY,
        "max_total_num_tokens=",
        r"max_total_num_tokens=(?P<max_total_num_tokens>\d+), "
        r"(?:chunked_prefill_size=(?P<chunked_prefill_size>-?\d+), )?"
        r"max_prefill_tokens=(?P<max_prefill_tokens>\d+), "
        r"max_running_requests=(?P<max_running_requests>\d+), context_len=(?P<context_len>\d+)"
        r"(?:, available_(?P<device>gpu|cpu)_mem=(?P<avail_bytes>[\d.]+) GB)?",
        max_total_num_tokens=int,
        chunked_prefill_size=int,
        max_prefill_tokens=int,
        max_running_requests=int,
        context_len=int,
        avail_bytes=gib,
    ),
    # tqdm bars (rank 0, no prefix): 0.5.9 ends each shard's line with \n, 0.5.23 and the
    # graph bar redraw with \r, which the tailer splits on too. The multi-threaded loader
    # (enable_multithread_load) says "Multi-thread loading (pt checkpoint )?shards".
    pattern(
        EventKind.WEIGHT_SHARDS,
        "shards:",
        r"^(?:Loading (?:safetensors|pt|bin) checkpoint|Multi-thread loading(?: pt checkpoint)?)"
        r" shards:\s*(?P<percent>\d+)% Completed "
        r"\| (?P<loaded>\d+)/(?P<total>\d+)",
        percent=int,
        loaded=int,
        total=int,
    ),
    pattern(
        EventKind.CUDA_GRAPH_BATCHES,
        "Capturing batches (",
        r"^Capturing batches \(bs=(?P<batch_size>\d+)(?: avail_mem=(?P<avail_bytes>[\d.]+) ?GB)?\)"
        r":\s*(?P<percent>\d+)%\|[^|]*\| (?P<captured>\d+)/(?P<total>\d+)",
        batch_size=int,
        avail_bytes=gib,
        percent=int,
        captured=int,
        total=int,
    ),
    pattern(
        EventKind.DIST_INIT_BEGIN, "Init torch distributed begin", r"Init torch distributed begin"
    ),
    pattern(
        EventKind.DIST_INIT_END,
        "Init torch distributed ends",
        r"Init torch distributed ends\. (?:elapsed=(?P<elapsed_s>[\d.]+) s, )?"
        r"mem usage=(?P<mem_usage_bytes>-?[\d.]+) GB",
        elapsed_s=float,
        mem_usage_bytes=gib,
    ),
    pattern(
        EventKind.MEMORY_UNBALANCED,
        "memory capacity is unbalanced",
        r"The memory capacity is unbalanced",
    ),
    pattern(
        EventKind.RESOLUTION_WARNING,
        "Max running requests is reset to",
        r"Max running requests is reset to (?P<value>\d+) for speculative decoding",
        setting="max_running_requests",
        value=int,
    ),
    pattern(
        EventKind.RESOLUTION_WARNING,
        "Disabling radix cache since speculative decoding",
        r"Disabling radix cache since speculative decoding for (?P<model_arch>\w+)",
        setting="disable_radix_cache",
        value=True,
    ),
    pattern(EventKind.HTTP_STARTED, "Uvicorn running on", r"Uvicorn running on (?P<url>\S+)"),
    pattern(
        EventKind.SERVER_READY,
        "fired up and ready to roll",
        r"The server is fired up and ready to roll",
    ),
    pattern(
        EventKind.REQUEST_SERVED,
        '" 200',
        r'"POST /(?:generate|v1/(?:chat/)?completions|v1/embeddings|v1/responses)\b[^"]*" 200\b',
    ),
    pattern(EventKind.HEALTH_CHECK_FAILED, "Health check failed", r"Health check failed"),
    pattern(
        EventKind.PROCESS_EXCEPTION,
        "hit an exception",
        r"(?P<process>\w+) hit an exception",
    ),
    pattern(
        EventKind.CHILD_FAILED,
        "Received sigquit from a child",
        r"Received sigquit from a child",
    ),
    pattern(EventKind.CHILD_FAILED, "SIGQUIT received", r"SIGQUIT received"),
    pattern(
        EventKind.CHILD_FAILED,
        "Child process unexpectedly failed",
        r"Child process unexpectedly failed with an exit code (?P<exit_code>-?\d+)",
        exit_code=int,
    ),
    pattern(
        EventKind.SCHEDULER_DIED,
        "scheduler is dead",
        r"Rank (?P<rank>\d+) scheduler is dead",
        rank=int,
    ),
    pattern(
        EventKind.WATCHDOG_TIMEOUT,
        "atchdog timeout (",
        r"(?:(?P<process>\w+) )?[Ww]atchdog timeout "
        r"\((?:self\.)?watchdog_timeout=(?P<timeout_s>[\d.]+)",
        timeout_s=float,
    ),
    pattern(
        EventKind.WARMUP_FAILED,
        "Initialization failed. warmup error",
        r"Initialization failed\. warmup error",
    ),
    pattern(
        EventKind.BIND_FAILED,
        "error while attempting to bind on address",
        r"error while attempting to bind on address (?P<address>.*?): (?P<reason>.+)$",
    ),
    pattern(EventKind.SIGTERM_RECEIVED, "SIGTERM received", r"SIGTERM received"),
    pattern(
        EventKind.ARGUMENT_ERROR,
        ": error: ",
        r"^(?P<prog>[\w.-]+(?: serve)?): error: (?P<error>.+)$",
    ),
)

# Lines only SGLang 0.5.23 prints (0.5.9 has no equivalent).
V0_5_23: tuple[LinePattern, ...] = (
    pattern(EventKind.DIST_INIT_BEGIN, "Init parallel begin", r"^Init parallel begin"),
    pattern(
        EventKind.DIST_INIT_END,
        "Init parallel ends",
        r"^Init parallel ends\. elapsed=(?P<elapsed_s>[\d.]+) s",
        elapsed_s=float,
    ),
    pattern(
        EventKind.MEMORY_BASELINE,
        "Memory baseline taken",
        r"Memory baseline taken\. mem usage=(?P<mem_usage_bytes>-?[\d.]+) GB",
        mem_usage_bytes=gib,
    ),
    pattern(
        EventKind.MAMBA_REQUESTS_CAPPED,
        "is capped to",
        r"max_running_requests is capped to (?P<max_running_requests>\d+) by the mamba state cache "
        r"\(max_mamba_cache_size=(?P<max_mamba_cache_size>\d+), "
        r"(?P<slots_per_request>\d+) state slots per request\)",
        max_running_requests=int,
        max_mamba_cache_size=int,
        slots_per_request=int,
    ),
    pattern(
        EventKind.KV_POOL_BELOW_CONTEXT,
        "KV pool holds",
        r"KV pool holds (?P<tokens>\d+) tokens, "
        r"fewer than --context-length (?P<context_length>\d+)",
        tokens=int,
        context_length=int,
    ),
    pattern(
        EventKind.STARTUP_TIMINGS,
        "Engine startup timings",
        r"Engine startup timings \(s\): load_weight=(?P<load_weight_s>[\d.]+), "
        r"kv_cache_allocation=(?P<kv_cache_allocation_s>[\d.]+), "
        r"scheduler_e2e=(?P<scheduler_e2e_s>[\d.]+)",
        load_weight_s=float,
        kv_cache_allocation_s=float,
        scheduler_e2e_s=float,
    ),
    pattern(
        EventKind.SCHEDULER_DIED,
        "scheduler died during initialization",
        r"Rank (?P<rank>\d+) scheduler died during initialization "
        r"\(exit code: (?P<exit_code>-?\d+)\)",
        rank=int,
        exit_code=int,
    ),
    pattern(
        EventKind.SCHEDULER_DIED,
        "crashed with exit code",
        r"Subprocess (?P<process>\S+) \(pid=\d+\) crashed with exit code (?P<exit_code>-?\d+)",
        exit_code=int,
    ),
    pattern(
        EventKind.KILL_PROCESS_TREE,
        "kill_process_tree called",
        r"kill_process_tree called: parent_pid=\d+, include_parent=(?P<include_parent>True|False)",
        include_parent=boolean,
    ),
)

GRAMMARS: dict[str, tuple[LinePattern, ...]] = {
    "0.5.9": COMMON,
    "0.5.23": COMMON + V0_5_23,
}
# An unknown version reads with every table: a line means the same in all of them.
ANY_VERSION = COMMON + V0_5_23

_GRAPH_STAGES = (
    ("draft extend", "draft_extend"),
    ("draft", "draft"),
    ("piecewise", "prefill"),
    ("prefill", "prefill"),
)


def graph_stage(name: str) -> str:
    """Map SGLang's capture names (both versions) onto target/draft/draft_extend/prefill."""
    lowered = name.lower()
    for needle, stage in _GRAPH_STAGES:
        if needle in lowered:
            return stage
    return "target"


def grammar_for(version: str | None) -> tuple[LinePattern, ...]:
    return GRAMMARS.get(version or "", ANY_VERSION)


def parse_event(line: LogLine, patterns: Iterable[LinePattern] = ANY_VERSION) -> Event | None:
    """The event this line carries, or None for a line the grammar does not know."""
    message = line.message
    for line_pattern in patterns:
        # The literal test inline: most patterns are ruled out by it, and a method call
        # per pattern would cost more than the test itself.
        if line_pattern.literal in message:
            match = line_pattern.regex.search(message)
            if match is not None:
                if line_pattern.lazy:
                    return Event(line_pattern.kind, line, LazyFields(line_pattern, match))
                return Event(
                    line_pattern.kind, line, MappingProxyType(line_pattern.fields_of(match))
                )
    return None
