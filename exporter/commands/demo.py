"""``sglang-sentinel demo``: the daemon on the real SGLang, on this machine's CPU."""

from __future__ import annotations

import argparse
import logging
import sys
import time

from exporter import demo, endpoints, metrics
from exporter.commands.run import configure_logging
from exporter.sglang_cpu.install import SGLangInstallError, default_cache_dir, ensure_sglang
from exporter.supervisor import signals
from exporter.supervisor.daemon import Daemon
from exporter.supervisor.termination import ExitCode

HELP = "run the daemon on the real SGLang (CPU, tiny model): a real crash, then a fallback"


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
        help="exit once the server serves (status 0) or the daemon gives up (3) instead of "
        "running on; SIGTERM or SIGINT stops SGLang and exits 0 in both modes",
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
    workdir = cache / "demo" / time.strftime("%Y%m%d-%H%M%S")
    port = args.metrics_port or demo.free_port()
    config = demo.write_demo_config(runtime, cache / "models", workdir, port)
    say("demo config: %s", config.source)
    daemon = Daemon(config)
    server, _thread = metrics.serve(
        "127.0.0.1", port, daemon.snapshot, endpoints.routes(daemon.status)
    )
    url = f"http://127.0.0.1:{port}/metrics"
    say("metrics: %s (probes: /healthz /readyz /status)", url)
    # Before SGLang starts: SIGTERM and SIGINT stop it in both modes (the loop runs in a
    # thread with --once; the handlers run in this one).
    signals.install(daemon)
    try:
        if args.once:
            settled = demo.run_until_settled(daemon, args.timeout, poll=lambda: None)
            result = demo.summary(daemon, settled, url)
            if args.json:
                print(demo.to_json(result))
            return demo.exit_status(daemon, settled)
        return daemon.run()
    finally:
        server.shutdown()
