"""A stand-in for a ready, idle SGLang 0.5.9 server, for figure 5 (the daemon's footprint).

It prints the startup lines of the project's incident model (bench/loggen.py), starts two
children titled like SGLang's (`sglang::scheduler_TP0`, `sglang::detokenizer`), answers
`/health`, `/server_info` and `/v1/loads` on --host/--port, logging each request as
uvicorn's access log does (and a prefill batch line for each /health, as SGLang's one-token
health generation does), prints "The server is fired up and ready to roll!" and idles.
Standard library only (plus bench.loggen). Everything it starts ends when it ends, and
within LIFETIME_S in any case.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time

from bench.loggen import START, Truth, _startup

LIFETIME_S = 900.0
CHILD = """
import os, sys, time
parent, deadline = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline and os.getppid() == parent:
    time.sleep(0.5)
"""


# What the real SGLang 0.5.9 logs for each /health it answers (measured on the CPU build:
# one line per probe), in the incident model's hybrid format.
HEALTH_PREFILL = (
    "[{stamp} TP0] Prefill batch, #new-seq: 1, #new-token: 1, #cached-token: 0, "
    "full token usage: 0.00, mamba usage: 0.00, #running-req: 0, #queue-req: 0, "
    "input throughput (token/s): 0.50, cuda graph: False"
)


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def serve(host: str, port: int) -> None:
    payloads = {
        "/health": b"",
        "/server_info": json.dumps({"max_total_num_tokens": 373672}).encode(),
        "/v1/loads": json.dumps(
            {"aggregate": {"total_running_reqs": 0, "total_waiting_reqs": 0}}
        ).encode(),
    }

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as uvicorn

        def do_GET(self) -> None:
            body = payloads.get(self.path)
            status = 200 if body is not None else 404
            body = body or b""
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            if self.path == "/health":  # SGLang's one-token health generation
                say(HEALTH_PREFILL.format(stamp=stamp()))
            client = f"{self.client_address[0]}:{self.client_address[1]}"
            say(f'[{stamp()}] INFO:     {client} - "GET {self.path} HTTP/1.1" {status}')

        def log_message(self, *_args) -> None:
            pass

    server = http.server.ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()


def main() -> int:
    parser = argparse.ArgumentParser(prog="sglang.launch_server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    for flag in ("--model-path", "--mem-fraction-static", "--tp-size"):
        parser.add_argument(flag)
    args, _ = parser.parse_known_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    lines = _startup(START, Truth())
    for line in lines[:-1]:  # all but the ready line: that comes once we answer
        say(line)
    for title in ("sglang::scheduler_TP0", "sglang::detokenizer"):
        subprocess.Popen(
            [title, "-c", CHILD, str(os.getpid()), str(LIFETIME_S)], executable=sys.executable
        )
    serve(args.host, args.port)
    say(lines[-1])
    stop.wait(LIFETIME_S)
    return 0


if __name__ == "__main__":
    sys.exit(main())
