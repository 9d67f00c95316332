"""Run the benchmarks: one JSON object per figure per line on stdout, details on stderr.

    python -m bench.main [--quick] [--only ingest,latency,crash,ages,scrape,footprint,diagnosis]

Benchmarks report; they never assert. See bench/README.md for what each figure means.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback

from bench import crash, diagnosis, footprint, ingest, latency, scrape
from bench.common import machine, note

BENCHMARKS = {
    "ingest": ingest.main,  # figures 1 and 6 (ingestion)
    "latency": latency.main,  # figure 2
    "crash": crash.figure_crash,  # figure 3 (short logs: what 8ada096 called crash)
    "ages": crash.figure_ages,  # figure 3 as the attempt ages
    "scrape": scrape.main,  # figures 4 and 6 (scrape)
    "footprint": footprint.main,  # figure 5
    "diagnosis": diagnosis.main,  # figure 7 (classify as the log grows)
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench/run", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smaller sizes and fewer repeats: minutes less, noisier figures",
    )
    parser.add_argument(
        "--only",
        default=",".join(BENCHMARKS),
        help="comma-separated subset of: " + ", ".join(BENCHMARKS),
    )
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")
    note(f"machine: {machine()}")
    failed = 0
    for name in chosen:
        started = time.monotonic()
        note(f"--- {name} ---")
        try:
            BENCHMARKS[name](quick=args.quick)
        except Exception:  # one broken benchmark must not hide the others' figures
            failed += 1
            note(f"{name} could not run:\n{traceback.format_exc()}")
        note(f"{name} took {time.monotonic() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
