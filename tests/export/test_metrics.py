"""The exposition: names, types, labels from closed sets, valid for promtool."""

from __future__ import annotations

import shutil
import subprocess

from hypothesis import given, settings
from prometheus_client.parser import text_string_to_metric_families

from exporter.attempt.progress import AttemptProgress
from exporter.attempt.snapshot import Snapshot
from exporter.attempt.states import ServerState
from exporter.diagnosis.taxonomy import FailureClass
from exporter.exposition import render
from exporter.logs.reader import read_log
from exporter.metrics import families
from tests.conftest import GOLDEN, exposed_samples
from tests.logs.test_fuzz_logs import logs

POOLS = {
    "kv",
    "draft_kv",
    "mamba_conv",
    "mamba_ssm",
    "mamba_intermediate_ssm",
    "mamba_intermediate_conv",
}
MILESTONES = {"before_weights", "after_weights", "after_pools", "after_graphs", "ready"}


def progress_of(text: str) -> AttemptProgress:
    progress = AttemptProgress()
    progress.apply(read_log(text)[1])
    return progress


def exposition(snapshot: Snapshot) -> str:
    """What /metrics serves for this snapshot."""
    return render(families(snapshot)).decode()


def serving_snapshot() -> Snapshot:
    return Snapshot(
        state=ServerState.READY,
        profile="fewer-requests",
        profile_index=1,
        attempts_total=2,
        restarts={"pool_init_oom": 1},
        failures={"pool_init_oom": 1},
        last_failure_time={"pool_init_oom": 1764400000.0},
        startup_duration_s=83.2,
        progress=progress_of((GOLDEN / "sglang-0.5.9-serve-hybrid-tp2.log").read_text()),
        log_lines={True: 40, False: 20},
    )


def test_state_is_one_hot_and_up_follows_ready():
    text = exposition(serving_snapshot())
    for state in ServerState:
        value = "1.0" if state is ServerState.READY else "0.0"
        assert f'sglang_sentinel_server_state{{state="{state.value}"}} {value}' in text
    assert "sglang_sentinel_server_up 1.0" in text
    assert "sglang_sentinel_server_up 0.0" in exposition(Snapshot(state=ServerState.BACKOFF))


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_pool_metrics_per_rank_in_base_units():
    got = samples(exposition(serving_snapshot()))
    assert got[("sglang_sentinel_kv_cache_tokens", (("tp_rank", "1"),))] == 373672
    assert got[("sglang_sentinel_mamba_cache_slots", (("tp_rank", "0"),))] == 8
    assert got[("sglang_sentinel_weights_bytes", (("tp_rank", "0"),))] == round(25.56 * 2**30)
    kv = (("pool", "kv"), ("tp_rank", "0"))
    assert got[("sglang_sentinel_memory_pool_bytes", kv)] == 2 * round(5.70 * 2**30)
    draft = (("pool", "draft_kv"), ("tp_rank", "0"))
    assert got[("sglang_sentinel_memory_pool_bytes", draft)] == 2 * round(0.36 * 2**30)
    before = (("phase", "before_weights"), ("tp_rank", "0"))
    assert got[("sglang_sentinel_device_available_bytes", before)] == round(46.86 * 2**30)


def test_counters_and_info():
    text = exposition(serving_snapshot())
    assert 'sglang_sentinel_restarts_total{reason="pool_init_oom"} 1.0' in text
    assert 'sglang_sentinel_failures_total{class="pool_init_oom"} 1.0' in text
    assert 'sglang_sentinel_profile_info{profile="fewer-requests"} 1.0' in text
    assert "sglang_sentinel_fallback_level 1.0" in text
    assert 'sglang_sentinel_log_lines_total{matched="false"} 20.0' in text
    assert "# TYPE sglang_sentinel_attempts_total counter" in text


def test_promtool_accepts_the_exposition():
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: ./dev test installs it (scripts/install-test-deps)"
    for snapshot in (serving_snapshot(), Snapshot(state=ServerState.STOPPED)):
        done = subprocess.run(
            [promtool, "check", "metrics"],
            input=exposition(snapshot).encode(),
            capture_output=True,
            timeout=30,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr


@settings(max_examples=150, deadline=None)
@given(logs)
def test_label_values_stay_in_their_sets_whatever_the_log_says(text):
    snapshot = Snapshot(state=ServerState.STARTING, progress=progress_of(text))
    for series in exposed_samples(families(snapshot)).values():
        for labels, _value in series:
            if "tp_rank" in labels:
                assert labels["tp_rank"].isdigit() and int(labels["tp_rank"]) < 1024
            assert labels.get("pool", "kv") in POOLS
            assert labels.get("phase", "ready") in MILESTONES
            assert labels.get("class", "other") in {c.value for c in FailureClass}
