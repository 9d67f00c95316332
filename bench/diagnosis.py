"""Figure 7: `sglang-sentinel classify` as the log grows, and on garbage.

Logs of about 10 MB, 100 MB and 1 GB: the generated SGLang 0.5.9 serving log
(bench/loggen.py; the 1 GB one is the 100 MB one's serving part repeated) ending in the
real incident log's crash, and 10 MB of random bytes. For each, `classify --json FILE`
runs in a process of its own (bench/classify_once.py: seconds without interpreter start-up,
peak RSS of the process), with this checkout's code and with the previous code
(bench/previous.py), which read the whole file into memory: it is not run on the 1 GB file
(it would need about 10 GB). mtail (`--one_shot`, bench/ingest.py) reads the 1 GB file in
the same run: the issue asks classify to be at least 3x its ingestion speed.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from bench.common import REPO, emit, note, peer_binary
from bench.ingest import run_mtail
from bench.loggen import repeat_log, startup_lines, write_log
from bench.previous import export_previous, run_module

INCIDENT_LOG = REPO / "tests" / "golden" / "sglang-0.5.9-pool-init-oom-incident.log"
MB = 1_000_000
TARGET_PEAK_MB = 150.0
TARGET_MTAIL_RATIO = 3.0
TARGET_GARBAGE_RATIO = 5.0  # random bytes: at most this many times the cost per byte


def make_logs(workdir: Path, quick: bool) -> dict[str, tuple[Path, int]]:
    """{name: (path, lines)}; lines counted as the tools count them."""
    base_lines = 50_000 if quick else 500_000  # about 100 MB at 206 bytes a line
    base = workdir / "base.log"
    write_log(base, base_lines)
    startup = startup_lines(base)
    crash = INCIDENT_LOG.read_bytes()
    logs = {}
    sizes = (("10MB", 1, 50_000), ("100MB", 1, None), ("1GB", 10, None))
    for name, times, cut in sizes[:2] if quick else sizes:
        path = workdir / f"{name}.log"
        if cut is not None:
            with open(base, "rb") as src, open(path, "wb") as out:
                out.writelines(line for _, line in zip(range(cut), src, strict=False))
            lines = cut
        else:
            repeat_log(base, path, times, startup)
            lines = base_lines * times - (times - 1) * startup
        with open(path, "ab") as out:
            out.write(crash)
        logs[name] = (path, lines + crash.count(b"\n"))
    garbage = workdir / "random-10MB.log"
    garbage.write_bytes(os.urandom(10 * MB))
    logs["random 10MB"] = (garbage, garbage.read_bytes().count(b"\n"))
    base.unlink()
    return logs


def main(quick: bool = False) -> None:
    with tempfile.TemporaryDirectory(prefix="sentinel-bench-diagnosis-") as tmp_name:
        tmp = Path(tmp_name)
        note("writing the logs ...")
        logs = make_logs(tmp, quick)
        previous = export_previous(tmp / "previous")
        per_byte = {}
        for name, (path, lines) in logs.items():
            size = path.stat().st_size
            ours = run_module("bench.classify_once", [str(path)], None, timeout=3600)
            per_byte[name] = ours["seconds"] / size
            note(
                f"  {name} ({size / MB:,.0f} MB, {lines:,} lines), ours: {ours['seconds']:.2f} s "
                f"({lines / ours['seconds']:,.0f} lines/s), peak RSS {ours['peak_rss_mb']:.0f} MB, "
                f"{ours['failure_class']} at line {ours['root_cause_line_number']}"
            )
            old = None
            if previous is not None and size < 300 * MB:
                old = run_module("bench.classify_once", [str(path)], previous, timeout=3600)
                note(
                    f"  {name}, previous: {old['seconds']:.2f} s, peak RSS "
                    f"{old['peak_rss_mb']:.0f} MB, {old['failure_class']} at line "
                    f"{old['root_cause_line_number']}"
                )
            label = name.replace(" ", "_").lower()
            emit(
                f"classify_{label}_seconds",
                ours["seconds"],
                "s",
                "none (context: read once, at ingestion speed)",
                True,
                peer="previous code (whole file in memory)" if old else None,
                peer_value=old["seconds"] if old else None,
                ratio=ours["seconds"] / old["seconds"] if old else None,
            )
            emit(
                f"classify_{label}_peak_rss",
                ours["peak_rss_mb"],
                "MB",
                f"< {TARGET_PEAK_MB:g} MB",
                ours["peak_rss_mb"] < TARGET_PEAK_MB,
                peer="previous code (whole file in memory)" if old else None,
                peer_value=old["peak_rss_mb"] if old else None,
                ratio=ours["peak_rss_mb"] / old["peak_rss_mb"] if old else None,
            )
            if name == ("100MB" if quick else "1GB") and peer_binary("mtail") is not None:
                mtail = run_mtail(path)
                ours_rate, mtail_rate = lines / ours["seconds"], lines / mtail.seconds
                note(
                    f"  {name}, mtail --one_shot: {mtail.seconds:.1f} s ({mtail_rate:,.0f} lines/s)"
                )
                emit(
                    f"classify_{label}_vs_mtail",
                    ours_rate,
                    "lines/s",
                    f">= {TARGET_MTAIL_RATIO:g}x mtail's lines/s",
                    ours_rate >= TARGET_MTAIL_RATIO * mtail_rate,
                    peer="mtail 3.0.0~rc50 --one_shot",
                    peer_value=mtail_rate,
                    ratio=ours_rate / mtail_rate,
                )
            if name != "random 10MB":
                path.unlink()
        garbage_ratio = per_byte["random 10MB"] / per_byte["10MB"]
        emit(
            "classify_random_bytes_cost_per_byte",
            per_byte["random 10MB"] * 1e9,
            "ns per byte",
            f"<= {TARGET_GARBAGE_RATIO:g}x an ordinary log's",
            garbage_ratio <= TARGET_GARBAGE_RATIO,
            peer="ours on the 10 MB SGLang log",
            peer_value=per_byte["10MB"] * 1e9,
            ratio=garbage_ratio,
        )
