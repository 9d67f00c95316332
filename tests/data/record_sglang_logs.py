"""Record real SGLang logs on this CPU machine as test fixtures.

Usage: .venv/bin/python tests/data/record_sglang_logs.py [--version 0.5.9] [--cases serve,...]

Installs SGLang with `ensure_sglang()` (cached), writes tiny models, then launches the real server
once per case with stdout and stderr merged into `tests/data/sglang-<version>-cpu/<case>.log`, and
updates `labels.jsonl` there (rows of re-recorded cases are replaced, others kept).
Every server binds 127.0.0.1 and runs in its own process group, which is killed at the end.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import psutil

from exporter.sglang_cpu.install import SGLangRuntime, default_cache_dir, ensure_sglang
from exporter.sglang_cpu.models import write_tiny_model

DATA_DIR = Path(__file__).resolve().parent
READY_LINE = "The server is fired up and ready to roll!"
READY_TIMEOUT_S = 300
EXIT_TIMEOUT_S = 400
HANG_OBSERVE_S = 60
# 120 warmup probes of 1 s sleep + 5 s timeout each, plus startup.
SILENT_PORT_TIMEOUT_S = 900
BIND_ERROR = r"\[Errno 98\]"
# A traceback's last line: the exception that the case is about, when no sharper pattern applies.
EXCEPTION_LINE = r"^[\w.]+(Error|Exception): "


@dataclass
class Context:
    runtime: SGLangRuntime
    tiny: Path
    large: Path
    work: Path
    env: dict[str, str]


@dataclass
class Outcome:
    flags: list[str]
    exit_status: int | None
    notes: str
    root_cause_line: str | None


class Launch:
    """One SGLang launcher in its own process group, its merged output going to a log file."""

    def __init__(self, ctx: Context, flags: list[str], log_path: Path, env: dict[str, str]):
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [*ctx.runtime.base_command, *flags],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=ctx.work,
            start_new_session=True,
        )

    def elapsed(self) -> float:
        return round(time.monotonic() - self.started, 1)

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, needle: str, timeout: float) -> float | None:
        """Seconds until `needle` is in the log; None if the launcher exited or time ran out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.text():
                return self.elapsed()
            if self.proc.poll() is not None:
                return None
            time.sleep(0.2)
        return None

    def wait_exit(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def signal_group(self, sig: int) -> None:
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def close(self) -> None:
        # The group may outlive the launcher (children it did not reap): kill all of it.
        self.signal_group(signal.SIGKILL)
        self.wait_exit(30)
        self._log.close()


@contextmanager
def launched(ctx: Context, flags: list[str], log_path: Path, env: dict[str, str] | None = None):
    launch = Launch(ctx, flags, log_path, env or ctx.env)
    try:
        yield launch
    finally:
        launch.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_flags(model: Path, port: int, *, device: bool = True) -> list[str]:
    device_flags = ["--device", "cpu"] if device else []
    return [
        *("--model-path", str(model)),
        *device_flags,
        *("--load-format", "dummy"),
        *("--host", "127.0.0.1", "--port", str(port)),
        # On a CPU the KV pool is sized from host memory (about 18 GB) unless capped.
        *("--max-total-tokens", "4096"),
    ]


def generate(port: int, prompt: str, timeout: float = 60) -> str:
    body = {"text": prompt, "sampling_params": {"max_new_tokens": 4, "temperature": 0}}
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/generate",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return f"HTTP {response.status}"


def find_line(text: str, pattern: str) -> str | None:
    regex = re.compile(pattern)
    return next((line.strip() for line in text.splitlines() if regex.search(line)), None)


def last_line(text: str) -> str | None:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else None


def describe_exit(launch: Launch, status: int | None) -> str:
    if status is None:
        return f"still running after {launch.elapsed()} s"
    return f"launcher exit status {status} after {launch.elapsed()} s"


def stop(launch: Launch) -> str:
    """SIGTERM the process group as a supervisor would; SIGKILL it if it does not exit."""
    launch.signal_group(signal.SIGTERM)
    status = launch.wait_exit(30)
    if status is not None:
        return f"SIGTERM to the process group: {describe_exit(launch, status)}"
    launch.signal_group(signal.SIGKILL)
    status = launch.wait_exit(30)
    return (
        f"SIGTERM to the process group: no exit in 30 s; SIGKILL: {describe_exit(launch, status)}"
    )


# --- cases ------------------------------------------------------------------------------------


def run_until_exit(
    ctx: Context,
    flags: list[str],
    log_path: Path,
    pattern: str,
    env: dict[str, str] | None = None,
    timeout: float = EXIT_TIMEOUT_S,
) -> Outcome:
    """A case that fails on its own: wait for the launcher to exit, label the first match."""
    with launched(ctx, flags, log_path, env) as launch:
        status = launch.wait_exit(timeout)
        notes = describe_exit(launch, status)
    return Outcome(flags, status, notes, find_line(log_path.read_text(), pattern))


def case_serve(ctx: Context, log_path: Path) -> Outcome:
    port = free_port()
    flags = [*server_flags(ctx.tiny, port), "--decode-log-interval", "1"]
    with launched(ctx, flags, log_path) as launch:
        ready = launch.wait_for(READY_LINE, READY_TIMEOUT_S)
        if ready is None:
            raise RuntimeError(f"server did not become ready, see {log_path}")
        prompts = ["Hello, how are you?", "The quick brown fox", "Memory pools hold", "SGLang"]
        answers = [generate(port, prompt) for prompt in prompts]
        time.sleep(1)
        stop_at = launch.elapsed()
        launch.signal_group(signal.SIGTERM)
        status = launch.wait_exit(60)
        notes = (
            f"ready after {ready} s; {len(answers)} POST /generate ({', '.join(answers)}); "
            f"SIGTERM to the process group at {stop_at} s; {describe_exit(launch, status)}"
        )
    return Outcome(flags, status, notes, None)


def case_pool_init_oom(ctx: Context, log_path: Path) -> Outcome:
    flags = [*server_flags(ctx.large, free_port()), "--mem-fraction-static", "0.005"]
    # 0.5.9 raises "Not enough memory"; 0.5.23 names the weights.
    pattern = r"^\w+Error: (Not enough memory|Loaded weights leave no GPU memory)"
    return run_until_exit(ctx, flags, log_path, pattern)


def case_unrecognized(ctx: Context, log_path: Path) -> Outcome:
    flags = [*server_flags(ctx.tiny, free_port()), "--sentinel-no-such-flag"]
    return run_until_exit(ctx, flags, log_path, r"error: unrecognized arguments")


def case_bad_value(ctx: Context, log_path: Path) -> Outcome:
    # The tiny model's max_position_embeddings is 2048.
    flags = [*server_flags(ctx.tiny, free_port()), "--context-length", "8192"]
    return run_until_exit(ctx, flags, log_path, EXCEPTION_LINE)


def case_model_load(ctx: Context, log_path: Path) -> Outcome:
    flags = server_flags(ctx.work / "no-such-model", free_port())
    # The traceback chains a HFValidationError (the path is no valid repo id) into this OSError.
    return run_until_exit(ctx, flags, log_path, r"^OSError: ")


def case_unsupported(ctx: Context, log_path: Path) -> Outcome:
    model = ctx.work / "unknown-model-type"
    shutil.copytree(ctx.tiny, model, dirs_exist_ok=True)
    config = json.loads((model / "config.json").read_text())
    config.update(model_type="sentinel_unknown", architectures=["SentinelUnknownForCausalLM"])
    (model / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return run_until_exit(ctx, server_flags(model, free_port()), log_path, r"model type")


def case_dependency(ctx: Context, log_path: Path) -> Outcome:
    env = {**ctx.env}
    # The machine's own library path, without the private libcuda directory.
    env.pop("LD_LIBRARY_PATH")
    if "LD_LIBRARY_PATH" in os.environ:
        env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
    flags = server_flags(ctx.tiny, free_port())
    return run_until_exit(ctx, flags, log_path, r"ImportError: libcuda\.so\.1", env)


def case_no_accelerator(ctx: Context, log_path: Path) -> Outcome:
    # With SGLANG_USE_CPU_ENGINE=1 SGLang picks the CPU by itself; without it, no device is found.
    env = {key: value for key, value in ctx.env.items() if key != "SGLANG_USE_CPU_ENGINE"}
    flags = server_flags(ctx.tiny, free_port(), device=False)
    outcome = run_until_exit(ctx, flags, log_path, r"^RuntimeError: No accelerator", env)
    outcome.notes += "; SGLANG_USE_CPU_ENGINE unset (libcuda still on LD_LIBRARY_PATH)"
    return outcome


def case_port_in_use(ctx: Context, log_path: Path) -> Outcome:
    # The usual squatter is another HTTP server: it answers SGLang's warmup with 404s.
    with http_listener() as port:
        outcome = run_until_exit(ctx, server_flags(ctx.tiny, port), log_path, BIND_ERROR)
    outcome.notes += "; the port was held by an HTTP server answering 404" + _bind_notes(log_path)
    return outcome


def case_port_in_use_silent(ctx: Context, log_path: Path) -> Outcome:
    # A listener that never accepts: every warmup probe waits for its 5 s timeout.
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        outcome = run_until_exit(
            ctx, server_flags(ctx.tiny, port), log_path, BIND_ERROR, timeout=SILENT_PORT_TIMEOUT_S
        )
    outcome.notes += "; the port was held by a plain socket that never accepts" + _bind_notes(
        log_path
    )
    return outcome


def _bind_notes(log_path: Path) -> str:
    text = log_path.read_text()
    bind_at = _first_timestamp(text, BIND_ERROR)
    return f"; bind error logged at {bind_at}; last line: {last_line(text)}"


class _NotFoundHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_error(404)

    do_POST = do_GET

    def log_message(self, format: str, *args: object) -> None:
        """Silence the per-request log."""


@contextmanager
def http_listener() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotFoundHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def case_hang_nnodes(ctx: Context, log_path: Path) -> Outcome:
    flags = [
        *server_flags(ctx.tiny, free_port()),
        # Two nodes need a TP size divisible by two; node 1 never comes.
        *("--tp-size", "2", "--nnodes", "2", "--node-rank", "0"),
        *("--dist-init-addr", f"127.0.0.1:{free_port()}"),
    ]
    # The CPU engine refuses more TP ranks than NUMA nodes unless each rank gets its own cores.
    cores = sorted(os.sched_getaffinity(0))
    env = {**ctx.env, "SGLANG_CPU_OMP_THREADS_BIND": f"{cores[0]}|{cores[-1]}"}
    with launched(ctx, flags, log_path, env) as launch:
        status = launch.wait_exit(HANG_OBSERVE_S)
        before_stop = last_line(launch.text())
        notes = f"{describe_exit(launch, status)} on its own; last line then: {before_stop}"
        if status is None:
            notes += f"; then, by the recorder: {stop(launch)}"
    # Where it hangs matters more than the last line; the notes keep that one.
    hung_at = find_line(log_path.read_text(), r"Init (torch distributed|parallel) begin")
    hung_at = hung_at or before_stop
    return Outcome(flags, launch.proc.returncode, notes, hung_at)


def case_scheduler_sigkill(ctx: Context, log_path: Path) -> Outcome:
    port = free_port()
    flags = server_flags(ctx.tiny, port)
    with launched(ctx, flags, log_path) as launch:
        ready = launch.wait_for(READY_LINE, READY_TIMEOUT_S)
        if ready is None:
            raise RuntimeError(f"server did not become ready, see {log_path}")
        generate(port, "Hello")
        scheduler = _own_scheduler(launch.proc.pid)
        title = " ".join(scheduler.cmdline()).strip()  # setproctitle pads with spaces
        killed_at = launch.elapsed()
        scheduler.send_signal(signal.SIGKILL)
        status = launch.wait_exit(60)
        notes = (
            f"ready after {ready} s; one POST /generate; SIGKILL to {title!r} (found in the "
            f"launcher's own tree) at {killed_at} s; {describe_exit(launch, status)}"
        )
        if status is None:
            notes += f"; a POST /generate then: {_try_generate(port)}; {stop(launch)}"
    # 0.5.23's subprocess watchdog reports the dead child; 0.5.9's log has no trace of it.
    reported = find_line(log_path.read_text(), r"Subprocess \S+ \(pid=\d+\) crashed")
    return Outcome(flags, launch.proc.returncode, notes, reported)


def _own_scheduler(launcher_pid: int) -> psutil.Process:
    children = psutil.Process(launcher_pid).children(recursive=True)
    for child in children:
        if child.name().startswith("sglang::scheduler"):
            return child
    names = [f"{child.pid}:{child.name()}" for child in children]
    raise RuntimeError(f"no sglang::scheduler under launcher {launcher_pid}: {names}")


def _try_generate(port: int) -> str:
    try:
        return generate(port, "Hello", timeout=20)
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"


def _first_timestamp(text: str, pattern: str) -> str | None:
    line = find_line(text, pattern)
    match = re.match(r"\[([^\]]+)\]", line or "")
    return match[1] if match else None


# name -> (recorder, phase, failure class)
CASES: dict[str, tuple[Callable[[Context, Path], Outcome], str, str]] = {
    "serve": (case_serve, "runtime", "none"),
    "pool_init_oom": (case_pool_init_oom, "startup", "pool_init_oom"),
    "invalid_argument_unrecognized": (case_unrecognized, "startup", "invalid_argument"),
    "invalid_argument_value": (case_bad_value, "startup", "invalid_argument"),
    "model_load_error": (case_model_load, "startup", "model_load_error"),
    "unsupported_model": (case_unsupported, "startup", "unsupported_model"),
    "dependency_error": (case_dependency, "startup", "dependency_error"),
    "no_accelerator": (case_no_accelerator, "startup", "other"),
    "port_in_use": (case_port_in_use, "startup", "port_in_use"),
    "port_in_use_silent": (case_port_in_use_silent, "startup", "port_in_use"),
    "hang_nnodes": (case_hang_nnodes, "startup", "hang_timeout"),
    "scheduler_sigkill": (case_scheduler_sigkill, "runtime", "killed_by_signal"),
}


# --- driver -----------------------------------------------------------------------------------


def make_context(version: str) -> Context:
    runtime = ensure_sglang(version)
    home = default_cache_dir() / f"sglang-{version}"
    work = home / "recording"
    shutil.rmtree(work, ignore_errors=True)
    (work / "tmp").mkdir(parents=True)
    env = {
        **os.environ,
        **runtime.env,
        # Unbuffered, so stdout lines are not lost when the launcher SIGKILLs itself.
        "PYTHONUNBUFFERED": "1",
        # SGLang leaves ZMQ socket files in the temp directory: keep them in ours.
        "TMPDIR": str(work / "tmp"),
    }
    return Context(
        runtime=runtime,
        tiny=write_tiny_model(home / "models" / "qwen2-tiny", runtime),
        large=write_tiny_model(home / "models" / "qwen2-large", runtime, size="large"),
        work=work,
        env=env,
    )


def label(version: str, name: str, phase: str, failure_class: str, outcome: Outcome) -> dict:
    return {
        "file": f"{name}.log",
        "sglang_version": version,
        "phase": phase,
        "failure_class": failure_class,
        "root_cause_line": outcome.root_cause_line,
        "exit_status": outcome.exit_status,
        "notes": outcome.notes,
        "command": outcome.flags,
    }


def write_labels(out: Path, rows: dict[str, dict]) -> None:
    if not rows:
        return
    path = out / "labels.jsonl"
    existing = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    merged = {row["file"]: row for row in existing} | {row["file"]: row for row in rows.values()}
    order = [f"{name}.log" for name in CASES]
    ordered = sorted(merged.values(), key=lambda row: order.index(row["file"]))
    path.write_text("".join(json.dumps(row) + "\n" for row in ordered))


def record(version: str, names: list[str], out: Path) -> Iterator[dict]:
    ctx = make_context(version)
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        recorder, phase, failure_class = CASES[name]
        print(f"[record] {name} ...", flush=True)
        outcome = recorder(ctx, out / f"{name}.log")
        row = label(version, name, phase, failure_class, outcome)
        print(f"[record] {name}: {json.dumps(row)}", flush=True)
        yield row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default="0.5.9")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated case names")
    args = parser.parse_args()
    names = args.cases.split(",")
    unknown = sorted(set(names) - set(CASES))
    if unknown:
        parser.error(f"unknown cases {unknown}; known: {list(CASES)}")
    out = DATA_DIR / f"sglang-{args.version}-cpu"
    rows: dict[str, dict] = {}
    try:
        for row in record(args.version, names, out):
            rows[row["file"]] = row
    finally:
        write_labels(out, rows)


if __name__ == "__main__":
    main()
