"""``sglang-sentinel history``: the attempts the daemon made, why each ended, what came next."""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
from datetime import datetime
from pathlib import Path
from typing import TextIO

from exporter.history import AttemptRecord, History

HELP = "list the attempts the daemon made and why each one ended"
COLUMNS = ("ATTEMPT", "STARTED", "PROFILE", "DURATION", "PHASE", "CLASS", "EXIT", "DECISION")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "history",
        help=HELP,
        description=HELP + ", from the attempt history in the state directory. Corrupt "
        "lines (a daemon killed mid-write) are skipped with a warning. Exit status 0 unless "
        "the history or the config cannot be read.",
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--state-dir", type=Path, metavar="DIR", help="the daemon's state dir")
    where.add_argument("--config", type=Path, metavar="FILE", help="the daemon's config file")
    parser.add_argument("--json", action="store_true", help="one JSON object per attempt, per line")
    parser.add_argument("--last", type=_positive, metavar="N", help="only the last N attempts")
    parser.set_defaults(handler=run)


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def run(args: argparse.Namespace, stdout: TextIO = sys.stdout, stderr: TextIO = sys.stderr) -> int:
    state_dir = args.state_dir
    if state_dir is None:
        from exporter.config import ConfigError, load_config  # lazy: only --config needs it

        try:
            state_dir = load_config(args.config).paths.state_dir
        except ConfigError as error:  # it names the file, the line and the key
            print(f"sglang-sentinel history: {error}", file=stderr)
            return 1
    history = History(state_dir)
    try:
        read = history.read()
    except OSError as error:
        print(f"sglang-sentinel history: cannot read {history.path}: {error}", file=stderr)
        return 1
    for warning in read.warnings:
        print(f"sglang-sentinel history: {history.path}: {warning}", file=stderr)
    if read.corrupt_lines:
        print(
            f"sglang-sentinel history: warning: skipped {read.corrupt_lines} corrupt "
            f"line(s) of {history.path}",
            file=stderr,
        )
    attempts = read.attempts[-args.last :] if args.last else read.attempts
    if not attempts:
        # On stderr under --json, so that stdout stays JSON lines.
        print(f"no attempts recorded in {state_dir}", file=stderr if args.json else stdout)
    elif args.json:
        stdout.writelines(json.dumps(record.to_json()) + "\n" for record in attempts)
    else:
        stdout.write(table(attempts))
    stdout.flush()
    return 0


def table(attempts: list[AttemptRecord]) -> str:
    rows = [_row(record) for record in attempts]
    widths = [max(len(row[i]) for row in [COLUMNS, *rows]) for i in range(len(COLUMNS) - 1)]
    lines = [_line(COLUMNS, widths)]
    for record, row in zip(attempts, rows, strict=True):
        lines.append(_line(row, widths))
        planned = record.preflight or {}
        if planned.get("verdict") not in (None, "fits"):
            lines.append(f"    pre-flight: {_preflight(planned)}")
        if record.failed:
            lines.append(f"    root cause: {record.root_cause_line or '-'}")
            lines.append(f"    diagnosis:  {record.diagnosis or '-'}")
    return "\n".join(lines) + "\n"


def _preflight(planned: dict) -> str:
    """A pre-flight that found something, in one line: what it predicted and what it did."""
    text = f"{planned.get('verdict')}: {planned.get('reason')}"
    words = (planned.get("change") or {}).get("flags")
    if planned.get("applied"):
        return f"{text}; launched with {words}"
    return f"{text}; launched unchanged" + (f" ({words} would fit)" if words else "")


def _line(cells: tuple[str, ...], widths: list[int]) -> str:
    # The last column (the decision) is free text: left unpadded.
    padded = [cell.ljust(width) for cell, width in zip(cells, widths, strict=False)]
    return "  ".join([*padded, cells[-1]]).rstrip()


def _row(record: AttemptRecord) -> tuple[str, ...]:
    duration = None
    if record.started_at is not None and record.ended_at is not None:
        duration = record.ended_at - record.started_at
    return (
        str(record.attempt),
        _time(record.started_at),
        record.profile or "-",
        _duration(duration) if record.ended else "running?",
        record.phase or "-",
        record.failure_class or "-",
        _exit(record),
        record.decision or "-",
    )


def _time(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    try:
        return datetime.fromtimestamp(timestamp).astimezone().isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):  # a clock far off the calendar
        return str(timestamp)


def _duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _exit(record: AttemptRecord) -> str:
    number = record.signal
    if number is None and record.exit_code is not None and record.exit_code < 0:
        number = -record.exit_code  # subprocess convention: -N is death by signal N
    if number is not None:
        try:
            return signal.Signals(number).name
        except ValueError:
            return f"signal {number}"
    return "-" if record.exit_code is None else f"exit {record.exit_code}"
