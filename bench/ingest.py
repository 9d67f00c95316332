"""Figure 1 (log ingestion throughput vs mtail) and the ingestion half of figure 6.

Ours: the daemon's live read path, run as the daemon runs it, on a log already on disk (in
the page cache, as for mtail): a LogTailer (inotify on, the daemon's defaults) whose thread
reads the file in batches and calls back with them; the callback is the daemon's
(exporter/supervisor/daemon.py, ``_follow``): under a lock, LogReader(keep_lines=False).feed
-> AttemptProgress.apply, the matched/unknown counters, the doom check. Timed from the
tailer's start until the last line has been applied: the values are then what the collector
turns into /metrics. Interpreter start-up and imports are not counted.

mtail: `mtail --one_shot --progs bench/mtail --logs FILE` with an equivalent program
(bench/mtail/sglang.mtail), timed as a whole process (its start-up, a few ms, included).
"""

from __future__ import annotations

import json
import resource
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import (
    HOST,
    REPO,
    emit,
    free_port,
    median,
    note,
    peer_binary,
    ratio,
)
from bench.loggen import Truth, repeat_log, startup_lines, write_log
from bench.metrics_proc import Follower
from exporter.attempt.progress import AttemptProgress
from exporter.logs.reader import LogReader
from exporter.logs.tailer import LogTailer

MTAIL_PROGS = REPO / "bench" / "mtail"
TARGET_RATIO = 3.0


@dataclass
class OurRun:
    seconds: float
    cpu_seconds: float  # of this whole process meanwhile (the tailer's thread does the work)
    reader: LogReader
    progress: AttemptProgress


def ingest(path: Path, lines: int, version: str = "0.5.9", timeout_s: float = 1800.0) -> OurRun:
    """Bytes on disk to values ready for /metrics, through the daemon's tailer and callback."""
    follower = Follower(version)
    reader = follower.log.reader
    done = threading.Event()

    def on_lines(batch: list[str]) -> None:  # as Daemon._follow's on_lines
        follower.on_lines(batch)
        if reader.stats.lines >= lines:
            done.set()

    tailer = LogTailer(path, on_lines)
    started, cpu = time.perf_counter(), time.process_time()
    tailer.start()
    finished = done.wait(timeout_s)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    tailer.stop()
    if not finished:
        raise RuntimeError(f"read {reader.stats.lines} of {lines} lines in {timeout_s} s")
    follower.log.progress.apply(reader.close())
    return OurRun(seconds, cpu, reader, follower.log.progress)


@dataclass
class MtailRun:
    seconds: float
    cpu_seconds: float
    metrics: dict


