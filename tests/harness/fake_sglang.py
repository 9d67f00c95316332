"""A stand-in SGLang launcher for tests/supervisor/test_reliability.py: prints log lines, optionally
answers SGLang's HTTP probes, forks children titled like SGLang's, and exits when told.

Unlike tests/harness/scripted.py it takes SGLang's --host, --port and --api-key (the
daemon checks a config's flags against the program's --help before a launch). It needs
the standard library only. Everything it starts lives at most LIFETIME_S, so even a leak
found by a failing test ends by itself.

With FAKE_SGLANG_REGISTRY set, it appends ``pid start_ticks`` of itself to that file at
start: the tests find every launcher a daemon started, recorded in the history or not.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

LIFETIME_S = 300.0
READY_LINE = "[2026-01-01 10:00:05] The server is fired up and ready to roll!"
HEALTH_PREFILL = (
    "[{stamp}] Prefill batch, #new-seq: 1, #new-token: 1, #cached-token: 0, token usage: 0.00, "
    "#running-req: 0, #queue-req: 0, input throughput (token/s): 0.50, cuda graph: False"
)

CHILD = """
import signal, sys, time
if sys.argv[1] == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
deadline = time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    time.sleep(0.05)
"""


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def start_ticks() -> int:
    """This process's start in clock ticks since boot (its identity in the daemon), with
    the standard library only: an unprivileged test runs this under the system Python."""
    with open("/proc/self/stat", "rb") as handle:
        data = handle.read()
    return int(data[data.rfind(b")") + 2 :].split()[19])


def digest(value: str | None) -> str | None:
    return None if value is None else hashlib.sha256(value.encode()).hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--line", nargs="+", action="extend", default=[])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--serve", action="store_true", help="answer /health and friends")
    parser.add_argument("--health-ok-when", metavar="PATH", help="/health is 503 until PATH exists")
    parser.add_argument(
        "--ready-on-first-health",
        action="store_true",
        help="print the ready line only when the first /health arrives, and answer that one "
        "503 after --first-health-delay (SGLang's warmup racing a probe)",
    )
    parser.add_argument("--first-health-delay", type=float, default=2.0)
    parser.add_argument("--waiting", type=int, default=None, help="/v1/loads: requests waiting")
    parser.add_argument(
        "--access-log", action="store_true", help="log each request as uvicorn does (stderr)"
    )
    parser.add_argument(
        "--health-batch-line",
        action="store_true",
        help="log a prefill batch line for each /health, as SGLang's health generation does",
    )
    parser.add_argument("--child", nargs="+", action="extend", default=[], help="child titles")
    parser.add_argument("--child-ignores-sigterm", action="store_true")
    parser.add_argument(
        "--child-dies-once",
        metavar="PATH",
        help="the last child exits after 1 s unless PATH exists (and creates PATH)",
    )
    parser.add_argument(
        "--exit-when", metavar="PATH", help="exit once PATH exists (and remove it: one exit each)"
    )
    parser.add_argument("--sleep", type=float, default=LIFETIME_S)
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument("--kill-self", action="store_true", help="SIGKILL itself after the lines")
    parser.add_argument("--ignore-sigterm", action="store_true")
    parser.add_argument("--report", metavar="PATH", help="write uid and secret digests here")
    parser.add_argument("--api-key", help="SGLang's flag, taken and not used")
    # A rank of a multi-node group, as SGLang's flags say it; taken and not used.
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--dist-init-addr")
    parser.add_argument(
        "--echo-server-args",
        action="store_true",
        help="log server_args with the api key in clear, as SGLang 0.5.9 does at startup",
    )
    args, _unknown = parser.parse_known_args()

    registry = os.environ.get("FAKE_SGLANG_REGISTRY")
    if registry:
        with open(registry, "a") as handle:
            handle.write(f"{os.getpid()} {start_ticks()}\n")
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.report:
        report = {
            "uid": os.getuid(),
            "gid": os.getgid(),
            "api_key_sha256": digest(args.api_key),
            "hf_token_sha256": digest(os.environ.get("HF_TOKEN")),
        }
        Path(args.report).write_text(json.dumps(report))
    for line in args.line:
        say(line)
    if args.echo_server_args:
        say(
            "[2026-01-01 10:00:00] server_args=ServerArgs(model_path='/models/x', "
            f"api_key={args.api_key!r}, admin_api_key=None, port={args.port})"
        )
    if args.kill_self:
        os.kill(os.getpid(), signal.SIGKILL)

    for index, title in enumerate(args.child):
        life = LIFETIME_S
        if args.child_dies_once and index == len(args.child) - 1:
            marker = Path(args.child_dies_once)
            if not marker.exists():
                marker.touch()
                life = 1.0
        mode = "ignore" if args.child_ignores_sigterm else "default"
        # argv[0] is the title: /proc/PID/cmdline then starts with it, as SGLang's setproctitle
        subprocess.Popen([title, "-c", CHILD, mode, str(life)], executable=sys.executable)

    if args.serve:
        serve(args)

    deadline = time.monotonic() + min(args.sleep, LIFETIME_S)
    while time.monotonic() < deadline:
        if args.exit_when and os.path.exists(args.exit_when):
            with contextlib.suppress(OSError):
                os.unlink(args.exit_when)
            break
        time.sleep(0.05)
    return args.exit_code


def serve(args: argparse.Namespace) -> None:
    first = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/health":
                if args.health_batch_line:
                    say(HEALTH_PREFILL.format(stamp=time.strftime("%Y-%m-%d %H:%M:%S")))
                if args.ready_on_first_health and not first.is_set():
                    first.set()
                    say(READY_LINE)
                    time.sleep(args.first_health_delay)
                    self.answer(503, b"")
                elif args.health_ok_when and not os.path.exists(args.health_ok_when):
                    self.answer(503, b"")
                else:
                    self.answer(200, b"")
            elif self.path == "/server_info":
                self.answer(200, b"{}")
            elif self.path == "/v1/loads":
                waiting = {} if args.waiting is None else {"total_waiting_reqs": args.waiting}
                self.answer(200, json.dumps({"aggregate": waiting}).encode())
            else:
                self.answer(404, b"")

        def answer(self, status: int, body: bytes) -> None:
            if args.access_log:  # uvicorn's access line, as SGLang configures it
                client = f"{self.client_address[0]}:{self.client_address[1]}"
                stamp = time.strftime("%Y-%m-%d %H:%M:%S")
                say(f'[{stamp}] INFO:     {client} - "GET {self.path} HTTP/1.1" {status} OK')
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args) -> None:  # only the lines asked for reach the log
            pass

    server = http.server.ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
