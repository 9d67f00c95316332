"""Startup progress from SGLang's log (phase, weight shards, CUDA-graph batch sizes), the
stall check built on it, and their metrics."""

from __future__ import annotations

from exporter.attempt.attempt_log import AttemptLog
from exporter.attempt.progress import AttemptProgress, Step
from exporter.attempt.snapshot import Snapshot
from exporter.attempt.states import ServerState
from exporter.logs.events import EventKind
from exporter.logs.reader import read_log
from exporter.metrics import families
from exporter.supervisor.preflight import Preflight
from exporter.supervisor.startup import startup_overdue
from tests.conftest import exposed_samples

# As 0.5.9 prints them (sglang-internals.md §8.2 and §2.4): the shard bar one line per
# shard, the graph bar redrawn with \r.
SHARDS = [
    "[2026-05-14 08:40:12 TP0] Load weight begin. avail mem=46.86 GB",
    "Loading safetensors checkpoint shards:   0% Completed | 0/12 [00:00<?, ?it/s]",
    "Loading safetensors checkpoint shards:   8% Completed | 1/12 [00:05<00:59,  5.41s/it]",
    "Loading safetensors checkpoint shards:  17% Completed | 2/12 [00:10<00:50,  5.02s/it]",
]
GRAPHS = (
    "Capturing batches (bs=8 avail_mem=0.62 GB):   0%|          | 0/4 [00:00<?, ?it/s]\r"
    "Capturing batches (bs=4 avail_mem=0.60 GB):  50%|#####     | 2/4 [00:01<00:01,  1.1s/it]"
)


def test_shard_and_graph_bars_are_parsed():
    _, events = read_log("\n".join(SHARDS) + "\n" + GRAPHS)
    shards = [e for e in events if e.kind is EventKind.WEIGHT_SHARDS]
    assert [(e.get("loaded"), e.get("total")) for e in shards] == [(0, 12), (1, 12), (2, 12)]
    graphs = [e for e in events if e.kind is EventKind.CUDA_GRAPH_BATCHES]
    assert [(e.get("batch_size"), e.get("captured"), e.get("total")) for e in graphs] == [
        (8, 0, 4),
        (4, 2, 4),
    ]


def test_progress_counts_shards_and_graphs_and_a_redraw_is_no_advance():
    progress = AttemptProgress()
    progress.apply(read_log("\n".join(SHARDS))[1])
    assert progress.step is Step.LOADING_WEIGHTS and progress.shards == (2, 12)
    assert progress.ratio("shards") == 2 / 12 and progress.ratio("graph_batches") is None
    assert progress.where() == "step 'loading_weights', 2/12 weight shards loaded"
    before = progress.advances
    progress.apply(read_log(SHARDS[-1])[1])  # the same count again
    assert progress.advances == before
    progress.apply(read_log(GRAPHS)[1])
    assert progress.step is Step.CAPTURING_GRAPHS and progress.graph_batches == (2, 4)
    assert progress.advances == before + 2
    assert progress.where() == "step 'capturing_graphs', 2/4 CUDA-graph batch sizes captured"
    assert progress.copy().graph_batches == (2, 4)


def test_attempt_log_keeps_when_the_startup_last_moved():
    now = [100.0]
    attempt = AttemptLog("0.5.9", clock=lambda: now[0])
    attempt.feed(SHARDS[:2])
    assert attempt.last_progress_at == 100.0
    now[0] = 150.0
    attempt.feed(['[2026-05-14 08:40:13] INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 503'])
    assert attempt.last_progress_at == 100.0 and attempt.last_line_at == 150.0
    attempt.feed(SHARDS[2:3])
    assert attempt.last_progress_at == 150.0


def test_startup_is_judged_by_progress_with_an_outer_cap():
    progress = AttemptProgress()
    progress.apply(read_log("\n".join(SHARDS))[1])
    # Moving: 1000 s after launch but 10 s since the last shard.
    assert startup_overdue(progress, 0.0, 990.0, 1000.0, 300.0, 3600.0) is None
    stalled = startup_overdue(progress, 0.0, 700.0, 1000.0, 300.0, 3600.0)
    assert stalled.startswith("no startup progress for 300 s (startup_stall_s 300 s)")
    assert stalled.endswith("stalled at step 'loading_weights', 2/12 weight shards loaded")
    # Nothing printed at all: counted from the launch.
    assert startup_overdue(AttemptProgress(), 0.0, None, 299.0, 300.0, 3600.0) is None
    assert "step 'spawned'" in startup_overdue(AttemptProgress(), 0.0, None, 300.0, 300.0, 3600.0)
    capped = startup_overdue(progress, 0.0, 3600.0, 3601.0, 300.0, 3600.0)
    assert capped.startswith("not serving 3601 s after launch (the startup_timeout_s cap")
    progress.ready = True  # ready: the health probes judge it now, the cap still holds
    assert startup_overdue(progress, 0.0, 0.0, 3000.0, 300.0, 3600.0) is None


def samples(snapshot: Snapshot) -> dict[tuple[str, tuple], float]:
    return {
        (name, tuple(labels.values())): value
        for name, found in exposed_samples(families(snapshot)).items()
        for labels, value in found
    }


def test_progress_and_planned_metrics():
    progress = AttemptProgress()
    progress.apply(read_log("\n".join(SHARDS) + "\n" + GRAPHS)[1])
    planned = Preflight(
        mode="fix",
        verdict="pool_init_oom",
        reason="r",
        launch_verdict="fits",
        planned_tokens=279712,
        applied=True,
    )
    got = samples(
        Snapshot(ServerState.STARTING, progress=progress, last_progress_time=5.0, preflight=planned)
    )
    assert got[("sglang_sentinel_startup_progress_ratio", ("loading_weights",))] == 2 / 12
    assert got[("sglang_sentinel_startup_progress_ratio", ("capturing_graphs",))] == 0.5
    assert got[("sglang_sentinel_startup_last_progress_timestamp_seconds", ())] == 5.0
    assert got[("sglang_sentinel_planned_kv_cache_tokens", ())] == 279712
    assert got[("sglang_sentinel_planned_verdict", ("fits",))] == 1
    assert got[("sglang_sentinel_planned_verdict", ("pool_init_oom",))] == 0
    assert got[("sglang_sentinel_planned_verdict", ("unknown",))] == 0
    empty = samples(Snapshot(ServerState.STARTING))
    assert not any(name.startswith("sglang_sentinel_planned") for name, _ in empty)
