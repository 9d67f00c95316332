"""A realistic SGLang 0.5.9 server log, generated from the real format strings.

The shape is that of one attempt of the project's incident model (hybrid linear-attention
Qwen3.6-27B with EAGLE speculative decoding on TP=2): the startup block every TP rank
prints (sglang-internals.md §2.2), then serving: mostly `Decode batch` and `Prefill batch`
lines from TP0 (§2.3), uvicorn access lines, a few `KV cache pool is full. Retract requests`
warnings, and now and then an unprefixed multi-line traceback (uvicorn's
`Exception in ASGI application` for a client that went away).

Deterministic for a given seed; :func:`write_log` returns the ground truth the tools must
agree with (line counts, the last batch numbers, the sum of retracted requests).
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

TP_RANKS = (0, 1)
START = 1_778_750_000  # 2026-05-14, seconds since the epoch: only formatted, never compared


@dataclass
class Truth:
    """What the generated log says, counted while writing it."""

    lines: int = 0
    decode: int = 0
    prefill: int = 0
    retractions: int = 0  # lines
    retracted_requests: int = 0  # summed
    tracebacks: int = 0
    access: int = 0
    running_requests: int | None = None  # from the last batch line (decode or prefill)
    queued_requests: int | None = None
    token_usage: float | None = None  # from the last batch line
    gen_throughput: float | None = None  # from the last decode line
    kv_cache_tokens: dict[int, int] = field(default_factory=dict)
    weights_bytes: dict[int, int] = field(default_factory=dict)
    bytes: int = 0


def _ts(second: int) -> str:
    # A fixed UTC rendering without time.strftime per line: cheap, and enough for a parser.
    day, rest = divmod(second - START, 86400)
    hour, rest = divmod(rest + 9 * 3600, 3600)
    minute, sec = divmod(rest, 60)
    return f"2026-05-{14 + day:02d} {hour % 24:02d}:{minute:02d}:{sec:02d}"


GIB = 1 << 30


def _startup(t: int, truth: Truth) -> list[str]:
    """0.5.9's startup lines for both ranks, in order (§2.2 rows 1-19)."""
    out = [
        "Disabling radix cache since speculative decoding for Qwen3_5ForConditionalGeneration "
        "is not supported with radix cache yet.",
        "Overlap scheduler is disabled when spec v2 is off or using unsupported speculative "
        "algorithm. You can set env SGLANG_ENABLE_SPEC_V2=True to enable the experimental "
        "overlap scheduler. ",
        f"[{_ts(t)}] server_args=ServerArgs(model_path='/models/Qwen3.6-27B', "
        "tokenizer_path='/models/Qwen3.6-27B', tokenizer_mode='auto', host='0.0.0.0', "
        "port=30000, mem_fraction_static=0.85, max_running_requests=8, "
        "chunked_prefill_size=4096, tp_size=2, speculative_algorithm='EAGLE', "
        "speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4, "
        "max_mamba_cache_size=None, mamba_full_memory_ratio=0.5, disable_radix_cache=True, "
        "cuda_graph_max_bs=32)",
    ]

    def each(text: str) -> None:
        out.extend(f"[{_ts(t)} TP{rank}] {text}" for rank in TP_RANKS)

    each("Init torch distributed begin.")
    each("Init torch distributed ends. elapsed=1.97 s, mem usage=0.42 GB")
    each("Load weight begin. avail mem=46.86 GB")
    out += [
        f"Loading safetensors checkpoint shards: {100 * i // 12:3d}% Completed | {i}/12 "
        f"[00:{5 * i:02d}<00:{60 - 5 * i:02d},  5.18s/it]"
        for i in range(13)
    ]
    t += 63
    each(
        "Load weight end. elapsed=63.07 s, type=Qwen3_5ForConditionalGeneration, "
        "dtype=torch.bfloat16, avail mem=21.30 GB, mem usage=25.56 GB."
    )
    each(
        "Mamba Cache is allocated. max_mamba_cache_size: 8, conv_state size: 0.01GB, "
        "ssm_state size: 0.63GB intermediate_ssm_state_cache size: 2.53GB "
        "intermediate_conv_window_cache size: 0.05GB "
    )
    each("KV Cache is allocated. #tokens: 373672, K size: 5.70 GB, V size: 5.70 GB")
    each("Memory pool end. avail mem=6.67 GB")
    t += 2
    each("Capture cuda graph begin. This can take up to several minutes. avail mem=6.60 GB")
    out.append(
        "Capturing batches (bs=1 avail_mem=6.09 GB): 100%|██████████| 8/8 [00:09<00:00,  1.13s/it]"
    )
    t += 10
    each("Capture cuda graph end. Time elapsed: 10.21 s. mem usage=0.52 GB. avail mem=6.08 GB.")
    # 0.5.9 loads the draft model after the target's graphs (§2.2 row 14).
    each("Load weight begin. avail mem=6.08 GB")
    t += 6
    each(
        "Load weight end. elapsed=5.92 s, type=Qwen3_5ForCausalLMMTP, dtype=torch.bfloat16, "
        "avail mem=3.28 GB, mem usage=2.80 GB."
    )
    each("KV Cache is allocated. #tokens: 373672, K size: 0.36 GB, V size: 0.36 GB")
    each("Memory pool end. avail mem=2.57 GB")
    each("Capture draft cuda graph begin. This can take up to several minutes. avail mem=4.93 GB")
    t += 8
    each(
        "Capture draft cuda graph end. Time elapsed: 8.31 s. mem usage=0.21 GB. avail mem=4.72 GB."
    )
    out.append(
        f"[{_ts(t)} TP0] max_total_num_tokens=373672, chunked_prefill_size=4096, "
        "max_prefill_tokens=16384, max_running_requests=8, context_len=32768, "
        "available_gpu_mem=4.63 GB"
    )
    out += [
        f"[{_ts(t)}] INFO:     Started server process [41877]",
        f"[{_ts(t)}] INFO:     Waiting for application startup.",
        f"[{_ts(t)}] INFO:     Application startup complete.",
        f"[{_ts(t)}] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
        f'[{_ts(t)}] INFO:     127.0.0.1:50312 - "GET /model_info HTTP/1.1" 200',
        f'[{_ts(t)}] INFO:     127.0.0.1:50324 - "POST /generate HTTP/1.1" 200',
        f"[{_ts(t)}] The server is fired up and ready to roll!",
    ]
    for rank in TP_RANKS:
        truth.kv_cache_tokens[rank] = 373672
        truth.weights_bytes[rank] = round(25.56 * GIB)
    return out


