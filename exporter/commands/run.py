"""``sglang-sentinel run``: the daemon."""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from exporter import metrics
from exporter.config import ConfigError, load_config
from exporter.notify import Notifier
from exporter.supervisor.daemon import Daemon

HELP = "launch and supervise SGLang as the config says, export /metrics, until stopped"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help=HELP,
        description=HELP + ". SIGTERM or SIGINT stops SGLang gracefully and exits; SIGHUP "
        "re-reads the config (a bad one is reported and the running config kept).",
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
        return 1
    # SGLang must not inherit NOTIFY_SOCKET: with NotifyAccess=main its messages are refused.
    daemon = Daemon(config, notifier=Notifier.from_environment(unset_environment=True))
    listen = config.metrics
    try:
        server, _thread = metrics.serve(listen.host, listen.port, daemon.snapshot)
    except OSError as error:
        print(
            f"sglang-sentinel run: cannot serve metrics on {listen.address}: {error}",
            file=sys.stderr,
        )
        return 1
    signal.signal(signal.SIGTERM, lambda *_: daemon.request_stop())
    signal.signal(signal.SIGINT, lambda *_: daemon.request_stop())
    signal.signal(signal.SIGHUP, lambda *_: daemon.request_reload())
    logging.getLogger("sglang_sentinel").info("metrics on http://%s/metrics", listen.address)
    try:
        return daemon.run()
    finally:
        server.shutdown()
