"""``sglang-sentinel classify``: explain why SGLang died, from its log."""

from __future__ import annotations

import argparse
import gc
import json
import sys
from typing import TextIO

from exporter.diagnosis.classify import Classification, Outcome, classify
from exporter.logs.excerpt import Excerpt
from exporter.logs.reader import read_excerpt

HELP = "classify why an SGLang server failed, from its log file(s)"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "classify",
        help=HELP,
        description=HELP + ". Prints the failure class, the root-cause line, the phase, the "
        "evidence, a diagnosis and the remedy direction. Each input is read once, in bounded "
        "memory, whatever its size. Exit status 0 when every input was read, whatever the "
        "class; 1 when an input could not be read.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="log file, or - for stdin")
    parser.add_argument("--json", action="store_true", help="one JSON object per input, per line")
    parser.add_argument(
        "--exit-status",
        type=int,
        metavar="CODE",
        help="the launcher's exit status if known (negative: killed by that signal)",
    )
    parser.add_argument(
        "--sglang-version", metavar="V", help="the SGLang version, if the log does not say"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, stdout: TextIO = sys.stdout, stderr: TextIO = sys.stderr) -> int:
    status = 0
    outcome = Outcome(exit_code=args.exit_status)
    for path in args.paths:
        try:
            excerpt = _read(path)
        except OSError as error:
            print(
                f"sglang-sentinel classify: cannot read {path}: {error.strerror or error}",
                file=stderr,
            )
            status = 1
            continue
        lines, events = excerpt.read()
        result = classify(lines, events, outcome, version=args.sglang_version)
        if args.json:
            stdout.write(json.dumps({"file": path, **result.to_json()}) + "\n")
        else:
            stdout.write(report(path, result))
        stdout.flush()
    return status


def _read(path: str) -> Excerpt:
    """The log's excerpt; every version's lines are read (the version may be unknown)."""
    # Reading makes millions of short-lived objects and no reference cycles: the cyclic
    # collector's passes over them would cost ~5% of the time and free nothing.
    gc.disable()
    try:
        if path == "-":
            return read_excerpt(sys.stdin.buffer)[0]
        with open(path, "rb") as handle:
            return read_excerpt(handle)[0]
    finally:
        gc.enable()


def report(path: str, result: Classification) -> str:
    data = result.to_json()
    runner_up = f", runner-up {data['runner_up']}" if data["runner_up"] else ""
    decided = f"decided by {data['layer']}: {data['signature']}" if data["signature"] else ""
    rows = [
        f"{path}: {data['failure_class']}",
        f"  confidence: {data['confidence']}{runner_up}" + (f" ({decided})" if decided else ""),
        f"  phase:      {data['phase'] or '-'}",
        f"  version:    {data['sglang_version'] or 'not in the log'}",
        f"  root cause: {data['root_cause_line'] or '-'}"
        + (f"  (line {data['root_cause_line_number']})" if data["root_cause_line_number"] else ""),
        f"  diagnosis:  {data['diagnosis']}",
        f"  remedy:     {data['remedy']} (--mem-fraction-static: {data['mem_fraction_static']})",
    ]
    if data["evidence"]:
        rows.append("  evidence:")
        rows += [f"    {line}" for line in data["evidence"]]
    return "\n".join(rows) + "\n\n"