_TRACEBACK = (
    "ERROR:    Exception in ASGI application",
    "Traceback (most recent call last):",
    '  File "/opt/venv/lib/python3.11/site-packages/uvicorn/protocols/http/httptools_impl.py",'
    " line 409, in run_asgi",
    "    result = await app(  # type: ignore[func-returns-value]",
    '  File "/opt/venv/lib/python3.11/site-packages/starlette/responses.py", line 268, in wrap',
    "    await func()",
    '  File "/opt/venv/lib/python3.11/site-packages/starlette/responses.py", line 246, in'
    " listen_for_disconnect",
    "    message = await receive()",
    "asyncio.exceptions.CancelledError",
)


class Generator:
    """Serving lines, one at a time, with the state SGLang's numbers would follow."""

    def __init__(self, seed: int, truth: Truth) -> None:
        self.rng = random.Random(seed)
        self.truth = truth
        self.t = START + 200
        self.running = 3
        self.queued = 0
        self.tokens = 2411
        self.port = 50400

    def batch_of_lines(self) -> list[str]:
        """The next few lines; the mix over many calls is what a busy server prints."""
        rng, truth = self.rng, self.truth
        roll = rng.random()
        self.t += rng.random() < 0.3
        ts = _ts(self.t)
        if roll < 0.70:
            return [self._decode(ts)]
        if roll < 0.82:
            return [self._prefill(ts)]
        if roll < 0.985:
            truth.access += 1
            self.port = 50000 + (self.port + 7) % 15000
            path = "GET /health" if rng.random() < 0.3 else "POST /v1/chat/completions"
            return [f'[{ts}] INFO:     127.0.0.1:{self.port} - "{path} HTTP/1.1" 200']
        if roll < 0.992:
            n = rng.randint(1, 4)
            truth.retractions += 1
            truth.retracted_requests += n
            ratio = rng.random()
            return [
                f"[{ts} TP0] KV cache pool is full. Retract requests. #retracted_reqs: {n}, "
                f"#new_tokens_gained: {n * 512}, #new_token_ratio: {ratio:.4f} -> "
                f"{min(1.0, ratio + 0.1):.4f}"
            ]
        if roll < 0.994:
            truth.tracebacks += 1
            return [f"[{ts}] {_TRACEBACK[0]}", *_TRACEBACK[1:]]
        return [f"[{ts}] INFO:     Shutting down connection (keep-alive timeout)"]

    def _usage(self) -> tuple[float, float]:
        full = min(1.0, self.tokens / 373672)
        mamba = min(1.0, self.running / 8)
        return round(full, 2), round(mamba, 2)

    def _decode(self, ts: str) -> str:
        rng, truth = self.rng, self.truth
        self.running = max(1, min(8, self.running + rng.randint(-1, 1)))
        self.queued = max(0, min(32, self.queued + rng.randint(-1, 1)))
        self.tokens = max(0, self.tokens + rng.randint(-200, 400)) % 300_000
        full, mamba = self._usage()
        accept_len = 1 + 3 * rng.random()
        gen = 20 + 120 * rng.random()
        truth.decode += 1
        truth.running_requests, truth.queued_requests = self.running, self.queued
        truth.token_usage, truth.gen_throughput = full, round(gen, 2)
        return (
            f"[{ts} TP0] Decode batch, #running-req: {self.running}, #full token: {self.tokens}, "
            f"full token usage: {full:.2f}, mamba num: {self.running}, mamba usage: {mamba:.2f}, "
            f"accept len: {accept_len:.2f}, accept rate: {accept_len / 4:.2f}, cuda graph: True, "
            f"gen throughput (token/s): {gen:.2f}, #queue-req: {self.queued}"
        )

    def _prefill(self, ts: str) -> str:
        rng, truth = self.rng, self.truth
        seqs = rng.randint(1, 4)
        new = rng.randint(20, 4096)
        self.queued = max(0, min(32, self.queued + rng.randint(-1, 1)))
        full, mamba = self._usage()
        truth.prefill += 1
        truth.running_requests, truth.queued_requests = self.running, self.queued
        truth.token_usage = full
        return (
            f"[{ts} TP0] Prefill batch, #new-seq: {seqs}, #new-token: {new}, #cached-token: 0, "
            f"full token usage: {full:.2f}, mamba usage: {mamba:.2f}, "
            f"#running-req: {self.running}, #queue-req: {self.queued}, "
            f"input throughput (token/s): {new / (0.2 + rng.random()):.2f}, cuda graph: False"
        )


