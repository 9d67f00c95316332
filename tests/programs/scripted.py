"""A scripted stand-in launcher for the daemon's own unit tests: it prints the given lines
to stderr, optionally sleeps, and exits with the given status. The behaviour of SGLang
itself is tested against the real SGLang (tests/e2e); this only drives the state machine."""

from __future__ import annotations

import argparse
import signal
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--line", action="append", default=[])
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument("--ignore-sigterm", action="store_true")
    args = parser.parse_args()
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for line in args.line:
        print(line, file=sys.stderr, flush=True)
    time.sleep(args.sleep)
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
