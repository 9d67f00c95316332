"""Pastes from several nodes: each node's lines under its name, a failure on one node and
its consequences (collectives aborted or timed out) on the others."""

from __future__ import annotations

from exporter.diagnosis.classify import classify
from exporter.diagnosis.taxonomy import FailureClass as C
from exporter.logs.reader import read_log

SITE = "/usr/local/lib/python3.12/dist-packages"
SERVING = (
    "[2026-03-22 15:02:10 TP0] Decode batch, #running-req: 61, #token: 183022, token usage: 0.37,"
    " cuda graph: True, gen throughput (token/s): 402.11, #queue-req: 17"
)
ABORTED = "torch.distributed.DistBackendError: NCCL communicator was aborted on rank 4."
TIMED_OUT = (
    "[rank3]:[E311 09:52:24.118402 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=41288, OpType=ALLREDUCE, NumelIn=1, "
    "NumelOut=1, Timeout(ms)=600000) ran for 600004 milliseconds before timing out."
)


def run(lines: list[str]):
    return classify(*read_log("\n".join(lines) + "\n"))


def crash(error: str, path: str, source: str) -> list[str]:
    return [
        "[2026-03-22 15:02:12 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        f'  File "{SITE}/sglang/srt/managers/scheduler.py", line 3169, in run_scheduler_process',
        "    scheduler.event_loop_overlap()",
        f'  File "{SITE}/{path}", line 622, in cache_unfinished_req',
        f"    {source}",
        error,
    ]


def test_a_nodes_name_before_its_lines_is_peeled_once_it_stood_before_a_record():
    lines = [
        "[node1] [2026-03-11 09:42:31 TP8] Scheduler hit an exception: Traceback (most recent call"
        " last):",
        f'[node1]   File "{SITE}/sglang/srt/server_args.py", line 9, in check_server_args',
        "[node1]     check()",
        "[node1] ValueError: --tp-size 3 does not divide the 32 attention heads",
    ]
    parsed, _ = read_log("\n".join(lines))
    assert [line.message for line in parsed[1:]] == [
        f'File "{SITE}/sglang/srt/server_args.py", line 9, in check_server_args',
        "check()",
        "ValueError: --tp-size 3 does not divide the 32 attention heads",
    ]
    assert parsed[3].raw == lines[3]  # the root line is quoted as pasted
    result = run(lines)
    assert (result.failure_class, result.root_cause_line) == (C.INVALID_ARGUMENT, lines[3])


def test_a_librarys_own_bracketed_tag_is_not_taken_for_a_nodes_name():
    tagged = ["[aiter] import [module_aiter_enum] under /opt/aiter/jit", "[c10d] connect failed"]
    assert [line.message for line in read_log("\n".join(tagged))[0]] == tagged


def test_the_state_pool_with_no_free_slot_is_the_cause_of_the_peers_aborted_collective():
    """SGLang's radix cache asserting that no mamba state slot is free (0.5.16+) names the
    condition; the other node's communicator, aborted ten minutes later, is its consequence."""
    node0 = crash(
        "AssertionError: Can not alloc mamba cache",
        "sglang/srt/mem_cache/mamba_radix_cache.py",
        'assert mamba_value_forked is not None, "Can not alloc mamba cache"',
    )
    lines = [f"(SGLangNodeActor pid=9121, ip=10.2.7.15) {line}" for line in [SERVING, *node0]]
    lines.append(f"(SGLangNodeActor pid=4410, ip=10.2.7.16) {ABORTED}")
    result = run(lines)
    assert result.failure_class is C.MAMBA_CACHE_EXHAUSTED
    assert result.root_cause_line.endswith("AssertionError: Can not alloc mamba cache")
    assert run([SERVING, ABORTED]).failure_class is C.DISTRIBUTED_INIT  # alone, what it says


def test_nvshmem_failing_to_set_up_on_one_node_is_the_cause_of_the_others_timeouts():
    nvshmem = [
        "[node1] /sgl-workspace/nvshmem/src/modules/transport/ibgda/ibgda.cpp:3345: NULL value mem "
        "registration failed (register with cuda_mmap failed, is nvidia_peermem or dmabuf enabled?)",
        "[node1] /sgl-workspace/nvshmem/src/host/init/init.cu:1007: non-zero status: 7 "
        "nvshmemi_common_init failed ...",
    ]
    result = run([*nvshmem, f"[node0] {TIMED_OUT}"])
    assert (result.failure_class, result.root_cause_line) == (C.DISTRIBUTED_INIT, nvshmem[0])
    assert run([SERVING, TIMED_OUT]).failure_class is C.HANG_TIMEOUT  # alone, the hang it says


def test_a_pod_evicted_is_the_cause_of_its_peers_timeout_though_pasted_after_it():
    """``kubectl describe`` comes after the logs, its events stamped only with their age: an
    eviction is a kill from outside for its own reasons, whatever the peers logged first."""
    evicted = (
        "  Warning  Evicted    2m14s  kubelet            The node was low on resource: "
        "ephemeral-storage. Threshold quantity: 10%, available: 7.9%."
    )
    describe = ["$ kubectl describe pod dsv31-0-1 | tail -3", "Events:", evicted]
    result = run([SERVING, TIMED_OUT, *describe])
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, evicted.strip())


def test_a_time_limit_pasted_after_a_collective_timeout_is_the_hangs_end_not_its_cause():
    cancelled = (
        "slurmstepd: error: *** STEP 771204.0 ON gpu-c14 CANCELLED AT 2026-03-11T13:59:59 DUE TO "
        "TIME LIMIT ***"
    )
    result = run([SERVING, TIMED_OUT, cancelled])
    assert result.failure_class is C.HANG_TIMEOUT
