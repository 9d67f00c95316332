"""The daemon's pre-flight and its progress-based startup stall, driven by the scripted
launcher (tests/harness/scripted.py); the real SGLang's side is in tests/e2e."""

from __future__ import annotations

import json

from exporter.app import build_daemon
from exporter.attempt.states import ServerState
from exporter.config import load_config
from exporter.history import History
from tests.diagnosis.planner.test_planner import A6000, INCIDENT, QWEN36
from tests.supervisor.test_daemon import identities, in_thread, stop, wait_for, write

SHARD = "Loading safetensors checkpoint shards: {p:3d}% Completed | {k}/8 [00:0{k}<00:05, 1.00s/it]"
WEIGHTS_BEGIN = "[2026-01-01 10:00:00] Load weight begin. avail mem=20.00 GB"


def history(config):
    return History(config.paths.state_dir).read().attempts


def run_until_launched(config, launches: int = 1) -> list:
    daemon = build_daemon(config)
    thread = in_thread(daemon)
    wait_for(lambda: len([a for a in history(config) if a.started_at]) >= launches)
    stop(daemon, thread)
    return history(config)


def startup_that_prints(tmp_path, shards: int, interval: float):
    lines = [WEIGHTS_BEGIN] + [SHARD.format(p=k * 100 // 8, k=k) for k in range(shards)]
    path = write(
        tmp_path,
        {"line": lines, "line-interval": interval, "sleep": 600.0},
        policy={"startup_stall_s": 1.5, "max_attempts": 1, "preflight": "off"},
    )
    return load_config(path)


def test_a_slow_startup_that_progresses_is_not_killed_one_that_stops_is_at_the_stall(tmp_path):
    """Shards arrive every 0.6 s for 3 s (twice startup_stall_s), then nothing: the hang is
    called about startup_stall_s after the last shard, naming where it stalled."""
    config = startup_that_prints(tmp_path, shards=6, interval=0.6)
    daemon = build_daemon(config)
    thread = in_thread(daemon)
    wait_for(lambda: daemon.state is ServerState.GAVE_UP, 20)
    stop(daemon, thread)
    (attempt,) = history(config)
    ran = attempt.ended_at - attempt.started_at
    assert 3.0 + 1.5 <= ran <= 3.0 + 1.5 + 3.5, ran  # the last shard, the stall, a tick
    assert attempt.failure_class == "hang_timeout"
    assert "stalled at step 'loading_weights', 5/8 weight shards loaded" in attempt.diagnosis
    assert attempt.phase_reached == "loading_weights"
    assert not any(i.alive() for i in identities(config))


def test_a_startup_that_prints_nothing_is_a_hang_at_the_stall_not_the_cap(tmp_path):
    config = startup_that_prints(tmp_path, shards=0, interval=0.0)
    daemon = build_daemon(config)
    thread = in_thread(daemon)
    wait_for(lambda: daemon.state is ServerState.GAVE_UP, 20)
    stop(daemon, thread)
    (attempt,) = history(config)
    assert 1.5 <= attempt.ended_at - attempt.started_at <= 4.0
    assert config.policy.startup_timeout_s == 30.0  # the cap was far
    assert "stalled at step 'loading_weights'" in attempt.diagnosis


def incident(tmp_path, mode: str, model: str | None = None):
    directory = tmp_path / "Qwen3.6-27B"
    directory.mkdir(exist_ok=True)
    (directory / "config.json").write_text(json.dumps(QWEN36))
    args = {
        "model-path": model or str(directory),
        **{key: value for key, value in INCIDENT.items() if key != "speculative-algo"},
        "speculative-algorithm": "NEXTN",
        "sleep": 600.0,
    }
    return load_config(write(tmp_path, args, policy={"preflight": mode}))


def a6000s(nvml) -> None:
    nvml.devices = [(uuid, A6000, 0, A6000, 0) for uuid, *_ in nvml.devices]
    nvml.write()


def test_fix_changes_the_seed_incidents_command_before_its_first_launch(tmp_path, nvml):
    """Two A6000s (fake NVML): the incident's command is predicted to die in pool sizing
    and launched with fewer running requests; the history holds the pre-flight."""
    a6000s(nvml)
    config = incident(tmp_path, "fix")
    (attempt,) = run_until_launched(config)
    planned = attempt.preflight
    assert planned["verdict"] == "pool_init_oom" and planned["applied"] is True
    assert planned["reason"].startswith("speculative decoding reserved 13.8 GiB")
    assert planned["memory_source"] == "NVML, GPU 0, 1"
    assert planned["launch_verdict"] == "fits" and planned["planned_kv_cache_tokens"] >= 32768
    (changed,) = planned["change"]["set"].items()
    assert changed[0] == "max-running-requests"
    assert attempt.command[attempt.command.index("--max-running-requests") + 1] == str(changed[1])
    assert attempt.profile == "default" and attempt.extra["patch"]["set"] == dict([changed])
    assert planned["time"] <= attempt.started_at


def test_warn_launches_unchanged_and_off_plans_nothing(tmp_path, nvml):
    a6000s(nvml)
    for mode in ("warn", "off"):
        (tmp_path / mode).mkdir()
    (attempt,) = run_until_launched(incident(tmp_path / "warn", "warn"))
    assert attempt.preflight["verdict"] == "pool_init_oom"
    assert attempt.preflight["applied"] is False and "--max-running-requests" not in attempt.command
    (attempt,) = run_until_launched(incident(tmp_path / "off", "off"))
    assert attempt.preflight is None


def test_an_unreadable_model_never_blocks_the_launch(tmp_path, nvml):
    config = incident(tmp_path, "fix", model=str(tmp_path / "missing-model"))
    (attempt,) = run_until_launched(config)
    assert attempt.preflight["verdict"] == "unknown"
    assert "missing-model" in attempt.preflight["reason"]
    assert attempt.processes, "launched all the same"
