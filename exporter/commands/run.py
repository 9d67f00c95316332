"""``sglang-sentinel run``: the daemon."""

from __future__ import annotations

import argparse
import logging
import sys

from exporter import app
from exporter.config import ConfigError, load_config
from exporter.termination import ExitCode

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
    return app.run(config)
