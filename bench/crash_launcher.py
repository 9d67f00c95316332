"""A stand-in SGLang launcher for figure 3: it prints a real failing SGLang log to stderr,
writes the wall time just before it dies, and SIGKILLs itself, as SGLang 0.5.9 does on a
child failure (kill_process_tree). It takes SGLang's flags (the daemon checks a config's
flags against --help before a launch) and uses none of them.

    BENCH_CRASH_LOG   the log to print (e.g. tests/golden/sglang-0.5.9-pool-init-oom-incident.log)
    BENCH_EXIT_TIMES  file to append "pid wall_time" to, just before the exit
    BENCH_AGE_LOG     optional: a log to print first (a server that served this long), then
                      wait until BENCH_CAUGHT_UP.<pid> exists (the daemon has read it all)
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import sys
import time
from pathlib import Path

# A real crash comes at any moment relative to the daemon's loop; a launcher that always
# lived the same few hundred ms would lock into one phase of it. Up to 1.25 of its ticks.
JITTER_S = 0.25


def main() -> int:
    parser = argparse.ArgumentParser(prog="sglang.launch_server")
    for flag in ("--model-path", "--host", "--port", "--mem-fraction-static", "--tp-size"):
        parser.add_argument(flag)
    parser.parse_known_args()
    if os.environ.get("BENCH_AGE_LOG"):
        with open(os.environ["BENCH_AGE_LOG"], "rb") as handle:
            shutil.copyfileobj(handle, sys.stderr.buffer, 8 << 20)
        sys.stderr.flush()
        caught_up = Path(f"{os.environ['BENCH_CAUGHT_UP']}.{os.getpid()}")
        while not caught_up.exists():  # the crash comes once the daemon has read its past
            time.sleep(0.01)
    with open(os.environ["BENCH_CRASH_LOG"], encoding="utf-8") as handle:
        sys.stderr.write(handle.read())
    sys.stderr.flush()
    time.sleep(random.uniform(0.0, JITTER_S))
    with open(os.environ["BENCH_EXIT_TIMES"], "a", encoding="utf-8") as handle:
        handle.write(f"{os.getpid()} {time.time()!r}\n")
    os.kill(os.getpid(), signal.SIGKILL)
    return 1


if __name__ == "__main__":
    sys.exit(main())
