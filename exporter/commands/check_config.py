"""``sglang-sentinel check-config``: validate a config and show what it would launch."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import TextIO

from exporter.config import Config, ConfigError, load_config, nnodes, node_rank
from exporter.redact import redact_command

HELP = "validate a sglang-sentinel config file and show the launch command of each profile"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "check-config",
        help=HELP,
        description=HELP + ". Exit status 0 when the config is valid; 1 with file:line: key: "
        "message on stderr when it is not.",
    )
    parser.add_argument("file", metavar="FILE", help="the TOML config file")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, stdout: TextIO = sys.stdout, stderr: TextIO = sys.stderr) -> int:
    try:
        config = load_config(args.file)
    except ConfigError as error:
        print(error, file=stderr)
        return 1
    stdout.write(report(args.file, config))
    return 0


def report(path: str, config: Config) -> str:
    rows = [f"{path}: valid", "profiles:"]
    for index, profile in enumerate(config.profiles):
        command = redact_command(config.command(index))  # the output may land in CI logs
        rows += [f"  {index} {profile.name}", f"    {shlex.join(command)}"]
    args = config.sglang.args
    rows += [
        f"state dir: {config.paths.state_dir}",
        f"log dir:   {config.paths.log_dir}",
        f"metrics:   {config.metrics.address} (probes: /healthz /readyz /status)",
        f"termination log: {config.paths.termination_log or 'none'}",
        f"group:     rank {_known(node_rank(args))} of {_known(nnodes(args))} nodes; "
        f"on a failure: {config.policy.group}",
        f"give up:   {config.policy.on_give_up}",
    ]
    return "\n".join(rows) + "\n"


def _known(number: int | None) -> str:
    return "(set at deploy time)" if number is None else str(number)