def write_log(path: Path, lines: int, seed: int = 2026) -> Truth:
    """Write about ``lines`` lines (exactly: the last traceback may be cut) to ``path``."""
    truth = Truth()
    generator = Generator(seed, truth)
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        chunk = _startup(START, truth)
        written = 0
        while written < lines:
            room = lines - written - len(chunk)
            while room > 0:
                more = generator.batch_of_lines()
                if len(more) > room:  # keep the count exact: no cut traceback at the end
                    truth.tracebacks -= 1
                    more = [generator._decode(_ts(generator.t))]
                chunk += more
                room -= len(more)
                if len(chunk) >= 20_000:
                    break
            text = "\n".join(chunk) + "\n"
            out.write(text)
            truth.bytes += len(text.encode())
            written += len(chunk)
            chunk = []
    truth.lines = written
    return truth


def repeat_log(source: Path, destination: Path, times: int, skip_lines: int = 0) -> None:
    """``source`` once whole, then ``times - 1`` more copies of its serving part (its first
    ``skip_lines`` lines are the startup): a server that ran ``times`` as long."""
    with open(source, "rb") as src, open(destination, "wb") as out:
        shutil.copyfileobj(src, out, 8 << 20)
        src.seek(0)
        for _ in range(skip_lines):
            src.readline()
        body_start = src.tell()
        for _ in range(times - 1):
            src.seek(body_start)
            shutil.copyfileobj(src, out, 8 << 20)


def startup_lines(path: Path) -> int:
    """How many lines the startup block takes (up to and with "ready to roll")."""
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if "ready to roll" in line:
                return number
    return 0
