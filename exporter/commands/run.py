"""``sglang-sentinel run``: the daemon."""

from __future__ import annotations

import argparse
import logging
import sys

from exporter import endpoints, metrics
from exporter.config import ConfigError, load_config
from exporter.notify import Notifier
from exporter.supervisor import signals
from exporter.supervisor.daemon import Daemon
from exporter.termination import ExitCode, message, write_message

HELP = "launch and supervise SGLang as the config says, export /metrics, until stopped"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help=HELP,
        description=HELP + ". SIGTERM or SIGINT stops SGLang gracefully and exits; SIGQUIT "
        "stops it at once; SIGHUP re-reads the config (a bad one is reported and the running "
        "config kept). Exit status: 0 stopped on request, 1 could not run, 2 bad config, "
        '3 gave up (policy.on_give_up = "exit"), 4 a rank of a multi-node group failed.',
    )
    parser.add_argument("--config", required=True, metavar="FILE", help="the TOML config")
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    parser.set_defaults(handler=run)


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level),
        format="%(asctime)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    # httpx logs every probe at INFO: noise in the daemon's own log.
    logging.getLogger("httpx").setLevel(logging.WARNING)


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    try:
        config = load_config(args.config)
    except ConfigError as error:
        print(f"sglang-sentinel run: {error}", file=sys.stderr)
        return ExitCode.USAGE
    # SGLang must not inherit NOTIFY_SOCKET: with NotifyAccess=main its messages are refused.
    daemon = Daemon(config, notifier=Notifier.from_environment(unset_environment=True))
    signals.install(daemon)  # at once: a SIGTERM from now on stops the daemon cleanly
    listen = config.metrics
    try:
        server, _thread = metrics.serve(
            listen.host, listen.port, daemon.snapshot, endpoints.routes(daemon.status)
        )
    except OSError as error:
        reason = f"cannot serve metrics on {listen.address}: {error}"
        print(f"sglang-sentinel run: {reason}", file=sys.stderr)
        write_message(config.paths.termination_log, message(ExitCode.ERROR, None, reason))
        return ExitCode.ERROR
    logging.getLogger("sglang_sentinel").info(
        "metrics on http://%s/metrics, probes on /healthz /readyz /status", listen.address
    )
    try:
        return daemon.run()
    except Exception as error:
        # The daemon's own bug: say so where an operator looks, then fail.
        logging.getLogger("sglang_sentinel").exception("internal error")
        detail = f"{type(error).__name__}: {error}"
        write_message(
            config.paths.termination_log, message(ExitCode.ERROR, daemon.last_failure, detail)
        )
        return ExitCode.ERROR
    finally:
        server.shutdown()