def run_mtail(path: Path) -> MtailRun:
    binary = peer_binary("mtail")
    assert binary is not None
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [
            binary,
            "--one_shot",
            "--one_shot_format=json",
            "--progs",
            str(MTAIL_PROGS),
            "--logs",
            str(path),
            "--logtostderr",
            # One-shot mode still opens its HTTP port: keep it on loopback.
            "--address",
            HOST,
            "--port",
            str(free_port()),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"mtail failed ({done.returncode}): {done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return MtailRun(seconds, cpu, _mtail_values(json.loads(done.stdout)))


def _mtail_values(dump: dict) -> dict:
    """{metric: value} or {metric: {label tuple: value}} from mtail's one-shot JSON."""
    out: dict = {}
    for name, entries in dump.items():
        for entry in entries:
            for item in entry.get("LabelValues", []):
                value = item["Value"]["Value"]
                labels = tuple(item.get("Labels") or ())
                if labels:
                    out.setdefault(name, {})[labels] = value
                else:
                    out[name] = value
    return out


def agreement(
    truth: Truth, ours: OurRun, mtail: MtailRun
) -> list[tuple[str, object, object, object, bool]]:
    """(what, truth, ours, mtail, all agree) for the counts and gauges both tools produce."""
    m = mtail.metrics
    p = ours.progress
    rt = p.runtime

    def close(a: object, b: object, tolerance: float) -> bool:
        if a is None or b is None:
            return a is b
        return abs(float(a) - float(b)) <= tolerance

    checks = [
        ("log lines", truth.lines, ours.reader.stats.lines, m.get("sglang_log_lines_total"), 0),
        (
            "retracted requests",
            truth.retracted_requests,
            rt.retractions,
            m.get("sglang_retracted_requests_total"),
            0,
        ),
        (
            "running requests",
            truth.running_requests,
            rt.running_requests,
            m.get("sglang_running_requests"),
            0,
        ),
        (
            "queued requests",
            truth.queued_requests,
            rt.queued_requests,
            m.get("sglang_queued_requests"),
            0,
        ),
        ("token usage", truth.token_usage, rt.token_usage, m.get("sglang_token_usage_ratio"), 1e-9),
        (
            "gen throughput",
            truth.gen_throughput,
            rt.gen_throughput,
            m.get("sglang_generation_throughput_tokens_per_second"),
            1e-9,
        ),
        ("server ready", 1, int(p.ready), m.get("sglang_server_ready"), 0),
    ]
    for rank in sorted(truth.kv_cache_tokens):
        pools = p.ranks.get(rank)
        checks.append(
            (
                f"kv_cache_tokens tp{rank}",
                truth.kv_cache_tokens[rank],
                pools.kv_tokens if pools else None,
                m.get("sglang_kv_cache_tokens", {}).get((str(rank),)),
                0,
            )
        )
        checks.append(
            (
                f"weights_bytes tp{rank}",
                truth.weights_bytes[rank],
                pools.weights_bytes if pools else None,
                m.get("sglang_weights_bytes", {}).get((str(rank),)),
                2,  # mtail multiplies floats; we round once per value
            )
        )
    out = []
    for what, expected, got_ours, got_mtail, tolerance in checks:
        ok = close(expected, got_ours, tolerance) and close(expected, got_mtail, tolerance)
        out.append((what, expected, got_ours, got_mtail, ok))
    # mtail counts batch lines itself; ours turns them into gauges (not counted separately).
    out.append(
        (
            "decode lines (mtail)",
            truth.decode,
            None,
            m.get("sglang_decode_batches_total"),
            truth.decode == m.get("sglang_decode_batches_total"),
        )
    )
    out.append(
        (
            "prefill lines (mtail)",
            truth.prefill,
            None,
            m.get("sglang_prefill_batches_total"),
            truth.prefill == m.get("sglang_prefill_batches_total"),
        )
    )
    return out


def make_logs(workdir: Path, base_lines: int) -> tuple[Path, Truth]:
    path = workdir / f"sglang-{base_lines}.log"
    note(f"generating a {base_lines:,}-line SGLang 0.5.9 log ...")
    truth = write_log(path, base_lines)
    note(
        f"  {truth.bytes / 1e6:.0f} MB: {truth.decode:,} decode, {truth.prefill:,} prefill, "
        f"{truth.access:,} access lines, {truth.retractions:,} retractions, "
        f"{truth.tracebacks:,} tracebacks"
    )
    return path, truth


def figure_throughput(workdir: Path, lines: int, repeats: int) -> tuple[Path, Truth]:
    path, truth = make_logs(workdir, lines)
    ours_runs: list[OurRun] = []
    mtail_runs: list[MtailRun] = []
    have_mtail = peer_binary("mtail") is not None
    for i in range(repeats):  # interleaved, so both see the same background load
        ours_runs.append(ingest(path, truth.lines))
        note(f"  ours run {i + 1}: {lines / ours_runs[-1].seconds:,.0f} lines/s")
        if have_mtail:
            mtail_runs.append(run_mtail(path))
            run = mtail_runs[-1]
            note(
                f"  mtail run {i + 1}: {lines / run.seconds:,.0f} lines/s "
                f"({run.cpu_seconds / run.seconds:.2f} cores busy)"
            )
    ours_rate = lines / median([r.seconds for r in ours_runs])
    mtail_rate = lines / median([r.seconds for r in mtail_runs]) if mtail_runs else None
    r = ratio(ours_rate, mtail_rate)
    emit(
        f"ingest_throughput_{lines // 1000}k_lines",
        ours_rate,
        "lines/s",
        f">= {TARGET_RATIO:g}x mtail's lines/s",
        r is not None and r >= TARGET_RATIO,
        peer="mtail 3.0.0~rc50 --one_shot" if have_mtail else None,
        peer_value=mtail_rate,
        ratio=r,
    )
    if mtail_runs:
        cpu_rate = lines / median([m.cpu_seconds for m in mtail_runs])
        ours_cpu_rate = lines / median([r.cpu_seconds for r in ours_runs])
        note(
            f"  per CPU second: mtail {cpu_rate:,.0f} lines (it kept "
            f"{median([m.cpu_seconds / m.seconds for m in mtail_runs]):.2f} cores busy), ours "
            f"{ours_cpu_rate:,.0f} (one thread)"
        )
        emit(
            f"ingest_lines_per_cpu_second_{lines // 1000}k_lines",
            ours_cpu_rate,
            "lines per CPU second",
            "none (context: mtail keeps about one core busy, so wall and CPU differ)",
            True,
            peer="mtail 3.0.0~rc50 --one_shot",
            peer_value=cpu_rate,
            ratio=ours_cpu_rate / cpu_rate,
        )
        checks = agreement(truth, ours_runs[-1], mtail_runs[-1])
        for what, expected, got_ours, got_mtail, ok in checks:
            note(
                f"  agree? {what}: truth {expected}, ours {got_ours}, mtail {got_mtail}: "
                f"{'yes' if ok else 'NO'}"
            )
        agreeing = sum(ok for *_, ok in checks)
        emit(
            "ingest_metrics_agree_with_mtail",
            agreeing,
            f"checks of {len(checks)} where ours, mtail and the generator agree",
            f"all {len(checks)}",
            agreeing == len(checks),
        )
    return path, truth


def figure_scaling(
    workdir: Path, base: Path, base_lines: int, skip_lines: int, sizes: list[tuple[int, int]]
) -> None:
    """Throughput at 1x/10x/100x: ``sizes`` is [(multiple of base, repeats)]."""
    rates = {}
    for multiple, repeats in sizes:
        lines = base_lines * multiple - (multiple - 1) * skip_lines
        if multiple == 1:
            path = base
        else:
            path = workdir / f"sglang-x{multiple}.log"
            note(f"writing a {lines:,}-line log ({multiple} x the base) ...")
            repeat_log(base, path, multiple, skip_lines)
        seconds = []
        for _ in range(repeats):
            run = ingest(path, lines)
            if run.reader.stats.lines != lines:
                note(f"  WARNING: read {run.reader.stats.lines:,} lines of {lines:,}")
            seconds.append(run.seconds)
        rates[multiple] = lines / median(seconds)
        note(f"  {lines:,} lines: {rates[multiple]:,.0f} lines/s (median of {repeats})")
        if path != base:
            path.unlink()
    first = min(rates)
    for multiple, rate in sorted(rates.items()):
        slowdown = rates[first] / rate
        emit(
            f"ingest_scaling_{base_lines * multiple // 1000}k_lines",
            rate,
            "lines/s",
            f"linear: lines/s within 1.5x of the {base_lines * first // 1000}k-line run",
            slowdown <= 1.5,
            peer=f"ours at {base_lines * first // 1000}k lines",
            peer_value=rates[first],
            ratio=rate / rates[first],
        )


def main(quick: bool = False) -> None:
    with tempfile.TemporaryDirectory(prefix="sentinel-bench-ingest-") as tmp:
        workdir = Path(tmp)
        lines = 200_000 if quick else 1_000_000
        figure_throughput(workdir, lines, 2 if quick else 3)
        # Scaling from a 100k-line base: 100k, 1M, 10M lines.
        base_lines = 10_000 if quick else 100_000
        base, _ = make_logs(workdir, base_lines)
        startup = startup_lines(base)
        sizes = [(1, 5), (10, 3), (100, 1)]
        figure_scaling(workdir, base, base_lines, startup, sizes)
