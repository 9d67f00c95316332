"""Telemetry on the real SGLang 0.5.9 on the CPU: the process tree by role, probes,
runtime numbers under real requests, and hangs (a stopped scheduler, a stalled startup)."""

from __future__ import annotations

import os
import signal

import httpx

from exporter.attempt.states import ServerState
from exporter.history import History
from exporter.identity import ProcessIdentity, describe
from tests.e2e.conftest import lone_first_node, write_config


def value(samples, name, **labels) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def test_roles_probes_runtime_stats_then_a_stopped_scheduler_is_a_hang(
    tmp_path, runtime, models, supervise
):
    """Breaks: SIGSTOP to the serving scheduler (alive, answering nothing). Must hold first:
    the real tree by role with resident memory, probes succeeding, runtime numbers moving
    under real requests; then: hang_timeout after hang_timeout_s, with its evidence, and a
    relaunch that serves."""
    config = write_config(
        tmp_path,
        runtime,
        models["tiny"],
        args={"decode-log-interval": 1},
        policy={"health_interval_s": 1.0, "hang_timeout_s": 20.0},
    )
    running = supervise(config)
    running.wait_state(ServerState.READY, timeout_s=300)
    running.wait_for(
        lambda: value(running.scrape(), "sglang_sentinel_processes", role="scheduler") == 1,
        30,
        "the process collector to see the scheduler",
    )
    samples = running.scrape()
    assert value(samples, "sglang_sentinel_processes", role="launcher") == 1
    assert value(samples, "sglang_sentinel_processes", role="detokenizer") == 1
    assert (
        value(
            samples, "sglang_sentinel_process_resident_memory_bytes", role="scheduler", tp_rank="0"
        )
        > 50e6
    )
    for probe in ("health", "server_info", "loads"):
        assert value(samples, "sglang_sentinel_health_probe_success", probe=probe) == 1, probe
    assert value(samples, "sglang_sentinel_collector_success", collector="processes") == 1

    base = f"http://127.0.0.1:{config.profile_args(0)['port']}"
    before = value(samples, "sglang_sentinel_log_last_line_timestamp_seconds")
    with httpx.Client(trust_env=False, timeout=60) as client:
        for prompt in ("Hello", "The sky is", "One two three"):  # bounded, loopback only
            reply = client.post(
                base + "/generate",
                json={"text": prompt, "sampling_params": {"max_new_tokens": 8, "temperature": 0}},
            )
            assert reply.status_code == 200
    running.wait_for(
        lambda: (
            value(running.scrape(), "sglang_sentinel_generation_throughput_tokens_per_second")
            is not None
        ),
        30,
        "a decode line",
    )
    samples = running.scrape()
    assert value(samples, "sglang_sentinel_log_last_line_timestamp_seconds") > before
    assert value(samples, "sglang_sentinel_running_requests") is not None
    assert value(samples, "sglang_sentinel_queued_requests") == 0
    assert 0 <= value(samples, "sglang_sentinel_token_usage_ratio") <= 1

    scheduler = next(
        m
        for m in running.daemon.attempt.processes.alive()
        if (describe(m)["cmdline"] or "").startswith("sglang::scheduler")
    )
    os.kill(scheduler.pid, signal.SIGSTOP)  # a process of the daemon's own attempt, by its pid
    running.wait_for(
        lambda: len(History(config.paths.state_dir).read().attempts) == 2,
        200,
        "the hang to be detected and a relaunch",
    )
    first = History(config.paths.state_dir).read().attempts[0]
    assert first.failure_class == "hang_timeout"
    assert "health probes failing" in first.diagnosis
    assert "retrying profile 'default'" in first.decision
    assert not scheduler.alive()
    running.wait_state(ServerState.READY, timeout_s=300)
    assert value(running.scrape(), "sglang_sentinel_hangs_total") == 1
    running.stop()


def test_multi_node_launch_without_its_second_node_is_a_startup_hang(
    tmp_path, runtime, models, supervise
):
    """Breaks: --nnodes 2 with no second node; SGLang waits forever in distributed init.
    Must hold: hang_timeout once startup_stall_s passes without progress (long before the
    startup_timeout_s cap), with the step it stalled at, and the stuck processes stopped."""
    config = write_config(
        tmp_path,
        runtime,
        models["tiny"],
        **lone_first_node(),
        # one node's daemon of a group would exit for the group controller (tested in
        # test_container_sglang); here the stall itself is under test
        policy={"startup_stall_s": 30.0, "max_attempts": 1, "group": "relaunch"},
    )
    running = supervise(config)
    running.wait_state(ServerState.GAVE_UP, timeout_s=200)
    (attempt,) = History(config.paths.state_dir).read().attempts
    assert attempt.failure_class == "hang_timeout"
    assert "no startup progress for" in attempt.diagnosis
    assert "stalled at step 'initializing'" in attempt.diagnosis
    # Reaching distributed init, the 30 s stall and the stop: minutes, not the 3600 s cap.
    assert attempt.ended_at - attempt.started_at < 30.0 + 150.0
    assert attempt.phase_reached == "initializing"
    running.stop()
    assert not any(ProcessIdentity.from_json(p).alive() for p in attempt.processes)
    assert not any(m.alive() for m in running.daemon.attempt.processes.known)
