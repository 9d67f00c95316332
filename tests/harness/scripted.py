"""A scripted stand-in launcher for the daemon's own unit tests: it prints the given lines
to stderr (optionally some seconds apart), optionally sleeps, and exits with the given status. The behaviour of SGLang
itself is tested against the real SGLang (tests/e2e); this only drives the state machine."""

from __future__ import annotations

import argparse
import signal
import sys
import time

# SGLang flags the pre-flight tests launch with: accepted (so --help lists them) and ignored.
SIZING_FLAGS = (
    "model-path",
    "device",
    "tp-size",
    "mem-fraction-static",
    "context-length",
    "max-running-requests",
    "speculative-algorithm",
    "speculative-num-steps",
    "speculative-eagle-topk",
    "speculative-num-draft-tokens",
)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--line", action="extend", nargs="+", default=[])
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument("--ignore-sigterm", action="store_true")
    parser.add_argument("--line-interval", type=float, default=0.0, help="seconds between lines")
    for name in SIZING_FLAGS:
        parser.add_argument(f"--{name}")
    args = parser.parse_args()
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for number, line in enumerate(args.line):
        if number:
            time.sleep(args.line_interval)
        print(line, file=sys.stderr, flush=True)
    time.sleep(args.sleep)
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
