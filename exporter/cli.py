"""The ``sglang-sentinel`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from exporter import __version__
from exporter.commands import check_config, classify, demo, history, plan, run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sglang-sentinel",
        description="Supervise an SGLang server: launch it, tell why it crashed, relaunch it "
        "with a configuration that fits, and export it all to Prometheus.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    demo.add_parser(subparsers)
    classify.add_parser(subparsers)
    plan.add_parser(subparsers)
    check_config.add_parser(subparsers)
    history.add_parser(subparsers)
    run.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except BrokenPipeError:  # `sglang-sentinel classify x | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
