"""Figure 3: crash-to-decision latency.

The real Daemon runs in a thread of this process with a config whose launcher is
bench/crash_launcher.py: it prints the real incident log
(tests/golden/sglang-0.5.9-pool-init-oom-incident.log), writes the wall time and SIGKILLs
itself, as SGLang does. The config has a ladder of RUNS profiles, so one daemon sees RUNS
crashes, each followed by a classification (pool_init_oom), an end record in the history
and a decision (fall back to the next profile; at the end of the ladder the automatic
remedy or giving up).

Latency: from the launcher's timestamp to the moment the decision is applied (state
BACKOFF or GAVE_UP, after the history's end record is written and fsynced). The backoff
itself is not counted; the GPU-release wait is measured and reported (no NVML here: it
returns at once). The daemon is not modified: a few of its methods are wrapped in this
process to time the steps of each end (detection by the loop, stopping what is left,
stopping the tailer, the GPU wait, classification, the decision, the history write).

As the attempt ages (``figure_ages``): each attempt first prints a served log of 1k to 10M
lines and waits until the daemon has read it, then crashes the same way; each age runs in a
process of its own, with this checkout's code and with the previous one (bench/previous.py),
and reports the latency and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from bench.common import REPO, emit, free_port, note, percentile, write_daemon_config
from bench.loggen import repeat_log, startup_lines, write_log
from bench.previous import export_previous, run_module
from exporter import app as app_module
from exporter.attempt.states import ServerState
from exporter.config import load_config
from exporter.logs.tailer import LogTailer
from exporter.supervisor import daemon as daemon_module
from exporter.supervisor.daemon import Daemon
from exporter.supervisor.processes import AttemptProcesses

try:  # the daemon split into steps; the previous code (bench/previous.py) kept them inside
    from exporter.supervisor import conclude as conclude_module
    from exporter.supervisor.watch import TICK_S
except ImportError:
    conclude_module = None
    from exporter.supervisor.daemon import TICK_S

INCIDENT_LOG = REPO / "tests" / "golden" / "sglang-0.5.9-pool-init-oom-incident.log"
RUNS = 30
TARGET_MS = 100.0


def write_config(tmp: Path, runs: int, age_log: Path | None = None) -> Path:
    profiles = []
    for i in range(runs):
        profiles += [
            "[[profiles]]",
            f'name = "p{i:02d}"',
            f"set = {{ mem-fraction-static = {0.50 + i / 100:.2f} }}",
        ]
    return write_daemon_config(
        tmp / "crash.toml",
        "bench.crash_launcher",
        args=["mem-fraction-static = 0.85"],
        env=[
            f"BENCH_CRASH_LOG = {json.dumps(str(INCIDENT_LOG))}",
            f"BENCH_EXIT_TIMES = {json.dumps(str(tmp / 'exits.txt'))}",
            *(
                [
                    f"BENCH_AGE_LOG = {json.dumps(str(age_log))}",
                    f"BENCH_CAUGHT_UP = {json.dumps(str(tmp / 'caught-up'))}",
                ]
                if age_log
                else []
            ),
        ],
        sections=[
            *profiles,
            "[policy]",
            "backoff_base_s = 0.05",
            "backoff_cap_s = 0.05",
            f"max_attempts = {runs + 20}",
            "window_s = 3600.0",
            "stop_grace_s = 5.0",
            # An old attempt prints its past first and waits until the daemon has read it.
            f"startup_timeout_s = {3600.0 if age_log else 60.0}",
            "[metrics]",
            f'listen = "127.0.0.1:{free_port()}"',
        ],
    )


class Timeline:
    """Wraps functions to record (step, start, end) in wall time, in call order."""

    def __init__(self) -> None:
        self.marks: list[tuple[str, float, float, object]] = []
        self._undo: list[tuple[object, str, object]] = []

    def wrap(self, owner: object, name: str, step: str, keep=None) -> None:
        original = getattr(owner, name)
        marks = self.marks

        def wrapper(*args, **kwargs):
            started = time.time()
            try:
                return original(*args, **kwargs)
            finally:
                marks.append((step, started, time.time(), keep(args) if keep else None))

        self._undo.append((owner, name, original))
        setattr(owner, name, wrapper)

    def wrap_first(self, owners: Sequence[object], names: Sequence[str], step: str) -> None:
        """Wrap the first of ``names`` found on the first owner that has one."""
        for owner in owners:
            for name in names:
                if owner is not None and hasattr(owner, name):
                    self.wrap(owner, name, step)
                    return
        raise AttributeError(f"no {' or '.join(names)} to time as {step!r}")

    def restore(self) -> None:
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)
        self._undo.clear()


def _signal_caught_up(daemon: Daemon, lines: int, marker: Path, stop: threading.Event) -> None:
    """Tell each launcher, once the daemon has read the past it printed, to crash."""
    while not stop.wait(0.005):
        attempt = daemon.attempt
        if attempt is not None and attempt.log.reader.stats.lines >= lines:
            Path(f"{marker}.{attempt.processes.leader.pid}").touch()


def run(
    runs: int, timeout_s: float = 600.0, age_log: Path | None = None, age_lines: int = 0
) -> tuple[list[float], dict[str, list[float]], int]:
    """Latencies (s) per crash, step durations (s) per step, and the number of crashes.
    ``age_log``: each attempt prints it (``age_lines`` lines) before it crashes."""
    with tempfile.TemporaryDirectory(prefix="sentinel-bench-crash-") as tmp_name:
        tmp = Path(tmp_name)
        config = load_config(write_config(tmp, runs, age_log))
        timeline = Timeline()
        daemon = app_module.build_daemon(config)
        # Instance and class wrappers only in this process; the daemon's code is untouched.
        timeline.wrap(daemon, "_end", "end_called")
        timeline.wrap(AttemptProcesses, "stop", "processes.stop")
        timeline.wrap(LogTailer, "stop", "tailer.stop")
        # Each step where this code has it (the steps' modules), else where the previous
        # code had it (the daemon's methods; the whole file re-read before the excerpt).
        steps = (conclude_module, daemon, daemon_module)
        gpu_release = ("wait_gpus_released", "_wait_gpus_released")
        timeline.wrap_first(steps, gpu_release, "gpu_release_wait")
        timeline.wrap_first(steps, ("classified", "_classify", "_classify_file"), "classify")
        timeline.wrap_first(steps, ("_decision", "_decide"), "decide")
        timeline.wrap(daemon, "_record", "history_write", keep=lambda a: a[0].get("type"))
        timeline.wrap(daemon, "_apply", "decision_applied")
        # As `run` does before its loop (app.settle); the previous code had no such step.
        if hasattr(app_module, "settle"):
            app_module.settle()
        thread = threading.Thread(target=daemon.run, name="bench-daemon", daemon=True)
        logging.disable(logging.WARNING)  # one diagnosis per crash on stderr: not wanted here
        stop = threading.Event()
        watcher = threading.Thread(
            target=_signal_caught_up, args=(daemon, age_lines, tmp / "caught-up", stop), daemon=True
        )
        try:
            thread.start()
            if age_log:
                watcher.start()
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and daemon.state is not ServerState.GAVE_UP:
                time.sleep(0.1)
            daemon.request_stop()
            thread.join(60)
        finally:
            stop.set()
            timeline.restore()
            logging.disable(logging.NOTSET)
        exits = [float(line.split()[1]) for line in (tmp / "exits.txt").read_text().splitlines()]
    # One end per crash, in order. A wrapper records its mark when the call returns, so
    # _end's own mark comes after those of the steps inside it.
    ends: list[list[tuple[str, float, float, object]]] = []
    pending: list[tuple[str, float, float, object]] = []
    for mark in timeline.marks:
        if mark[0] == "end_called":
            ends.append([mark, *(m for m in pending if m[1] >= mark[1])])
            pending = []
        else:
            pending.append(mark)
    latencies: list[float] = []
    steps: dict[str, list[float]] = defaultdict(list)
    # A crash the daemon never ended (none so far) would leave the lists of unequal length.
    for exit_time, marks in zip(exits, ends, strict=False):
        by_step = {}
        for step, started, finished, kept in marks:
            if step == "history_write" and kept != "end":
                continue
            by_step[step] = (started, finished)
        if "decision_applied" not in by_step:
            continue
        latencies.append(by_step["decision_applied"][1] - exit_time)
        steps["detection (exit -> loop notices)"].append(by_step["end_called"][0] - exit_time)
        for step in (
            "processes.stop",
            "tailer.stop",
            "gpu_release_wait",
            "classify",
            "decide",
            "history_write",
        ):
            if step in by_step:
                steps[step].append(by_step[step][1] - by_step[step][0])
    return latencies, steps, len(exits)


def figure_crash(quick: bool = False) -> None:
    runs = 8 if quick else RUNS
    latencies, steps, crashes = run(runs)
    ms = [s * 1000 for s in latencies]
    note(f"{crashes} crashes, {len(ms)} decisions timed; TICK_S = {TICK_S * 1000:.0f} ms")
    for step, values in steps.items():
        v = [s * 1000 for s in values]
        note(
            f"  {step}: p50 {percentile(v, 50):.1f} ms, p99 {percentile(v, 99):.1f} ms, "
            f"max {max(v):.1f} ms"
        )
    p50, p99 = percentile(ms, 50), percentile(ms, 99)
    note(f"crash to decision: p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {max(ms):.1f} ms")
    after = [
        (total - seen) * 1000
        for total, seen in zip(latencies, steps["detection (exit -> loop notices)"], strict=True)
    ]
    emit("crash_to_decision_p50", p50, "ms", "none (context for p99)", True)
    emit("crash_to_decision_p99", p99, "ms", f"< {TARGET_MS:g} ms", p99 < TARGET_MS)
    emit(
        "crash_to_decision_after_detection_p99",
        percentile(after, 99),
        "ms",
        "none (context: the part after the loop noticed the exit)",
        True,
    )


# Attempt ages (lines the server logged before it crashed) and crashes timed at each.
AGES = ((1_000, 10), (100_000, 6), (1_000_000, 3), (10_000_000, 2))
QUICK_AGES = ((1_000, 4), (100_000, 3))
AGE_TARGET_RSS_MB = 64.0


def age_logs(workdir: Path, ages: Sequence[int]) -> dict[int, tuple[Path, int]]:
    """A served log per age: the generated 0.5.9 log (bench/loggen.py), its serving part
    repeated for the long ones. {age: (path, exact lines)}."""
    base_lines = 100_000
    base = workdir / "served-100k.log"
    write_log(base, base_lines)
    startup = startup_lines(base)
    logs = {}
    for age in ages:
        path = workdir / f"served-{age}.log"
        if age <= base_lines:
            with open(base, "rb") as src, open(path, "wb") as out:
                out.writelines(line for _, line in zip(range(age), src, strict=False))
            logs[age] = (path, age)
        else:
            times = age // base_lines
            repeat_log(base, path, times, startup)
            logs[age] = (path, base_lines * times - (times - 1) * startup)
    return logs


def figure_ages(quick: bool = False) -> None:
    """Crash to decision, and the daemon's peak RSS, as the attempt ages: ours and the
    previous code (which re-read the log at the end), each in a process of its own."""
    ages = QUICK_AGES if quick else AGES
    with tempfile.TemporaryDirectory(prefix="sentinel-bench-ages-") as tmp_name:
        tmp = Path(tmp_name)
        note("writing the served logs ...")
        logs = age_logs(tmp, [age for age, _ in ages])
        previous = export_previous(tmp / "previous")
        for age, runs in ages:
            path, lines = logs[age]
            args = ["--age-log", str(path), "--age-lines", str(lines), "--runs", str(runs)]
            ours = _age_run("ours", lines, run_module("bench.crash", args, None, timeout=3600))
            theirs = None
            if previous is not None:
                try:
                    got = run_module("bench.crash", args, previous, timeout=3600)
                    theirs = _age_run("previous", lines, got)
                except RuntimeError as error:
                    # This benchmark imports today's modules; once they moved, the previous
                    # tree cannot run it any more (bench/README.md keeps its last figures).
                    note(f"  the previous code could not run this benchmark: {str(error)[-300:]}")
                    previous = None
            _emit_age(age, ours, theirs)
            path.unlink()


def _age_run(label: str, lines: int, got: dict) -> dict:
    note(
        f"  {lines:,} lines, {label}: crash to decision p50 {got['p50_ms']:.1f} ms, "
        f"p99 {got['p99_ms']:.1f} ms, classify p99 {got['classify_p99_ms']:.1f} ms, "
        f"peak RSS {got['peak_rss_mb']:.0f} MB ({got['decisions']} crashes)"
    )
    return got


def _emit_age(age: int, ours: dict, theirs: dict | None) -> None:
    peer = "previous code (re-read the log)" if theirs else None
    for name, key, unit, target in (
        ("crash_to_decision_p99", "p99_ms", "ms", TARGET_MS),
        ("daemon_peak_rss", "peak_rss_mb", "MB", AGE_TARGET_RSS_MB),
    ):
        emit(
            f"{name}_at_{age // 1000}k_lines",
            ours[key],
            unit,
            f"< {target:g} {unit}",
            ours[key] < target,
            peer=peer,
            peer_value=theirs[key] if theirs else None,
            ratio=ours[key] / theirs[key] if theirs else None,
        )


def _one_age(argv: Sequence[str]) -> None:
    """One daemon, one age: a JSON line on stdout (run by figure_ages in a subprocess)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--age-log", type=Path, required=True)
    parser.add_argument("--age-lines", type=int, required=True)
    parser.add_argument("--runs", type=int, required=True)
    args = parser.parse_args(argv)
    latencies, steps, _ = run(
        args.runs, timeout_s=3000, age_log=args.age_log, age_lines=args.age_lines
    )
    ms = [s * 1000 for s in latencies]
    classify_ms = [s * 1000 for s in steps.get("classify", [])]
    print(
        json.dumps(
            {
                "decisions": len(ms),
                "p50_ms": percentile(ms, 50),
                "p99_ms": percentile(ms, 99),
                "classify_p99_ms": percentile(classify_ms, 99) if classify_ms else 0.0,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
        )
    )


if __name__ == "__main__":
    _one_age(sys.argv[1:])
