"""`sglang-sentinel classify --json FILE` in this process: one JSON line on stdout with
the seconds it took (interpreter start-up and imports excluded), the peak RSS of the
process and the class. Run by bench/diagnosis.py, with this checkout's code or the
previous one's (bench/previous.py)."""

from __future__ import annotations

import io
import json
import resource
import sys
import time

from exporter.cli import build_parser


def main() -> None:
    path = sys.argv[1]
    out = io.StringIO()
    args = build_parser().parse_args(["classify", "--json", path])
    started = time.perf_counter()
    status = args.handler(args, stdout=out)
    seconds = time.perf_counter() - started
    result = json.loads(out.getvalue())
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "seconds": seconds,
                "peak_rss_mb": peak_mb,
                "status": status,
                "failure_class": result["failure_class"],
                "root_cause_line_number": result["root_cause_line_number"],
            }
        )
    )


if __name__ == "__main__":
    main()
