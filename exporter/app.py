"""The composition root: config -> telemetry sources -> Daemon -> /metrics and the probe
endpoints -> signals. `sglang-sentinel run` and `demo` both build and run their daemons here;
the commands only parse their arguments.
"""

from __future__ import annotations

import gc
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

from exporter import demo as demo_runs
from exporter import endpoints, metrics
from exporter.attempt.states import ServerState
from exporter.config import Config
from exporter.notify import Notifier
from exporter.sglang_cpu.install import SGLangRuntime
from exporter.supervisor import signals
from exporter.supervisor.daemon import Daemon
from exporter.telemetry.registry import Sources
from exporter.termination import ExitCode, message, write_message

log = logging.getLogger("sglang_sentinel")


def build_daemon(
    config: Config, notifier: Notifier | None = None, clock: Callable[[], float] = time.time
) -> Daemon:
    """A daemon with every registered telemetry source, each wired by its own ``build`` to
    the daemon's host (supervisor/host.py: the probes wake its loop, the process tree follows
    its attempt, the GPUs that tree)."""
    return Daemon(config, Sources.build, clock=clock, notifier=notifier)


def settle() -> None:
    """Put what starting allocated (the modules, the classifier's tables and patterns, and
    in `run` the config and the daemon) out of the cyclic collector's reach for good: its
    full collections then scan only what the loop allocated since. Unfrozen, one took
    16-30 ms, wherever it fell (on a crash's way to its decision, in a scrape)."""
    gc.collect()
    gc.freeze()


def serve(host: str, port: int, current: Callable[[], Daemon]) -> object:
    """/metrics and /healthz /readyz /status of whichever daemon ``current`` returns, in a
    background thread; OSError if the address cannot be bound. ``.shutdown()`` stops it."""
    server, _thread = metrics.serve(
        host,
        port,
        lambda: current().snapshot(),
        endpoints.routes(lambda: current().status()),
    )
    return server


def run(config: Config) -> int:
    """`sglang-sentinel run`: supervise until stopped; returns the exit code (termination.py)."""
    # SGLang must not inherit NOTIFY_SOCKET: with NotifyAccess=main its messages are refused.
    daemon = build_daemon(config, notifier=Notifier.from_environment(unset_environment=True))
    signals.install(daemon)  # at once: a SIGTERM from now on stops the daemon cleanly
    listen = config.metrics
    try:
        server = serve(listen.host, listen.port, lambda: daemon)
    except OSError as error:
        reason = f"cannot serve metrics on {listen.address}: {error}"
        print(f"sglang-sentinel run: {reason}", file=sys.stderr)
        write_message(config.paths.termination_log, message(ExitCode.ERROR, None, reason))
        return ExitCode.ERROR
    log.info("metrics on http://%s/metrics, probes on /healthz /readyz /status", listen.address)
    settle()
    try:
        return daemon.run()
    except Exception as error:
        # The daemon's own bug: say so where an operator looks, then fail.
        log.exception("internal error")
        detail = f"{type(error).__name__}: {error}"
        write_message(
            config.paths.termination_log, message(ExitCode.ERROR, daemon.last_failure, detail)
        )
        return ExitCode.ERROR
    finally:
        server.shutdown()


def demo(
    runtime: SGLangRuntime,
    cache: Path,
    *,
    metrics_port: int,
    once: bool,
    json_summary: bool,
    timeout_s: float,
) -> int:
    """`sglang-sentinel demo`: two daemons one after the other, the pre-flight off then "fix",
    each with the signal handlers from before its SGLang starts; a run stopped by a signal
    starts no further run. Without ``once`` the second runs until stopped."""
    workdir = cache / "demo" / time.strftime("%Y%m%d-%H%M%S")
    port = metrics_port or demo_runs.free_port()
    # One /metrics and one set of probes for both runs: they show whichever daemon runs now.
    current: list[Daemon] = []
    server = serve("127.0.0.1", port, lambda: current[-1])
    settle()
    url = f"http://127.0.0.1:{port}/metrics"
    log.info("metrics: %s (probes: /healthz /readyz /status)", url)
    runs = []
    try:
        for mode in ("off", "fix"):
            config = demo_runs.write_demo_config(
                runtime, cache / "models", workdir / f"preflight-{mode}", port, mode
            )
            log.info("demo run with policy.preflight = %r, config %s", mode, config.source)
            current.append(build_daemon(config))
            # Before its SGLang starts: SIGTERM and SIGINT stop it in both modes (with --once
            # the loop runs in a thread; the handlers run in this one).
            signals.install(current[-1])
            if mode == "fix" and not once:
                return current[-1].run()
            settled = demo_runs.run_until_settled(current[-1], timeout_s, poll=lambda: None)
            if settled is ServerState.STOPPED:  # a signal stopped it first: no further run
                return int(current[-1].exit_code)
            runs.append(demo_runs.summary(current[-1], settled, url))
        if json_summary:
            print(demo_runs.to_json(demo_runs.comparison(runs)))
        return 0 if all(run["outcome"] == "ready" for run in runs) else 1
    finally:
        server.shutdown()
