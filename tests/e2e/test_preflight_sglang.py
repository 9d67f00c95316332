"""The pre-flight on the real SGLang 0.5.9 (CPU): a launch predicted to die in pool sizing is
changed before it costs a weight load, the prediction is checked against SGLang's own log,
and the real weight shards' progress is exported while they load.

The model is the "large" tiny Qwen2 with real safetensors shards (--load-format auto), so
SGLang loads a checkpoint for real and prints its "Loading safetensors checkpoint shards"
bar; --mem-fraction-static 0.005 leaves the weights no static budget (pool_init_oom).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from exporter.attempt.states import ServerState
from exporter.history import History
from exporter.sglang_cpu.models import SHARDS
from tests.e2e.conftest import write_config

RATIO = "sglang_sentinel_startup_progress_ratio"
WEIGHTS = (("phase", "loading_weights"),)
TWO_PROFILES = [{"name": "tight"}, {"name": "roomy", "set": {"mem-fraction-static": 0.5}}]


def attempts(config):
    return History(config.paths.state_dir).read().attempts


def logged_tokens(attempt) -> int:
    return int(
        re.search(r"KV Cache is allocated\. #tokens: (\d+)", Path(attempt.log).read_text())[1]
    )


def test_fix_serves_on_the_first_launch_and_exports_shard_progress(
    tmp_path, runtime, models, supervise
):
    """Breaks: a first profile whose weights exceed the static budget. Must hold: the
    pre-flight predicts pool_init_oom before any launch, the first and only launch runs
    with the planner's fraction and serves, the history holds the pre-flight, and the
    weight shards' progress is on /metrics while the server is still starting."""
    config = write_config(
        tmp_path,
        runtime,
        models["large"],
        args={"mem-fraction-static": 0.005, "load-format": "auto"},
        profiles=TWO_PROFILES,
        policy={"preflight": "fix", "max_mem_fraction_static": 0.9},
    )
    running = supervise(config)
    seen_while_starting = []
    deadline = time.monotonic() + 400
    while running.daemon.state is not ServerState.READY and time.monotonic() < deadline:
        if running.daemon.state is ServerState.STARTING:
            ratio = running.scrape().get((RATIO, WEIGHTS))
            if ratio is not None and running.daemon.state is ServerState.STARTING:
                seen_while_starting.append(ratio)
        time.sleep(0.2)
    running.wait_state(ServerState.READY, timeout_s=5)

    (attempt,) = attempts(config)  # served on the first launch
    planned = attempt.preflight
    assert planned["verdict"] == "pool_init_oom" and planned["applied"] is True
    assert planned["reason"].startswith("the headroom --mem-fraction-static keeps out")
    assert planned["memory_source"] == "host memory (CPU engine)"
    fraction = planned["change"]["set"]["mem-fraction-static"]
    assert 0.005 < fraction <= 0.9
    assert attempt.command[attempt.command.index("--mem-fraction-static") + 1] == str(fraction)
    assert attempt.profile == "tight" and attempt.ready_at is not None
    samples = running.scrape()
    assert samples[("sglang_sentinel_profile_info", (("profile", "tight+auto"),))] == 1
    assert samples[("sglang_sentinel_planned_verdict", (("verdict", "fits"),))] == 1
    assert (
        samples[("sglang_sentinel_planned_kv_cache_tokens", ())]
        == planned["planned_kv_cache_tokens"]
    )
    # The real shard bar, read while SGLang was still starting, and complete at the end.
    assert seen_while_starting, "no shard progress exported during the startup"
    assert set(seen_while_starting) <= {k / SHARDS["large"] for k in range(SHARDS["large"] + 1)}
    assert samples[(RATIO, WEIGHTS)] == 1.0
    assert running.daemon.attempt.log.progress.shards == (SHARDS["large"], SHARDS["large"])
    log = Path(attempt.log).read_text()
    assert f"Loading safetensors checkpoint shards: 100% Completed | 4/{SHARDS['large']}" in log
    assert "load_format='auto'" in log  # the files were loaded, not dummy weights
    running.stop()


def test_warn_crashes_and_falls_back_and_the_calibrated_prediction_equals_the_log(
    tmp_path, runtime, models, supervise
):
    """Breaks: the same budget with the pre-flight only warning. Must hold: the first
    launch is predicted to fail and launched unchanged, fails with pool_init_oom and falls
    back as without a pre-flight; the fallback's pre-flight is calibrated from the failed
    attempt's log (same model, same device) and predicts exactly the #tokens SGLang logs."""
    config = write_config(
        tmp_path,
        runtime,
        models["large"],
        args={"mem-fraction-static": 0.005, "load-format": "auto"},
        profiles=TWO_PROFILES,
        policy={"preflight": "warn"},
    )
    running = supervise(config)
    running.wait_state(ServerState.READY, timeout_s=400)
    first, second = attempts(config)
    assert first.preflight["verdict"] == "pool_init_oom" and first.preflight["applied"] is False
    assert "--mem-fraction-static" in first.command
    assert first.command[first.command.index("--mem-fraction-static") + 1] == "0.005"
    assert first.failure_class == "pool_init_oom"
    assert "falling back from profile 'tight' to 'roomy'" in first.decision
    assert second.profile == "roomy" and second.ready_at is not None
    assert second.preflight["calibrated"] is True and second.preflight["verdict"] == "fits"
    assert second.preflight["planned_kv_cache_tokens"] == logged_tokens(second)
    samples = running.scrape()
    assert samples[("sglang_sentinel_planned_kv_cache_tokens", ())] == logged_tokens(second)
    running.stop()
