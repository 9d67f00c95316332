"""The daemon supervising the real SGLang 0.5.9 on the CPU: real crashes, real recoveries.

Each test says what it breaks and what must hold afterwards. Every process an attempt
started must be gone when a test ends, and a decoy that merely looks like SGLang is never
signalled.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import psutil

from exporter.attempt.states import ServerState
from exporter.history import History
from exporter.identity import ProcessIdentity, describe
from tests.conftest import wait
from tests.e2e.conftest import promtool_check_metrics, write_config

GIB = 1 << 30


def gib(text: str) -> int:
    return round(float(text) * GIB)


def attempts(config):
    return History(config.paths.state_dir).read().attempts


def assert_all_gone(identities) -> None:
    alive = [i for i in identities if i.alive()]
    assert not alive, f"attempt processes left behind: {alive}"
    sessions = {i.pid for i in identities}
    # Zombies are dead already; a container's PID 1 may be slow to reap orphans.
    stray = [
        p.pid
        for p in psutil.process_iter(["status"])
        if _sid(p.pid) in sessions and p.info["status"] != psutil.STATUS_ZOMBIE
    ]
    assert not stray, f"processes still in an attempt's session: {stray}"


def _sid(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def leaders(config) -> list[ProcessIdentity]:
    return [ProcessIdentity.from_json(p) for a in attempts(config) for p in a.processes]


def test_pool_oom_then_fallback_serves_and_metrics_equal_the_log(
    tmp_path, runtime, models, supervise
):
    """Breaks: a static budget too small for the weights. Must hold: pool_init_oom with
    SGLang's own line as the root cause, a fallback to the next profile that serves, pool
    sizes on /metrics equal to the numbers in the serving attempt's log, a valid exposition."""
    config = write_config(
        tmp_path,
        runtime,
        models["large"],
        args={"mem-fraction-static": 0.005},
        profiles=[{"name": "tight"}, {"name": "roomy", "set": {"mem-fraction-static": 0.5}}],
        policy={"preflight": "off"},  # the crash is the point; tests/e2e/test_preflight_sglang.py
    )
    running = supervise(config)
    running.wait_state(ServerState.READY, timeout_s=400)
    members = set(running.daemon.attempt.processes.known)

    first, second = attempts(config)
    assert (first.profile, first.failure_class) == ("tight", "pool_init_oom")
    assert first.root_cause_line.startswith(
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    )
    assert "falling back from profile 'tight' to 'roomy'" in first.decision
    assert second.profile == "roomy" and second.ready_at is not None
    assert first.preflight is None and second.preflight is None  # "off": nothing planned

    log = Path(second.log).read_text()
    kv = re.search(
        r"KV Cache is allocated\. #tokens: (\d+), K size: ([\d.]+) GB, V size: ([\d.]+) GB", log
    )
    weights = re.search(r"Load weight end\. .*avail mem=([\d.]+) GB, mem usage=([\d.]+) GB", log)
    ready = re.search(r"max_total_num_tokens=(\d+)", log)
    samples = running.scrape()
    rank = (("tp_rank", "0"),)
    assert samples[("sglang_sentinel_kv_cache_tokens", rank)] == int(kv.group(1))
    assert samples[("sglang_sentinel_memory_pool_bytes", (("pool", "kv"), ("tp_rank", "0")))] == (
        gib(kv.group(2)) + gib(kv.group(3))
    )
    assert samples[("sglang_sentinel_weights_bytes", rank)] == gib(weights.group(2))
    assert samples[
        ("sglang_sentinel_device_available_bytes", (("phase", "after_weights"), ("tp_rank", "0")))
    ] == gib(weights.group(1))
    assert int(ready.group(1)) == int(kv.group(1))
    assert samples[("sglang_sentinel_server_up", ())] == 1
    assert samples[("sglang_sentinel_server_state", (("state", "ready"),))] == 1
    assert samples[("sglang_sentinel_failures_total", (("class", "pool_init_oom"),))] == 1
    assert samples[("sglang_sentinel_restarts_total", (("reason", "pool_init_oom"),))] == 1
    assert samples[("sglang_sentinel_fallback_level", ())] == 1
    assert samples[("sglang_sentinel_profile_info", (("profile", "roomy"),))] == 1
    assert samples[("sglang_sentinel_log_lines_total", (("matched", "true"),))] > 5
    checked = promtool_check_metrics(running.exposition())
    assert checked.returncode == 0, checked.stdout + checked.stderr

    running.stop()
    assert_all_gone(members | set(leaders(config)))
    assert attempts(config)[-1].stopped_by == "daemon"
    # `current` names the live attempt's log for humans
    assert os.readlink(config.paths.log_dir / "current") == os.path.basename(second.log)


def test_port_collision_is_port_in_use_not_the_warmup_failure(tmp_path, runtime, models, supervise):
    """Breaks: another listener on SGLang's port. Must hold: the daemon acts on uvicorn's
    bind error as soon as it is logged (0.5.9 would wait for a warmup failure, or forever)
    and names that line, not a later consequence."""
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    try:
        config = write_config(
            tmp_path,
            runtime,
            models["tiny"],
            args={"port": blocker.getsockname()[1]},
            policy={"max_attempts": 1},
        )
        running = supervise(config)
        running.wait_state(ServerState.GAVE_UP, timeout_s=300)
        (attempt,) = attempts(config)
        assert attempt.failure_class == "port_in_use"
        assert (
            "[Errno 98]" in attempt.root_cause_line
            and "address already in use" in attempt.root_cause_line
        )
        assert "warmup error" not in Path(attempt.log).read_text()
        assert "crash-loop limit" in running.daemon.gave_up_reason
        running.stop()
        assert_all_gone(set(leaders(config)))
    finally:
        blocker.close()


