"""``sglang-sentinel plan``: will SGLang's memory pools fit, and what to change if not."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TextIO

from exporter.diagnosis.planner import (
    DEFAULT_MAX_FRACTION,
    GIB,
    Calibration,
    Plan,
    PlanError,
    calibrate,
    plan,
)
from exporter.logs.reader import read_excerpt
from exporter.plan_inputs import PlanInputError, device_memory, read_model_config
from exporter.sglang.flags import normalize_flags, parse_flags
from exporter.sglang.versions import DEFAULT_VERSION, VERSIONS, detect_version

HELP = "predict whether SGLang's memory pools fit, and the cheapest flag changes if not"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan",
        help=HELP,
        usage="%(prog)s [--json] --model-config PATH [--gpu-memory-gib G] [--gpus N] "
        "[--sglang-version V] [--calibrate-from LOG] [--max-fraction F] -- SGLANG_FLAGS...",
        description=HELP + ". Runs SGLang's own pool-sizing arithmetic on the model config "
        "and SGLang's flags (given after --, as on its command line), from the GPU size or, "
        "exactly, from the memory lines of a real attempt's log. Exit status 0 whatever the "
        "verdict; 1 for an unreadable file or a value the planner rejects.",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--model-config", metavar="PATH", help="the model's config.json (or its directory)"
    )
    parser.add_argument(
        "--gpu-memory-gib",
        metavar="G",
        help="memory per GPU in GiB (default: the smallest of the GPUs the TP ranks use, "
        "from NVML; with --device cpu, the host memory SGLang's CPU engine sizes from)",
    )
    parser.add_argument(
        "--gpus", metavar="N", help="GPUs available (default: NVML's count, else 1)"
    )
    parser.add_argument(
        "--sglang-version",
        metavar="V",
        default=DEFAULT_VERSION,
        help=f"one of {', '.join(VERSIONS)}",
    )
    parser.add_argument(
        "--calibrate-from",
        metavar="LOG",
        help="an attempt's log: its free-memory and weight lines make the prediction exact",
    )
    parser.add_argument(
        "--max-fraction",
        metavar="F",
        default=str(DEFAULT_MAX_FRACTION),
        help="never suggest --mem-fraction-static above this (default %(default)s)",
    )
    parser.add_argument("sglang_flags", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, stdout: TextIO = sys.stdout, stderr: TextIO = sys.stderr) -> int:
    try:
        result, calibration = _plan(args)
    except (PlanError, OSError, ValueError) as error:
        print(f"sglang-sentinel plan: {_message(error)}", file=stderr)
        return 1
    if args.json:
        data = result.to_json()
        if calibration is not None:
            data["calibration"] = calibration.to_json()
        stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        stdout.write(report(result, args.calibrate_from))
    return 0


def _plan(args: argparse.Namespace) -> tuple[Plan, Calibration | None]:
    if not args.model_config:
        raise PlanError("--model-config PATH is required")
    config = read_model_config(args.model_config)
    flags = parse_flags(args.sglang_flags)
    if args.gpu_memory_gib is not None:
        memory = round(_positive(args.gpu_memory_gib, "--gpu-memory-gib", float) * GIB)
        detected = None
    else:
        try:
            detected = device_memory(normalize_flags(flags), os.environ)
        except PlanInputError as error:
            raise PlanError(f"{error}: give --gpu-memory-gib") from None
        memory = detected.per_rank_bytes
    if args.gpus is not None:
        gpus = _positive(args.gpus, "--gpus", int)
    else:
        gpus = detected.devices if detected else 1
    calibration = None
    if args.calibrate_from:
        with open(args.calibrate_from, "rb") as log:
            lines, events = read_excerpt(log)[0].read()
        calibration = calibrate(events, detect_version(lines, events))
    max_fraction = _positive(args.max_fraction, "--max-fraction", float)
    version = args.sglang_version
    return plan(config, memory, gpus, flags, version, calibration, max_fraction), calibration


def _positive(text: str, name: str, cast: type) -> float:
    try:
        value = cast(text)
    except ValueError:
        raise PlanError(f"{name} needs a number, got {text!r}") from None
    if not value > 0:
        raise PlanError(f"{name} must be positive, got {text}")
    return value


def _message(error: Exception) -> str:
    if isinstance(error, OSError) and error.filename:
        return f"cannot read {error.filename}: {error.strerror or error}"
    return str(error)


def report(result: Plan, log: str | None) -> str:
    source = f"calibrated from {log}" if log else "estimated from the GPU size and the config"
    if log and not result.inputs.get("calibrated"):
        source = f"{log} has no memory lines: estimated from the GPU size and the config"
    rows = [
        f"SGLang {result.version}: {result.verdict}  ({source})",
        "  budget per GPU rank:",
    ]
    rows += [
        f"    {step.name:<24}{step.bytes / GIB:>9.2f} GiB  {step.explanation}"
        for step in result.budget
    ]
    rows += [
        f"  max_total_num_tokens:  {result.max_total_num_tokens}",
        f"  mamba_cache_slots:     {_or_dash(result.mamba_cache_slots)}",
        f"  max_running_requests:  {result.max_running_requests}",
        f"  headroom:              {result.headroom_bytes / GIB:.2f} GiB "
        "(for CUDA graphs and activations)",
        f"  what ate the budget:   {_or_dash(result.what_ate_the_budget)}",
    ]
    if result.notes:
        rows.append("  notes:")
        rows += [f"    - {note}" for note in result.notes]
    if result.suggestions:
        rows.append("  suggestions, cheapest first:")
        for number, suggestion in enumerate(result.suggestions, 1):
            outcome = suggestion.plan
            slots = (
                f", {outcome.mamba_cache_slots} state slots"
                if outcome.mamba_cache_slots is not None
                else ""
            )
            rows.append(
                f"    {number}. {suggestion.change}: {outcome.verdict}, "
                f"{outcome.max_total_num_tokens} tokens{slots}, max_running_requests "
                f"{outcome.max_running_requests}, headroom {outcome.headroom_bytes / GIB:.2f} GiB"
            )
    elif not result.fits:
        rows.append("  suggestions: none of the flag changes tried fits")
    return "\n".join(rows) + "\n"


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)
