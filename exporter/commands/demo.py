"""``sglang-sentinel demo``: the daemon on the real SGLang, on this machine's CPU."""

from __future__ import annotations

import argparse
import logging
import sys
import time

from exporter import demo, endpoints, metrics
from exporter.attempt.states import ServerState
from exporter.commands.run import configure_logging
from exporter.sglang_cpu.install import SGLangInstallError, default_cache_dir, ensure_sglang
from exporter.supervisor import signals
from exporter.supervisor.daemon import Daemon
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
    workdir = cache / "demo" / time.strftime("%Y%m%d-%H%M%S")
    port = args.metrics_port or demo.free_port()
    # One /metrics and one set of probes for both runs: they show whichever daemon runs now.
    current: list[Daemon] = []
    server, _thread = metrics.serve(
        "127.0.0.1",
        port,
        lambda: current[-1].snapshot(),
        endpoints.routes(lambda: current[-1].status()),
    )
    url = f"http://127.0.0.1:{port}/metrics"
    say("metrics: %s (probes: /healthz /readyz /status)", url)
    runs = []
    try:
        for mode in ("off", "fix"):
            config = demo.write_demo_config(
                runtime, cache / "models", workdir / f"preflight-{mode}", port, mode
            )
            say("demo run with policy.preflight = %r, config %s", mode, config.source)
            current.append(Daemon(config))
            # Before its SGLang starts: SIGTERM and SIGINT stop it in both modes (with --once
            # the loop runs in a thread; the handlers run in this one).
            signals.install(current[-1])
            if mode == "fix" and not args.once:
                return current[-1].run()
            settled = demo.run_until_settled(current[-1], args.timeout, poll=lambda: None)
            if settled is ServerState.STOPPED:  # a signal stopped it first: no further run
                return int(current[-1].exit_code)
            runs.append(demo.summary(current[-1], settled, url))
        if args.json:
            print(demo.to_json(demo.comparison(runs)))
        return 0 if all(run["outcome"] == "ready" for run in runs) else 1
    finally:
        server.shutdown()