def test_invalid_flag_is_not_retried_unchanged(tmp_path, runtime, models, supervise):
    """Breaks: a flag SGLang does not know. Must hold: invalid_argument, caught against the
    installed SGLang's real --help before any launch, no second launch of the same command
    (the second profile changes nothing), gave_up with the reason."""
    config = write_config(
        tmp_path,
        runtime,
        models["tiny"],
        args={"sentinel-no-such-flag": True},
        profiles=[{"name": "first"}, {"name": "same-command"}],
    )
    running = supervise(config)
    running.wait_state(ServerState.GAVE_UP, timeout_s=120)
    (attempt,) = attempts(config)
    assert attempt.failure_class == "invalid_argument"
    assert attempt.processes == [] and attempt.exit_code is None  # never launched
    assert attempt.root_cause_line.startswith("--sentinel-no-such-flag: not a flag of SGLang 0.5.9")
    assert "no later profile changes it" in running.daemon.gave_up_reason
    running.stop()


def test_pool_oom_without_a_ladder_is_fixed_by_the_calibrated_planner(
    tmp_path, runtime, models, supervise
):
    """Breaks: a static budget too small for the weights, and no fallback profile at all.
    Must hold: the automatic remedy computes a fraction from the failed attempt's own log
    lines (bounded by max_mem_fraction_static), and the second attempt serves with it."""
    config = write_config(
        tmp_path,
        runtime,
        models["large"],
        args={"mem-fraction-static": 0.005},
        policy={"max_mem_fraction_static": 0.9, "preflight": "off"},
    )
    running = supervise(config)
    running.wait_state(ServerState.READY, timeout_s=400)
    first, second = attempts(config)
    assert first.failure_class == "pool_init_oom"
    assert "relaunching with --mem-fraction-static" in first.decision
    assert "planner:" in first.decision
    fraction = float(second.command[second.command.index("--mem-fraction-static") + 1])
    assert 0.005 < fraction <= 0.9
    assert second.extra["patch"]["set"] == {"mem-fraction-static": fraction}
    samples = running.scrape()
    assert samples[("sglang_sentinel_profile_info", (("profile", "default+auto"),))] == 1
    assert samples[("sglang_sentinel_automatic_remedies_total", (("class", "pool_init_oom"),))] == 1
    running.stop()
    assert_all_gone(set(leaders(config)))


def test_scheduler_killed_while_serving_is_classified_and_relaunched(
    tmp_path, runtime, models, supervise
):
    """Breaks: SIGKILL to the serving scheduler (0.5.9's launcher does not notice and keeps
    hanging requests). Must hold: killed_by_signal, a relaunch of the same profile that
    serves again, nothing of the first attempt left."""
    config = write_config(tmp_path, runtime, models["tiny"])
    running = supervise(config)
    running.wait_state(ServerState.READY, timeout_s=300)
    first_members = set(running.daemon.attempt.processes.known)
    scheduler = next(
        m
        for m in running.daemon.attempt.processes.alive()
        if (describe(m)["cmdline"] or "").startswith("sglang::scheduler")
    )
    os.kill(scheduler.pid, signal.SIGKILL)  # a process of the daemon's own attempt, by its pid
    running.wait_for(
        lambda: len(attempts(config)) == 2 and running.daemon.state is ServerState.READY,
        300,
        "the relaunched server",
    )
    first = attempts(config)[0]
    assert first.failure_class == "killed_by_signal"
    assert "sglang::scheduler" in first.diagnosis
    assert "retrying profile 'default'" in first.decision
    assert_all_gone(first_members)
    running.stop()
    assert_all_gone(set(leaders(config)))


def test_daemon_kill_9_then_restart_adopts_the_serving_server(tmp_path, runtime, models):
    """Breaks: kill -9 of the daemon while SGLang serves. Must hold: the history is intact,
    SGLang keeps serving, a restarted daemon adopts it (no second launch, pool metrics back
    from its log), and SIGTERM then stops everything."""
    config = write_config(tmp_path, runtime, models["tiny"])
    command = [sys.executable, "-m", "exporter.cli", "run", "--config", str(config.source)]
    metrics_url = f"http://{config.metrics.address}/metrics"
    health = f"http://127.0.0.1:{config.profile_args(0)['port']}/health"

    def serving() -> bool:
        try:
            return (
                "sglang_sentinel_server_up 1.0"
                in httpx.get(metrics_url, timeout=2, trust_env=False).text
            )
        except httpx.HTTPError:
            return False

    daemon = subprocess.Popen(command, start_new_session=True, stderr=subprocess.DEVNULL)
    try:
        wait(serving, 300, "first daemon serving")
        daemon.kill()
        daemon.wait(timeout=10)
        assert httpx.get(health, timeout=5, trust_env=False).status_code == 200
        (record,) = attempts(config)
        assert record.ready_at is not None and not record.ended

        daemon = subprocess.Popen(command, start_new_session=True, stderr=subprocess.DEVNULL)
        wait(serving, 60, "restarted daemon serving")
        text = httpx.get(metrics_url, timeout=2, trust_env=False).text
        assert 'sglang_sentinel_kv_cache_tokens{tp_rank="0"} 4096.0' in text
        assert len(attempts(config)) == 1, "the restarted daemon launched instead of adopting"
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=120) == 0
        assert attempts(config)[0].stopped_by == "daemon"
        assert_all_gone(set(leaders(config)))
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait(timeout=10)
