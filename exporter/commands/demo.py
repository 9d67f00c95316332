"""``sglang-sentinel demo``: the daemon on the real SGLang, on this machine's CPU."""

from __future__ import annotations

import argparse
import logging
import sys

from exporter import app
from exporter.commands.run import configure_logging
from exporter.sglang_cpu.install import SGLangInstallError, default_cache_dir, ensure_sglang
from exporter.termination import ExitCode

HELP = (
    "run the daemon on the real SGLang (CPU, tiny model): a real crash and a fallback with "
    "the pre-flight off, then the pre-flight preventing it"
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help=HELP,
        description=HELP + ". The first use installs SGLang 0.5.9 for the CPU into the cache "
        "directory ($SGLANG_SENTINEL_CACHE or ~/.cache/sglang-sentinel; about 11 GB, minutes).",
    )
    parser.add_argument(
        "--once",
        action="store_true",
        help="exit once the second run serves (or its daemon gives up) instead of running on; "
        "SIGTERM or SIGINT stops SGLang and exits 0 in both modes",
    )
    parser.add_argument("--json", action="store_true", help="with --once: print a JSON summary")
    parser.add_argument("--metrics-port", type=int, default=0, help="default: a free port")
    parser.add_argument("--timeout", type=float, default=900.0, help="--once gives up after this")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    # The daemon's narrative goes to stderr; stdout stays for the JSON summary.
    configure_logging("INFO")
    say = logging.getLogger("sglang_sentinel").info
    cache = default_cache_dir()
    try:
        runtime = ensure_sglang(cache_dir=cache, progress=lambda line: say("setup: %s", line))
    except SGLangInstallError as error:
        print(f"sglang-sentinel demo: {error}", file=sys.stderr)
        return ExitCode.ERROR
    return app.demo(
        runtime,
        cache,
        metrics_port=args.metrics_port,
        once=args.once,
        json_summary=args.json,
        timeout_s=args.timeout,
    )
