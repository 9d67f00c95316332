"""The classifier's rules, one behaviour per test, on small logs shaped like real ones."""

from __future__ import annotations

import pytest

from exporter.diagnosis.classify import Confidence, Outcome, classify
from exporter.diagnosis.taxonomy import DETERMINISTIC, Phase
from exporter.diagnosis.taxonomy import FailureClass as C
from exporter.logs.events import EventKind
from exporter.logs.reader import read_log
from tests.conftest import GOLDEN


def run(text: str, outcome: Outcome | None = None):
    return classify(*read_log(text), outcome)


TRACEBACK = """[2026-01-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/x/sglang/srt/managers/scheduler.py", line 3130, in run_scheduler_process
    scheduler = Scheduler(
  File "{path}", line 10, in {func}
    do()
{exception}
[2026-01-01 10:00:00] Received sigquit from a child process. It usually means the child failed.
Killed
"""


def oom_in(path: str, func: str, before: str = "") -> str:
    exc = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 79.10 GiB of which 1.00 GiB is free."
    )
    return before + TRACEBACK.format(path=path, func=func, exception=exc)


def test_incident_pool_oom_explains_the_budget():
    text = (GOLDEN / "sglang-0.5.9-pool-init-oom-incident.log").read_text()
    result = run(text)
    assert result.failure_class is C.POOL_INIT_OOM
    assert result.root_cause_line.startswith("RuntimeError: Not enough memory.")
    copies = [n for n, line in enumerate(text.splitlines(), 1) if line == result.root_cause_line]
    assert len(copies) == 2 and result.root_cause_number == copies[0]  # TP0's, not TP1's later copy
    assert "46.86 GiB free before weights" in result.diagnosis
    assert "25.56 GiB of weights" in result.diagnosis
    assert "--mem-fraction-static=0.85 holds back 7.03 GiB" in result.diagnosis
    assert "max_running_requests=48" in result.diagnosis
    assert result.to_json()["mem_fraction_static"] == "raise"
    assert result.phase is Phase.STARTUP


def test_0_5_23_pool_wording_and_version():
    result = run((GOLDEN / "sglang-0.5.23-pool-init-oom.log").read_text())
    assert result.failure_class is C.POOL_INIT_OOM
    assert result.root_cause_line.startswith("ValueError: Loaded weights leave no GPU memory")
    assert result.sglang_version == "0.5.23"


def test_graph_capture_wrapper_around_oom_is_cuda_graph_oom_and_cause_is_inner():
    result = run((GOLDEN / "sglang-0.5.9-cuda-graph-oom.log").read_text())
    assert result.failure_class is C.CUDA_GRAPH_OOM
    assert result.to_json()["mem_fraction_static"] == "lower"
    assert "the pools left 1.05 GiB for CUDA graphs" in result.diagnosis


def test_graph_capture_wrapper_around_non_oom_is_not_an_oom():
    log = """Traceback (most recent call last):
  File "/x/flashinfer/jit/core.py", line 4, in build
RuntimeError: Ninja is required to load C++ extensions

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/x/sglang/srt/model_executor/cuda_graph_runner.py", line 372, in __init__
Exception: Capture cuda graph failed: Ninja is required to load C++ extensions
Possible solutions:
1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)
"""
    result = run(log)
    assert result.failure_class is C.KERNEL_ERROR
    assert result.root_cause_line == "RuntimeError: Ninja is required to load C++ extensions"


def test_same_oom_text_is_classified_by_where_it_happened():
    assert (
        run(oom_in("/x/sglang/srt/model_loader/loader.py", "load_model")).failure_class
        is C.WEIGHTS_OOM
    )
    assert (
        run(oom_in("/x/sglang/srt/mem_cache/memory_pool.py", "_create_buffers")).failure_class
        is C.POOL_INIT_OOM
    )
    assert (
        run(
            oom_in("/x/sglang/srt/model_executor/cuda_graph_runner.py", "capture_one_batch_size")
        ).failure_class
        is C.CUDA_GRAPH_OOM
    )
    runtime = run(oom_in("/x/sglang/srt/managers/scheduler.py", "event_loop_normal"))
    assert (runtime.failure_class, runtime.phase) == (C.RUNTIME_OOM, Phase.RUNTIME)


def test_oom_without_frames_uses_the_last_startup_step():
    before = "[2026-01-01 09:59:00 TP0] Load weight begin. avail mem=15.27 GB\n"
    result = run(oom_in("/x/torch/nn/modules/module.py", "_apply", before))
    assert result.failure_class is C.WEIGHTS_OOM
    assert "15.27 GiB free when loading began" in result.diagnosis


ALLOCATOR_REPORT = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB. GPU 2 has a total "
    "capacity of 23.56 GiB of which 254.50 MiB is free. Including non-PyTorch memory, this process "
    "has 23.30 GiB memory in use. Of the allocated memory 22.89 GiB is allocated by PyTorch, "
    "{pools}and 8.74 MiB is reserved by PyTorch but unallocated."
)


def test_a_pasted_oom_line_is_placed_by_the_graph_memory_it_reports():
    """Nothing around it: with no memory in CUDA graphs' private pools and the GPU filled to
    its last few hundred MiB the graphs were not captured yet, so startup, where the weights
    are; with some, or gigabytes left free, a serving server's."""
    startup = run(ALLOCATOR_REPORT.format(pools="") + "\n")
    serving = run(
        ALLOCATOR_REPORT.format(
            pools="with 412.00 MiB allocated in private pools (e.g., CUDA Graphs), "
        )
        + "\n"
    )
    assert (startup.failure_class, startup.phase) == (C.WEIGHTS_OOM, Phase.STARTUP)
    assert serving.failure_class is C.RUNTIME_OOM
    # gigabytes still free that a batch's activations did not fit in: the pools were sized,
    # the server was serving
    batch = ALLOCATOR_REPORT.format(pools="").replace("256.00 MiB. ", "9.77 GiB. ")
    batch = run(batch.replace("254.50 MiB is free", "6.02 GiB is free") + "\n")
    assert batch.failure_class is C.RUNTIME_OOM
    # A guess either way: no automatic remedy acts on it.
    assert startup.confidence is not Confidence.HIGH and serving.confidence is not Confidence.HIGH


def test_an_oom_a_request_got_as_its_reply_is_a_serving_one():
    reply = '{"error":{"message":"' + ALLOCATOR_REPORT.format(pools="") + '","code":500}}'
    assert run(reply + "\n").failure_class is C.RUNTIME_OOM


def test_an_oom_after_the_multithreaded_loaders_last_shard_is_still_loading():
    """SGLang's multi-threaded loader draws its own bar; the quantization and MoE backends
    repack the weights after the last shard, before "Load weight end"."""
    log = (
        "Multi-thread loading shards: 100% Completed | 142/142 [00:25<00:00,  5.66it/s]\n"
        "[2026-04-16 01:02:09 TP1] Failed to initialize lk_moe: "
        + ALLOCATOR_REPORT.format(
            pools="with 24.00 MiB allocated in private pools (e.g., CUDA Graphs), "
        )
        + "\n"
    )
    _, events = read_log(log)
    assert [(e.kind, e.get("loaded")) for e in events][:1] == [(EventKind.WEIGHT_SHARDS, 142)]
    assert run(log).failure_class is C.WEIGHTS_OOM


def test_cudas_error_2_by_number_is_out_of_memory_and_a_retried_allocation_is_not_the_cause():
    log = (
        "[torch_memory_saver.cpp] cuMemCreate CUDA_ERROR_OUT_OF_MEMORY (may not be an issue e.g. "
        "torch allocator will free cache and retry)\n"
        "[torch_memory_saver.cpp] cudaError error: 2 (out of memory)  file=csrc/core.cpp "
        "func=resume line=172\n"
    )
    result = run(log)
    assert result.failure_class is C.RUNTIME_OOM
    assert result.root_cause_line.startswith("[torch_memory_saver.cpp] cudaError error: 2")


def test_port_collision_beats_the_later_warmup_failure():
    log = """[2026-01-01 10:00:00 TP0] max_total_num_tokens=4096, chunked_prefill_size=2048, max_prefill_tokens=16384, max_running_requests=64, context_len=2048, available_cpu_mem=20.00 GB
[2026-01-01 10:00:01] ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): address already in use
[2026-01-01 10:02:01] Initialization failed. warmup error: Traceback (most recent call last):
  File "/x/sglang/srt/entrypoints/http_server.py", line 1700, in _execute_server_warmup
AssertionError: res=<Response [404]>, res.text='{"detail":"Not Found"}'
"""
    result = run(log)
    assert result.failure_class is C.PORT_IN_USE
    assert "[Errno 98]" in result.root_cause_line
    assert "consequence" in result.diagnosis


def test_reversed_export_finds_the_earliest_cause():
    log = "\n".join(
        [
            "ERROR 2025-04-05T00:01:19.50Z ./entrypoint.sh: line 48: 28 Killed python3 -m sglang.launch_server",
            "ERROR 2025-04-05T00:01:19.40Z [2025-04-05 00:01:19] Received sigquit from a child process.",
            "ERROR 2025-04-05T00:01:19.30Z torch.distributed.DistBackendError: NCCL error in: x.cpp:76, unhandled cuda error",
            'ERROR 2025-04-05T00:01:19.20Z   File "/x/torch/distributed/distributed_c10d.py", line 2501, in all_reduce',
            "ERROR 2025-04-05T00:01:19.10Z [2025-04-05 00:01:19 TP0] Scheduler hit an exception: Traceback (most recent call last):",
            "ERROR 2025-04-05T00:01:18.00Z [2025-04-05 00:01:18 TP0] Load weight begin. avail mem=70.00 GB",
        ]
    )
    result = run(log)
    assert result.failure_class is C.DISTRIBUTED_INIT
    assert "DistBackendError" in result.root_cause_line


def test_a_tab_separated_export_newest_first_is_read_in_time_order():
    rows = [
        "2025-06-02T07:41:41.011Z\t[2025-06-02 07:41:41] Received sigquit from a child process.",
        "2025-06-02T07:41:41.010Z\tModuleNotFoundError: No module named 'sgl_kernel.flash_attn'",
        '2025-06-02T07:41:41.009Z\t  File "/x/sglang/srt/model_executor/model_runner.py", line'
        " 304, in initialize",
        "2025-06-02T07:41:41.004Z\t[2025-06-02 07:41:41] Scheduler hit an exception: Traceback"
        " (most recent call last):",
        "2025-06-02T07:41:40.002Z\t[2025-06-02 07:41:40] Load weight end. avail mem=50.83 GB",
    ]
    result = run("@timestamp\t@message\n" + "\n".join(rows) + "\n")
    assert (result.failure_class, result.root_cause_line) == (C.DEPENDENCY_ERROR, rows[1])
    # what the operator typed after the export stays after it: a stall's last line is the
    # server's, not the prompt's
    stalled = [r for r in rows if "Load weight end" in r]
    stalled.insert(
        0,
        rows[-1]
        .replace("07:41:40.002Z", "07:41:45.0Z")
        .replace(
            "Load weight end. avail mem=50.83 GB", "Capture cuda graph begin. avail mem=7.39 GB"
        ),
    )
    typed = "\n^C\n(venv) user@gpu-node:~$ nvidia-smi\n"
    result = run("@timestamp\t@message\n" + "\n".join(stalled) + typed)
    assert (result.failure_class, result.root_cause_line) == (C.HANG_TIMEOUT, stalled[0])


def test_hard_wrapped_decisive_line_is_found_on_its_first_half():
    log = (
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
        "network address. port: 29500, useIpv6: false, code: -98, name: EAD\n"
        "DRINUSE, message: address already in use\n"
    )
    result = run(log.replace("failed to listen on any local network", "failed to bind"))
    assert result.failure_class is C.PORT_IN_USE
    assert result.root_cause_line.endswith("name: EAD")


def test_consequence_after_cause_illegal_memory_access_then_device_busy():
    log = """[2026-01-01 10:00:00 TP3] Scheduler hit an exception: Traceback (most recent call last):
  File "/x/sglang/srt/managers/scheduler.py", line 1, in event_loop_overlap
RuntimeError: CUDA error: an illegal memory access was encountered

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/x/sglang/srt/managers/scheduler.py", line 2, in run_scheduler_process
RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable
"""
    result = run(log)
    assert result.failure_class is C.CUDA_ERROR
    assert result.root_cause_line.endswith("an illegal memory access was encountered")


def test_bare_assertion_error_points_at_the_assert_source_line():
    log = """Traceback (most recent call last):
  File "/x/sglang/srt/layers/attention/triton_ops/extend_attention.py", line 267, in extend_attention_fwd
    assert Lq in {16, 32, 64, 128, 256, 576}
AssertionError
"""
    result = run(log)
    assert result.failure_class is C.KERNEL_ERROR
    assert result.root_cause_line == "assert Lq in {16, 32, 64, 128, 256, 576}"


def test_weak_signal_does_not_beat_a_real_exception():
    log = """Traceback (most recent call last):
  File "/x/deep_gemm/jit_kernels/gemm.py", line 100, in gemm
AssertionError: Unknown cases: sf.dtype=torch.int32, arch=90a
Killed
"""
    result = run(log)
    assert result.failure_class is C.KERNEL_ERROR
    assert result.root_cause_line.startswith("AssertionError: Unknown cases")


def test_retraction_warning_alone_is_kv_pressure_but_a_crash_after_it_wins():
    retract = "[2026-01-01 10:00:00 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 10, #new_token_ratio: 0.1 -> 0.2\n"
    assert run(retract).failure_class is C.KV_POOL_EXHAUSTED
    crashed = run(retract + "Fatal Python error: Segmentation fault\n")
    assert crashed.failure_class is C.KILLED_BY_SIGNAL
    assert crashed.phase is Phase.RUNTIME


def test_healthy_log_is_none():
    result = run((GOLDEN / "sglang-0.5.9-serve-hybrid-tp2.log").read_text())
    assert result.failure_class is C.NONE
    assert result.root_cause_line is None


def test_sglangs_advice_that_a_default_kernel_config_may_be_slow_is_no_failure():
    log = (
        "[2026-11-06 12:03:55 TP0] Using default MoE kernel config. Performance might be "
        "sub-optimal! Config file not found at /sgl-workspace/sglang/python/sglang/srt/layers/"
        "moe/fused_moe_triton/configs/E=257,N=256,device_name=NVIDIA_B200.json\n"  # its hint cut
        "[2026-11-06 12:06:59] The server is fired up and ready to roll!\n"
    )
    assert run(log).failure_class is C.NONE


def test_startup_that_stops_without_error_is_a_hang_and_names_the_last_line():
    log = "[2026-01-01 10:00:00 TP0] Init torch distributed begin.\n[2026-01-01 10:00:00 TP1] Init torch distributed begin.\n"
    result = run(log)
    assert result.failure_class is C.HANG_TIMEOUT
    assert result.root_cause_line.endswith("TP1] Init torch distributed begin.")


def test_outcome_decides_when_the_log_is_silent():
    killed = run("", Outcome(exit_code=-9))
    assert killed.failure_class is C.KILLED_BY_SIGNAL
    assert "killed by signal 9" in killed.diagnosis
    assert run("loading...\n", Outcome(stalled=True)).failure_class is C.HANG_TIMEOUT
    assert run("", Outcome(exit_code=None)).failure_class is C.NONE


def test_argparse_error_is_invalid_argument_and_not_retried():
    log = "usage: launch_server.py [-h] --model-path MODEL_PATH\nlaunch_server.py: error: unrecognized arguments: --foo\n"
    result = run(log, Outcome(exit_code=2))
    assert result.failure_class is C.INVALID_ARGUMENT
    assert result.failure_class in DETERMINISTIC
    assert result.root_cause_line == "launch_server.py: error: unrecognized arguments: --foo"


def test_docker_publishing_a_host_port_another_holds_is_port_in_use():
    refused = (
        "Error response from daemon: failed to set up container networking: driver failed "
        "programming external connectivity on endpoint llm-sglang-1: Bind for 0.0.0.0:30000 "
        "failed: port is already allocated"
    )
    result = run(f"$ docker compose up -d\n{refused}\n")
    assert (result.failure_class, result.root_cause_line) == (C.PORT_IN_USE, refused)


def test_a_wrapper_rejecting_the_servers_flags_as_its_own_is_invalid_argument():
    """getopt's words, a C program's: an init wrapper (dumb-init, tini) handed the server's
    flags because the entrypoint lost its ``--`` or its command."""
    rejected = "sglang-1  | /usr/bin/dumb-init: unrecognized option '--model-path'"
    result = run(f"sglang-1  | Usage: dumb-init [option] command [[arg] ...]\n{rejected}\n")
    assert (result.failure_class, result.root_cause_line) == (C.INVALID_ARGUMENT, rejected)
    assert run("tini: invalid option -- 'z'\n").failure_class is C.INVALID_ARGUMENT


def test_an_adapter_whose_weights_do_not_fit_the_base_models_buffers_is_a_model_load_error():
    log = TRACEBACK.format(
        path="/x/sglang/srt/lora/mem_pool.py",
        func="load_lora_weight_tensor",
        exception="AssertionError: LoRA buffer shape torch.Size([48, 1536]) does not match "
        "weight shape torch.Size([48, 3584]).",
    )
    assert run(log).failure_class is C.MODEL_LOAD_ERROR


ENGINE_STARTED = (
    "[2026-08-24 07:00:12] server_args={'model_path': 'm', 'tp_size': 2}\n"
    "[2026-08-24 07:01:03] max_total_num_tokens=1873152, chunked_prefill_size=8192, "
    "max_prefill_tokens=16384, max_running_requests=2048, context_len=131072, "
    "available_gpu_mem=10.52 GB\n"
    "batches: 100%|##########| 40/40 [18:21<00:00, 27.54s/it]\n"
)


def test_an_in_process_engine_that_shut_itself_down_stopped_cleanly():
    """sgl.Engine never says it serves; Engine.shutdown() ends its tree with
    include_parent=False, as launch_server's finally does on every exit. The crash and
    SIGTERM paths include the parent: a tail of that is a teardown with its cause cut off."""
    own = "[2026-08-24 07:19:26] kill_process_tree called: parent_pid=41, include_parent=False, pid=41\n"
    assert run(ENGINE_STARTED + own).failure_class is C.NONE
    crashed = own.replace("include_parent=False", "include_parent=True")
    assert run(ENGINE_STARTED + crashed).failure_class is C.OTHER
    # A Ctrl-C ends it the same way, and a stuck start it interrupts is still a hang.
    interrupted = ENGINE_STARTED + "^C\nKeyboardInterrupt\n" + own
    assert run(interrupted).failure_class is C.HANG_TIMEOUT


def test_an_option_the_engines_server_args_lack_is_an_invalid_argument():
    log = (
        'File "/x/sglang/srt/entrypoints/engine.py", line 121, in __init__\n'
        "    server_args = ServerArgs(**kwargs)\n"
        "TypeError: ServerArgs.__init__() got an unexpected keyword argument "
        "'gpu_memory_utilization'\n"
    )
    assert run(log).failure_class is C.INVALID_ARGUMENT


def test_an_oom_while_a_serving_engine_takes_new_weights_is_a_runtime_oom():
    """An RL trainer's weight sync goes through the model's load_weights, but at runtime."""
    log = (
        "Traceback (most recent call last):\n"
        '  File "/x/sglang/srt/managers/tp_worker.py", line 9, in update_weights_from_tensor\n'
        "    self.model_runner.update_weights_from_tensor(named_tensors)\n"
        '  File "/x/sglang/srt/models/deepseek_v2.py", line 9, in load_weights\n'
        "    self.post_load_weights()\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 MiB.\n"
    )
    assert run(log).failure_class is C.RUNTIME_OOM
    loading = log.replace("update_weights_from_tensor", "load_model")
    assert run(loading).failure_class is C.WEIGHTS_OOM


def test_a_request_refused_for_its_own_fault_on_a_serving_server_is_no_failure():
    served = (
        "[2026-02-01 10:00:00] The server is fired up and ready to roll!\n"
        "[2026-02-01 10:00:05 TP0] Decode batch, #running-req: 1, #token: 10, token usage: 0.01,"
        " cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 0\n"
    )
    refused = (
        "openai.BadRequestError: Error code: 400 - {'object': 'error', 'message': "
        "'The input (141877 tokens) is longer than the model context length (131072 tokens).'}\n"
    )
    assert run(served + refused + served.splitlines()[1] + "\n").failure_class is C.NONE
    # Nothing served after it: the log does not show the server lived.
    assert run(served + refused).failure_class is C.OTHER
    # ... unless the operator stopped it after: the reply, pasted below, came while it served
    reply = (
        'the client got: {"object":"error","message":"LoRA adapter a1 with rank 64 is '
        'incompatible with the current LoRA memory pool configuration.","type":'
        '"BadRequestError","param":null,"code":400}\n'
    )
    assert run(served + reply).failure_class is C.INVALID_ARGUMENT
    stopped = "^C[2026-02-01 10:01:00] INFO:     Shutting down\n\n"
    assert run(served + stopped + reply).failure_class is C.NONE


def test_a_group_sglang_could_not_form_is_rooted_at_its_own_line_quoting_c10d():
    log = (
        "[2025-03-14 09:31:52 TP0] Failed to initialize custom process group: The client socket "
        "has timed out after 600000ms while trying to connect to (10.244.3.17, 29600)..\n"
        "RuntimeError: init_weights_update_group failed: Failed to initialize custom process "
        "group: The client socket has timed out after 600000ms\n"
    )
    result = run(log)
    assert result.failure_class is C.DISTRIBUTED_INIT
    assert result.root_cause_number == 1


def test_a_request_error_the_servers_handler_caught_is_no_failure_while_it_serves_on():
    served = (
        "[2026-03-29 15:02:50 TP0] Decode batch, #running-req: 3, #token: 900, token usage: 0.01,"
        " cuda graph: True, gen throughput (token/s): 90.00, #queue-req: 0\n"
    )
    caught = (
        "[2026-03-29 15:02:53] Error in request: 'image_url'\n"
        "Traceback (most recent call last):\n"
        '  File "/x/sglang/srt/entrypoints/openai/serving_base.py", line 9, in handle_request\n'
        "    adapted_request, processed_request = self._convert_to_internal_request(\n"
        "KeyError: 'image_url'\n"
    )
    assert run(served + caught + served).failure_class is C.NONE
    assert (
        run(served + caught.replace("Error in request", "Scheduler hit an exception")).failure_class
        is C.OTHER
    )


def test_nccl_debug_infos_words_are_no_error():
    log = (
        "[2026-03-29 15:02:50] The server is fired up and ready to roll!\n"
        "l40s-pair:3011:3072 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. "
        "Using internal net plugin.\n"
    )
    assert run(log).failure_class is C.NONE


def test_an_assertion_in_the_linear_attention_kernels_is_a_kernel_error():
    log = TRACEBACK.format(
        path="/x/sglang/srt/layers/attention/fla/chunk_delta_h.py",
        func="chunk_gated_delta_rule_fwd_h",
        exception="AssertionError: current kernel does not support head dimension larger than 256.",
    )
    assert run(log).failure_class is C.KERNEL_ERROR


def test_a_unix_only_module_missing_is_a_host_sglang_does_not_run_on_not_a_package():
    line = "ModuleNotFoundError: No module named 'resource'\n"
    assert run(line).failure_class is C.OTHER
    assert run(line.replace("resource", "sgl_kernel")).failure_class is C.DEPENDENCY_ERROR


def test_a_gpu_level_zero_lost_under_the_process_is_a_device_error():
    line = "RuntimeError: level_zero backend failed with error: 20 (UR_RESULT_ERROR_DEVICE_LOST)\n"
    assert run(line).failure_class is C.CUDA_ERROR


def test_the_host_going_down_under_the_server_killed_it():
    log = (
        "[2026-08-18 00:03:59 TP0] Decode batch, #running-req: 3, #token: 900, token usage: 0.01,"
        " cuda graph: True, gen throughput (token/s): 90.00, #queue-req: 0\n"
        "Aug 18 00:04:11 gpu-node-12 systemd-logind[1201]: The system will reboot now!\n"
        "Aug 18 00:04:41 gpu-node-12 systemd[1]: supervisor.service: Killing process 40112 "
        "(python3) with signal SIGKILL.\n"
    )
    result = run(log)
    assert result.failure_class is C.KILLED_BY_SIGNAL
    assert result.root_cause_line.endswith("The system will reboot now!")


def test_the_kubelets_eviction_event_killed_the_pod():
    event = (
        "  Warning  Evicted    3m    kubelet  Pod ephemeral local storage usage exceeds the "
        "total limit of containers 60Gi.\n"
    )
    assert run(event).failure_class is C.KILLED_BY_SIGNAL


COLLECTIVE_OUT_OF_MEMORY = (
    "gpu-a12:1187:3321 [0] include/alloc.h:113 NCCL WARN Cuda failure 'out of memory'\n"
    "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, unhandled "
    "cuda error (run with NCCL_DEBUG=INFO for details)\n"
)


def test_a_collective_that_failed_for_memory_is_memory_once_the_group_served():
    serving = (
        "[2026-02-01 10:00:05 TP0] Decode batch, #running-req: 1, #token: 10, token usage: 0.01,"
        " cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 0\n"
    )
    assert run(serving + COLLECTIVE_OUT_OF_MEMORY).failure_class is C.RUNTIME_OOM
    setting_up = "[2026-02-01 10:00:00 TP0] Init torch distributed begin.\n"
    result = run(setting_up + COLLECTIVE_OUT_OF_MEMORY)
    assert (result.failure_class, result.runner_up) == (C.DISTRIBUTED_INIT, C.WEIGHTS_OOM)


def test_the_kernels_gpu_fault_above_the_cuda_error_it_caused_is_the_root():
    host = "Mar 03 12:42:03 node-14"
    xid = f"{host} kernel: NVRM: Xid (PCI:0000:5d:00): 79, pid=3312, name=python3, GPU has fallen off the bus."
    cuda = f"{host} sglang[3301]: torch.AcceleratorError: CUDA error: unspecified launch failure"
    result = run(f"{xid}\n{cuda}\n")
    assert (result.failure_class, result.root_cause_line) == (C.CUDA_ERROR, xid)
    # dmesg appended under the log: the CUDA error came first
    result = run(f"{cuda}\n\n$ dmesg | tail -1\n{xid}\n")
    assert (result.failure_class, result.root_cause_line) == (C.CUDA_ERROR, cuda)


@pytest.mark.parametrize(
    "report",
    [
        "[Tue Mar  4 17:52:31 2026] amdgpu 0000:9e:00.0: amdgpu: ring sdma0 timeout, signaled "
        "seq=1183112, emitted seq=1183114",
        "Oct 30 23:05:19 arc-ws kernel: xe 0000:03:00.0: [drm] GT0: Engine reset: "
        "engine_class=ccs, logical_mask: 0x1, guc_id=6",
        "[Fri Jun 13 02:41:09 2025] habanalabs hl3: Device critical error (DEVICE_CRITICAL_ERROR):"
        " HBM ECC double-bit error on HBM 2",
    ],
)
def test_other_vendors_drivers_report_a_device_fault_as_nvidias_xid_does(report):
    opaque = "RuntimeError: synStatus 26 [Generic failure]."
    result = run(f"{report}\n{opaque}\n")
    assert (result.failure_class, result.root_cause_line) == (C.CUDA_ERROR, report)
    # the same drivers' routine words are no fault
    routine = (
        "[Tue Mar  4 17:50:02 2026] amdgpu 0000:9e:00.0: amdgpu: SMU is initialized successfully!"
    )
    assert run(f"{routine}\n{opaque}\n").failure_class is C.OTHER


ASCEND_SERVING = (
    "[2026-01-27 03:18:09 TP0] Decode batch, #running-req: 12, #token: 40013, token usage: 0.03,"
    " npu graph: True, gen throughput (token/s): 388.60, #queue-req: 0\n"
)
ASCEND_HEADER = "[ERROR] 2026-01-27-03:48:12 (PID:26114, Device:0, RankID:-1) ERR02200 DIST call hccl api failed."


def test_ascends_coded_line_says_why_torch_npu_failed_by_its_module():
    hccp = "EJ0001: [PID: 7766] 2026-04-02-08:14:37.511.292 Failed to initialize the HCCP process."
    wrapper = (
        "RuntimeError: create:torch_npu/csrc/distributed/ProcessGroupHCCL.cpp:2287 HCCL function"
        " error: HcclCommInitRootInfoConfig(numRanks, &hcclID, rank, config), error code is 5"
    )
    result = run(f"{wrapper}\n{ASCEND_HEADER}\n{hccp}\n")
    assert (result.failure_class, result.root_cause_line) == (C.DISTRIBUTED_INIT, hccp)
    operator = (
        "EZ1001: [PID: 73310] 2026-02-12-11:04:27.912.445 When layout is BSH, the D of query must"
        " be 64, 128, 192 or 256 in operator FusedInferAttentionScore, but got 80."
    )
    called = "RuntimeError: aclnnFusedInferAttentionScoreV3 call failed, please check!"
    result = run(f"{ASCEND_HEADER.replace('DIST', 'OPS')}\n{operator}\n{called}\n")
    assert (result.failure_class, result.root_cause_line) == (C.KERNEL_ERROR, operator)


def test_ascends_ai_core_faulting_as_it_ran_is_the_devices_error_not_the_operators():
    wrapper = (
        "[2026-11-12 03:27:45 TP2] RuntimeError: ACL stream synchronize failed, error code:507014"
    )
    report = (
        f"{ASCEND_HEADER.replace('DIST call hccl', 'PTA call acl')}\n"
        "EZ9999: Inner Error!\n"
        "EZ9999: [PID: 88102] 2026-11-12-03:27:45.120.004 The error from device(chipId:2, "
        "dieId:0), serial number is 3, there is an aicore error, core id is 17\n"
    )
    result = run(ASCEND_SERVING + wrapper + "\n" + report)
    assert (result.failure_class, result.root_cause_line) == (C.CUDA_ERROR, wrapper)


def test_ascends_collective_that_timed_out_hangs_once_serving_and_never_formed_before():
    timeout = (
        "EI0002: [PID: 26114] 2026-01-27-03:48:12.018.331 The wait execution of the Notify "
        "register times out. Reason: no Notify record from remote rank [3]."
    )
    log = f"{ASCEND_HEADER}\n{timeout}\nRuntimeError: ACL stream synchronize failed, error code:107020\n"
    result = run(ASCEND_SERVING + log)
    assert (result.failure_class, result.root_cause_line) == (C.HANG_TIMEOUT, timeout)
    assert run(log).failure_class is C.DISTRIBUTED_INIT
    # a coded line whose reason is memory is the allocation's failure, not the module's
    memory = log.replace("The wait execution", "Failed to allocate memory for the notify").replace(
        "times out", "buffer"
    )
    assert run(ASCEND_SERVING + memory).failure_class is C.RUNTIME_OOM


def test_a_librarys_exception_by_any_other_name_is_the_exception_under_sglangs_teardown():
    raised = (
        "interegular.utils.simple_parser.NoMatch: Can not match at index 14. Got '?<', expected"
        " any of ['(?:', '(?=', '(?!', '(?P<']"
    )
    log = TRACEBACK.format(
        path="/x/interegular/utils/simple_parser.py", func="parse", exception=raised
    )
    result = run(log)
    assert (result.failure_class, result.root_cause_line) == (C.OTHER, raised)
    # a logger's name and a message are no exception: nothing raised it
    assert run("sglang.srt.Manager: started\n").failure_class is C.NONE


def test_a_model_type_transformers_table_lacks_is_an_unsupported_model():
    auto = "/x/transformers/models/auto/configuration_auto.py"
    log = TRACEBACK.format(path=auto, func="__getitem__", exception="KeyError: 'ministral3'")
    assert run(log).failure_class is C.UNSUPPORTED_MODEL
    # a key missing elsewhere in the config's loading is the checkpoint's
    log = TRACEBACK.format(path=auto, func="from_pretrained", exception="KeyError: 'ministral3'")
    assert run(log).failure_class is C.MODEL_LOAD_ERROR


def test_a_weight_the_tp_split_leaves_off_the_quantization_block_is_an_invalid_argument():
    error = (
        "ValueError: The output_size of gate's and up's weight = 96 is not divisible by weight "
        "quantization block_n = 128."
    )
    path = "/usr/local/lib/python3.10/dist-packages/sglang/srt/layers/quantization/fp8.py"
    result = run(TRACEBACK.format(path=path, func="create_weights", exception=error))
    assert (result.failure_class, result.root_cause_line) == (C.INVALID_ARGUMENT, error)


def _node(stamp: str, rank: str, *records: str) -> list[str]:
    return [f"[2025-08-11 {stamp} {rank}] {record}" for record in records]


def test_node_logs_pasted_one_after_another_are_read_in_the_order_things_happened():
    # node 0 waited at the barrier for ranks that node 1 lost to the filesystem first
    node0 = [
        "### node 0",
        *_node("20:00:05", "TP0", "Load weight begin. avail mem=78.20 GB"),
        *_node("20:15:14", "TP0", "Load weight end. type=DeepseekV3ForCausalLM"),
        *_node("20:23:14", "TP0", "Scheduler hit an exception: Traceback (most recent call last):"),
        '  File "/x/sglang/srt/model_executor/model_runner.py", line 673, in load_model',
        "ValueError: TP rank 0 could finish the model loading, but there are other ranks that "
        "didn't finish loading. It is likely due to unexpected failures (e.g., OOM) or a slow node.",
    ]
    stale = "OSError: [Errno 116] Stale file handle"
    node1 = [
        "### node 1",
        *_node("20:00:06", "TP8", "Load weight begin. avail mem=78.20 GB"),
        *_node("20:09:22", "TP8", "Scheduler hit an exception: Traceback (most recent call last):"),
        '  File "/x/sglang/srt/model_loader/weight_utils.py", line 462, in safetensors_weights_iterator',
        '  File "/x/safetensors/torch.py", line 313, in load_file',
        stale,
    ]
    result = run("\n".join(node0 + node1) + "\n")
    assert (result.failure_class, result.root_cause_line) == (C.MODEL_LOAD_ERROR, stale)
    # a log of another day pasted under the first keeps its place: its lines came after
    earlier = [line.replace("2025-08-11", "2025-07-30") for line in node1]
    later = run("\n".join(node0 + earlier) + "\n")
    assert later.failure_class is C.DISTRIBUTED_INIT


def test_gloos_failed_full_mesh_is_the_cause_of_the_stores_timeout_after_it():
    gloo = (
        "RuntimeError: Gloo connectFullMesh failed with "
        "[../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error"
    )
    store = "torch.distributed.DistStoreError: wait timeout after 1800000ms, keys: /default_pg/0//cpu//8//gloo/0"
    result = run(f"{gloo}\n{store}\n")
    assert (result.failure_class, result.root_cause_line) == (C.DISTRIBUTED_INIT, gloo)


def _asgi(raised: list[str]) -> str:
    serving = "[2026-07-14 12:5{m}:00] Decode batch, #running-req: 5, #token: 900, token usage: 0.01, cuda graph: True, gen throughput (token/s): 90.00, #queue-req: 0"
    return "\n".join(
        [
            serving.format(m=1),
            "[2026-07-14 12:52:54] ERROR:    Exception in ASGI application",
            "Traceback (most recent call last):",
            '  File "/usr/local/lib/python3.12/dist-packages/uvicorn/protocols/http/h11_impl.py", line 403, in run_asgi',
            *raised,
            serving.format(m=5),
        ]
    )


def test_a_client_gone_mid_stream_is_no_failure_but_a_front_end_out_of_files_is():
    gone = [
        "asyncio.exceptions.CancelledError: Cancelled by cancel scope 7f2a1c1b3e90",
        "  | exceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)",
        "    | h11._util.LocalProtocolError: Can't send data when our state is ERROR",
    ]
    assert run(_asgi(gone)).failure_class is C.NONE
    emfile = "OSError: [Errno 24] Too many open files"
    result = run(_asgi([emfile]))
    assert (result.failure_class, result.root_cause_line) == (C.OTHER, emfile)


def test_an_rdma_transport_out_of_locked_memory_cannot_form_the_group():
    for line in (
        "E0915 09:02:41.518273  2871 rdma_context.cpp:247] Failed to register memory "
        "0x7f0e8c000000: Cannot allocate memory [12]",
        "[1765872211.402118] [dec-0:3197 :0]     ib_iface.c:1091 UCX  ERROR   "
        "ibv_create_cq(cqe=4096) failed: Cannot allocate memory : Please set max locked memory "
        "(ulimit -l) to 'unlimited' (current: 8192 kbytes)",
    ):
        result = run(f"{line}\nRuntimeError: KV transfer engine failed to initialize\n")
        assert (result.failure_class, result.root_cause_line) == (C.DISTRIBUTED_INIT, line)


def test_an_engine_started_in_a_script_with_no_main_guard_is_rooted_at_its_message():
    """The RuntimeError's message starts with a newline: its type prints alone, and the
    line under it says what failed (three writers of four root it there)."""
    message = "An attempt has been made to start a new process before the"
    text = f"""Traceback (most recent call last):
  File "/usr/lib/python3.10/multiprocessing/spawn.py", line 125, in _main
    prepare(preparation_data)
RuntimeError:
        {message}
        current process has finished its bootstrapping phase.
[2025-06-10 18:20:07] Rank 0 scheduler is dead. Please check if there are relevant logs.
"""
    result = run(text)
    assert (result.failure_class, result.root_cause_line) == (C.OTHER, message)


def test_a_router_that_gave_up_on_a_workers_health_checks_says_it_hangs():
    line = (
        "2025-10-22 16:31:14  WARN sglang_router_rs::core::worker: Health check timeout for "
        "worker http://10.0.4.21:30000 after 5s"
    )
    result = run(f"{line}\n")
    assert (result.failure_class, result.root_cause_line) == (C.HANG_TIMEOUT, line)


def test_a_client_that_stopped_waiting_is_no_failure_while_the_server_serves_on():
    batch = (
        "[2025-03-14 11:05:{s} TP0] Decode batch. #running-req: 1, #token: 3345, token usage: "
        "0.02, gen throughput (token/s): 31.88, #queue-req: 0"
    )
    timeout = "httpcore.ReadTimeout: timed out"
    assert run(f"{batch.format(s=20)}\n{timeout}\n{batch.format(s=25)}\n").failure_class is C.NONE
    assert run(f"{batch.format(s=20)}\n{timeout}\n").failure_class is C.HANG_TIMEOUT


def test_a_notebooks_traceback_is_read_as_ipython_prints_it():
    gated = "GatedRepoError: 401 Client Error. (Request ID: Root=1-67f3a1c2)"
    hub = "/opt/conda/lib/python3.11/site-packages/huggingface_hub/utils/_http.py"
    text = f"""GatedRepoError                            Traceback (most recent call last)
File {hub}:419, in hf_raise_for_status(response, endpoint_name)
    417     message = f"{{response.status_code}} Client Error." + "\\n\\n" + "Cannot access gated repo"
--> 419     raise _format(GatedRepoError, message, response) from e

{gated}
"""
    result = run(text)
    assert (result.failure_class, result.root_cause_line) == (C.MODEL_LOAD_ERROR, gated)
    # the frame is read too: a check in server_args rejects an argument
    args = "/opt/conda/lib/python3.11/site-packages/sglang/srt/server_args.py"
    error = "ValueError: page_size must be a power of two for this backend"
    cell = f"""ValueError                                Traceback (most recent call last)
File {args}:812, in ServerArgs.__post_init__(self)
--> 812     raise ValueError("page_size must be a power of two for this backend")

{error}
"""
    result = run(cell)
    assert (result.failure_class, result.root_cause_line) == (C.INVALID_ARGUMENT, error)


def test_the_reporters_opening_paragraph_above_an_unfenced_log_is_not_the_log():
    log = (
        "[2026-08-27 11:03:07] Decode batch, #running-req: 4, #token: 9120, token usage: 0.02, "
        "cuda graph: True, gen throughput (token/s): 311.80, #queue-req: 0\n"
        "[2026-08-27 11:03:15] SIGTERM received. signum=None frame=None. Draining requests and "
        "shutting down...\n"
    )
    words = (
        "Just want to confirm this is a normal shutdown - our deploy tool flagged the pod as "
        '"crashed" because of ERROR lines and exit code 137. Rolling update on k8s:'
    )
    assert run(f"{words}\n\n{log}").failure_class is C.NONE
    # a chat message that is all one paragraph still says what failed
    inline = "The server died with exit code 137 right after loading, any idea what kills it."
    assert run(f"{inline}\n").failure_class is C.KILLED_BY_SIGNAL


def test_systemd_saying_the_oom_killer_took_the_unit_is_a_host_oom_kill():
    line = "Aug 11 03:22:58 gpu12 systemd[1]: sglang.service: A process of this unit has been killed by the OOM killer."
    after = "Aug 11 03:22:59 gpu12 systemd[1]: sglang.service: Failed with result 'oom-kill'."
    result = run(f"{line}\n{after}\n")
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, line)


def test_nccls_and_gloos_own_words_on_a_network_that_is_not_there():
    plugin = (
        "sglang-0:212:212 [0] NCCL INFO NET/Plugin: Plugin load returned 2 : libnccl-net.so: "
        "cannot open shared object file: No such file or directory : when loading libnccl-net.so"
    )
    numa = (
        "node-1:3121:3121 [0] NCCL WARN NUMA auto balancing enabled which can lead to variability "
        'in the RCCL performance! Disable by "sudo sysctl kernel.numa_balancing=0"'
    )
    gloo = (
        "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:83] "
        "ifa != nullptr. Unable to find address for: eth0"
    )
    result = run(f"{plugin}\n{numa}\n{gloo}\n")
    assert (result.failure_class, result.root_cause_line) == (C.DISTRIBUTED_INIT, gloo)


def test_a_peer_c10d_retried_is_no_failure_once_the_server_serves():
    retry = (
        "[W204 09:11:58.447810213 socket.cpp:767] [c10d] The client socket has failed to connect "
        "to [localhost]:40313 (errno: 99 - Cannot assign requested address)."
    )
    ready = "[2026-02-04 09:12:24] The server is fired up and ready to roll!"
    assert run(f"{retry}\n{ready}\n").failure_class is C.NONE
    assert run(f"{retry}\n").failure_class is C.DISTRIBUTED_INIT


def test_a_startup_the_kubelet_gave_up_on_hangs_and_its_probe_settings_are_no_timeout():
    text = """[2025-06-06 04:12:43 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=10.41 GB

    Liveness:       http-get http://:30000/health delay=360s timeout=5s period=20s #success=1 #failure=3
  Warning  Unhealthy  11m (x30 over 21m)  kubelet  Startup probe failed: Get "http://10.42.3.18:30000/health": dial tcp 10.42.3.18:30000: connect: connection refused
  Normal   Killing    11m                 kubelet  Container sglang failed startup probe, will be restarted
    Exit Code:    137
"""
    result = run(text)
    assert result.failure_class is C.HANG_TIMEOUT
    # the kubelet saw it never came up; where the server stopped is the root
    assert result.root_cause_line == text.splitlines()[0]
    # a slow start fails startup probes until it answers; the liveness probe restarted it
    liveness = (
        "  Warning  Unhealthy  3m40s (x3 over 4m)  kubelet  Liveness probe failed: Get "
        '"http://10.42.3.17:30000/health": context deadline exceeded'
    )
    result = run(f"{text}{liveness}\n")
    assert result.root_cause_line == liveness.strip()


def test_a_startup_probe_pasted_above_the_log_roots_the_hang_at_the_last_shard_loaded():
    probe = (
        "  Warning  Unhealthy  40s (x30 over 10m)  kubelet  Startup probe failed: Get "
        '"http://10.8.2.14:30000/health": dial tcp 10.8.2.14:30000: connect: connection refused'
    )
    shards = (
        "Loading safetensors checkpoint shards:  43% Completed | 13/30 [04:12<05:31, 19.50s/it]"
    )
    text = (
        f"$ kubectl describe pod sglang-0\n{probe}\n\n$ kubectl logs sglang-0\n"
        "[2026-11-20 06:00:12 TP0] Load weight begin. avail mem=60.52 GB\n"
        f"{shards}\n"
    )
    result = run(text)
    assert (result.failure_class, result.root_cause_line) == (C.HANG_TIMEOUT, shards)


def test_the_toolchain_missing_under_a_jit_build_is_rooted_at_its_own_words():
    for said in (
        "/bin/sh: 1: /usr/local/cuda/bin/nvcc: not found",
        "/usr/bin/ld: cannot find -lcuda: No such file or directory",
    ):
        text = (
            f"{said}\nninja: build stopped: subcommand failed.\n"
            "subprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit status 1.\n"
        )
        result = run(text)
        assert (result.failure_class, result.root_cause_line) == (C.KERNEL_ERROR, said)


def test_a_child_sglang_saw_sigkilled_with_no_error_of_its_own_was_killed():
    # 0.4.x's SIGCHLD handler prints the raw wait status: 9 is SIGKILL, 256 an exit(1)
    shards = "Loading safetensors checkpoint shards:  40% Completed | 4/10 [00:41<01:02, 10.4s/it]"
    child = "[2025-03-02 11:20:07] Child process unexpectedly failed with an exit code 9. pid=3311"
    result = run(f"{shards}\n{child}\n")
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, child)
    exited = (
        "[2025-03-02 11:20:07] Child process unexpectedly failed with an exit code 256. pid=3311"
    )
    assert run(f"{shards}\n{exited}\n").failure_class is C.OTHER


def test_an_oom_in_a_models_forward_pass_cut_above_the_scheduler_is_a_runtime_oom():
    text = """  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/models/qwen2.py", line 240, in forward
    hidden_states = self.mlp(hidden_states)
  File "/usr/local/lib/python3.12/dist-packages/torch/nn/modules/module.py", line 1775, in _call_impl
    return forward_call(*args, **kwargs)
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/layers/activation.py", line 61, in forward_cuda
    out = torch.empty(output_shape, dtype=x.dtype, device=x.device)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 0 has a total capacity of 23.55 GiB of which 1.12 GiB is free. Of the allocated memory 20.91 GiB is allocated by PyTorch, and 310.00 MiB is reserved by PyTorch but unallocated.
"""
    assert run(text).failure_class is C.RUNTIME_OOM
    loading = (
        text.replace("models/qwen2.py", "model_loader/loader.py")
        .replace("activation.py", "linear.py")
        .replace("in forward", "in load_weights")
    )
    assert run(loading).failure_class is C.WEIGHTS_OOM


def test_transformers_refusing_a_path_that_is_no_folder_and_no_repo_id_is_a_model_load_error():
    for said in (
        "OSError: Incorrect path_or_model_id: '/models/llama-3-8b/'. Please provide either the path to a local folder or the repo_id of a model on the Hub.",
        "OSError: /mnt/ckpt/qwen is not a local folder and is not a valid model identifier listed on 'https://hf.co/models'",
    ):
        result = run(f"{said}\n")
        assert (result.failure_class, result.root_cause_line) == (C.MODEL_LOAD_ERROR, said)


def test_0_1s_decode_that_found_no_room_even_after_retracting_is_the_kv_pool():
    retract = (
        "decode out of memory happened, #retracted_reqs: 2, #new_token_ratio: 0.3000 -> 0.4000"
    )
    fatal = "Decode out of memory. This should never happen."
    result = run(
        f"[gpu_id=0] Decode batch. #running-req: 6, #token: 9000, token usage: 0.99, #queue-req: 0\n{retract}\n{fatal}\n"
    )
    assert (result.failure_class, result.root_cause_line) == (C.KV_POOL_EXHAUSTED, fatal)
    assert run(f"{retract}\n").failure_class is C.KV_POOL_EXHAUSTED  # its lower-case wording


def test_a_full_kv_pool_is_what_a_log_shows_when_only_a_client_gave_up_waiting():
    text = """httpx.ReadTimeout
openai.APITimeoutError: Request timed out.
[2025-08-27 13:05:44 TP0] Decode batch. #running-req: 256, #token: 429012, token usage: 0.99, cuda graph: True, gen throughput (token/s): 2931.77, #queue-req: 0,
[2025-08-27 13:05:45 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 19, #new_token_ratio: 0.3107 -> 0.6533
[2025-08-27 13:05:48 TP0] Decode batch. #running-req: 237, #token: 421366, token usage: 0.98, cuda graph: True, gen throughput (token/s): 2701.03, #queue-req: 18,
"""
    result = run(text)
    assert result.failure_class is C.KV_POOL_EXHAUSTED
    assert result.root_cause_line.startswith("[2025-08-27 13:05:45 TP0] KV cache pool is full")
    no_retraction = "\n".join(line for line in text.splitlines() if "Retract" not in line)
    assert run(no_retraction + "\n").failure_class is C.NONE


def test_an_extension_whose_operators_never_registered_is_a_dependency_error():
    said = "AttributeError: '_OpNamespace' 'sgl_kernel' object has no attribute 'rmsnorm'"
    result = run(
        f'  File "/x/sglang/srt/layers/layernorm.py", line 80, in forward_cuda\n    out = rmsnorm(x, w, eps)\n{said}\n'
    )
    assert (result.failure_class, result.root_cause_line) == (C.DEPENDENCY_ERROR, said)


def test_an_import_whose_fallback_then_ran_out_of_memory_is_the_memory():
    text = """Traceback (most recent call last):
  File "/x/sglang/srt/model_executor/model_runner.py", line 232, in setup_model
    from vllm.config import VllmConfig
ImportError: cannot import name 'VllmConfig' from 'vllm.config' (/x/vllm/config.py)

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/x/sglang/srt/model_executor/model_runner.py", line 243, in setup_model
    return get_model(
  File "/x/sglang/srt/layers/linear.py", line 149, in create_weights
    torch.empty(
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 112.00 MiB. GPU 0 has a total capacity of 23.57 GiB of which 33.06 MiB is free.
"""
    assert run(text).failure_class is C.WEIGHTS_OOM
    # a fallback that raises nothing decisive of its own (it re-words the import) stays the import
    reworded = (
        text.split("torch.OutOfMemoryError")[0]
        + "ValueError: vllm is not available, please check the installation.\n"
    )
    assert run(reworded).failure_class is C.DEPENDENCY_ERROR
    # ... and one that raises another import error is rooted at the first, which says why
    first = "ImportError: cannot import name 'VllmConfig' from 'vllm.config' (/x/vllm/config.py)"
    again = (
        text.split("torch.OutOfMemoryError")[0]
        + "ImportError: vllm is required: pip install vllm\n"
    )
    assert (run(again).failure_class, run(again).root_cause_line) == (C.DEPENDENCY_ERROR, first)


def test_a_driver_older_than_the_build_is_the_driver_and_no_driver_at_all_is_other():
    ptx = "RuntimeError: Triton Error [CUDA]: the provided PTX was compiled with an unsupported toolchain."
    assert run(f"{ptx}\n").failure_class is C.CUDA_ERROR
    none = "RuntimeError: 0 active drivers ([]). There should only be one."
    assert (
        run(
            f'  File "/x/triton/runtime/driver.py", line 8, in _create_driver\n{none}\n'
        ).failure_class
        is C.OTHER
    )


def test_gpus_sglang_will_not_use_are_other():
    for said in (
        "RuntimeError: SGLang only supports sm75 and above.",
        "ValueError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes.",
    ):
        text = f'  File "/x/sglang/srt/model_executor/model_runner.py", line 158, in init_torch_distributed\n    raise ValueError(\n{said}\n'
        assert (run(text).failure_class, run(text).root_cause_line) == (C.OTHER, said)


def test_a_generation_request_answered_in_the_access_log_is_serving():
    served = 'INFO:     127.0.0.1:44658 - "POST /generate HTTP/1.1" 200 OK'
    startup = (
        "[2024-06-01 10:00:00] Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)"
    )
    stop = "INFO:     Shutting down\nINFO:     Finished server process [30912]\n"
    assert run(f"{startup}\n{served}\n{stop}").failure_class is C.NONE
    assert run(f"{startup}\n{stop}").failure_class is C.HANG_TIMEOUT  # it never served


def test_slurms_oom_kill_event_killed_the_step_and_says_why_it_was_cancelled():
    oom = "slurmstepd: error: Detected 1 oom_kill event in StepId=4417731.0. Some of the step tasks have been OOM Killed."
    cancelled = (
        "slurmstepd: error: *** STEP 4417731.0 ON gpu-a17 CANCELLED AT 2025-08-19T22:32:19 ***"
    )
    shards = "Loading pt checkpoint shards:  16% Completed | 3/19 [01:09<06:13, 23.34s/it]"
    for text in (f"{shards}\n{oom}\n", f"{shards}\n{cancelled}\n{oom}\n"):
        result = run(text)
        assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, oom)


def test_a_kernel_log_or_a_rank_pasted_after_the_server_log_is_read_in_time_order():
    server = """[2025-08-28 02:17:06 TP0] Decode batch. #running-req: 23, #token: 61870, token usage: 0.14, cuda graph: True, gen throughput (token/s): 402.19, #queue-req: 0,
[2025-08-28 02:17:10 TP0] Scheduler hit an exception: Traceback (most recent call last):
RuntimeError: CUDA error: unspecified launch failure
[2025-08-28 02:17:10] Received sigquit from a child process. It usually means the child failed.
"""
    xid = "[Thu Aug 28 02:17:08 2025] NVRM: Xid (PCI:0000:41:00): 79, pid=1187342, name=python3, GPU has fallen off the bus."
    result = run(f"{server}\n$ sudo dmesg -T | grep -i xid\n{xid}\n")
    assert (result.failure_class, result.root_cause_line) == (C.CUDA_ERROR, xid)
    # ... its clock as a Chinese locale prints it, and a second after the error: not first
    zh = xid.replace("[Thu Aug 28 02:17:08 2025]", "[四 8月 28 02:17:08 2025]")
    result = run(f"{server}\n$ sudo dmesg -T | grep -i xid\n{zh}\n")
    assert (result.failure_class, result.root_cause_line) == (C.CUDA_ERROR, zh)
    late = zh.replace("02:17:08", "02:17:11")
    result = run(f"{server}\n$ sudo dmesg -T | grep -i xid\n{late}\n")
    assert result.root_cause_line == "RuntimeError: CUDA error: unspecified launch failure"
    # a rank's NCCL watchdog (glog's clock) pasted above the rank whose OOM it waited for
    timeout = "[rank2]:[E828 02:27:34.502518901 ProcessGroupNCCL.cpp:632] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1183422, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600000 milliseconds before timing out."
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 5 has a total capacity of 79.10 GiB of which 2.12 GiB is free."
    other_rank = f"""[2025-08-28 02:17:32 TP13] Prefill batch. #new-seq: 1, #new-token: 16384, #cached-token: 0, token usage: 0.31, #running-req: 22, #queue-req: 0,
[2025-08-28 02:17:33 TP13] Scheduler hit an exception: Traceback (most recent call last):
  File "/x/sglang/srt/managers/scheduler.py", line 1000, in run_batch
    self.tp_worker.forward_batch_generation(batch)
{oom}
"""
    result = run(f"{timeout}\n\n{other_rank}")
    assert (result.failure_class, result.root_cause_line) == (C.RUNTIME_OOM, oom)


def test_tritons_compile_error_is_rooted_at_the_error_it_wraps():
    source = """            qk = tl.dot(q, k.to(q.dtype))
                           ^"""
    header = "triton.compiler.errors.CompilationError: at 96:27:"
    inner = "ValueError(\"type fp8e4nv not supported in this architecture. The supported fp8 dtypes are ('fp8e4b15', 'fp8e5')\")"
    under = f'  File "/x/triton/compiler/compiler.py", line 85, in make_ir\n{header}\n{source}\n{inner}\n'
    result = run(under)
    assert (result.failure_class, result.root_cause_line) == (C.KERNEL_ERROR, inner)
    raised = "ValueError: type fp8e4nv not supported in this architecture. The supported fp8 dtypes are ('fp8e4b15', 'fp8e5')"
    chained = f"""[2025-06-03 09:20:47] Scheduler hit an exception: Traceback (most recent call last):
  File "/x/triton/language/semantic.py", line 867, in cast
    raise ValueError("type %s not supported in this architecture. "
{raised}

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/x/triton/compiler/compiler.py", line 85, in make_ir
{header}
{source}
"""
    result = run(chained)
    assert (result.failure_class, result.root_cause_line) == (C.KERNEL_ERROR, raised)
    # the header alone says where, and is the root when nothing shows what it wraps
    assert run(f"{header}\n{source}\n").root_cause_line == header


def test_a_program_that_says_it_killed_the_server_is_the_root_of_the_kill():
    crashed = "[2026-11-25 17:00:05] Subprocess scheduler_0 (pid=771204) crashed with exit code -9. Triggering SIGQUIT for cleanup..."
    for said in (
        'Nov 25 17:00:04 lab-a6000 gpu-reaper[771990]: SIGKILL pid=771204 user=student gpu=2 cmd="sglang::scheduler"',
        "Nov 25 17:00:04 lab-a6000 gpu-reaper[771990]: killing pid 771204 (python3 -m sglang.launch_server --tp 8)",
        # earlyoom, the userspace OOM killer
        'Nov 25 17:00:04 lab-a6000 earlyoom[1043]: sending SIGKILL to process 771204 uid 1000 "python": badness 912',
        'Nov 25 17:00:04 lab-a6000 earlyoom[1043]: sending SIGTERM to process 771204 uid 1000 "python": badness 912',
    ):
        result = run(f"{crashed}\nKilled\n$ journalctl -t gpu-reaper\n{said}\n")
        assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, said)
    # SGLang's own teardown of its tree names no killer
    teardown = "[2026-11-25 17:00:05] kill_process_tree called: pid=771204, include_parent=True"
    assert run(f"{crashed}\n{teardown}\n").root_cause_line == crashed


def test_ptxas_own_error_line_is_the_root_above_its_fatal_summary():
    error = "ptxas /tmp/tmpxft_00003f1a_00000000-6_batch_decode_kernel.ptx, line 18433; error   : Feature '.bf16' requires .target sm_80 or higher"
    fatal = "ptxas fatal   : Ptx assembly aborted due to errors"
    result = run(f"{error}\n{fatal}\n")
    assert (result.failure_class, result.root_cause_line) == (C.KERNEL_ERROR, error)


def test_a_request_aborted_on_a_full_pool_is_rooted_at_the_first_retraction_when_serving_goes_on():
    retract = "[2026-10-12 15:33:08 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_tokens_gained: 61440, #new_token_ratio: 0.3120 -> 0.6230"
    abort = "[2026-10-12 15:33:20 TP0] Out of memory even after retracting all other requests in the decode batch. Aborting the last request."
    batch = "[2026-10-12 15:33:24 TP0] Decode batch, #running-req: 3, #token: 29203, token usage: 0.30, cuda graph: True, gen throughput (token/s): 70.12, #queue-req: 0,"
    result = run(f"{retract}\n{abort}\n{batch}\n")
    assert (result.failure_class, result.root_cause_line) == (C.KV_POOL_EXHAUSTED, retract)
    # the same words as the server's last, fatal ones are the root
    fatal = (
        "ValueError: Out of memory even after retracting all other requests in the decode batch."
    )
    result = run(f"{retract}\n{fatal}\n")
    assert (result.failure_class, result.root_cause_line) == (C.KV_POOL_EXHAUSTED, fatal)


def test_a_chat_template_that_is_no_template_and_no_file_is_an_invalid_argument():
    said = "RuntimeError: Chat template ./templates/tool.jinja is not a built-in template name or a valid chat template file path."
    text = f'  File "/x/sglang/srt/parser/template_manager.py", line 244, in _load_explicit_chat_template\n    raise RuntimeError(\n{said}\n'
    result = run(text)
    assert (result.failure_class, result.root_cause_line) == (C.INVALID_ARGUMENT, said)


def test_an_address_this_host_does_not_have_is_no_port_in_use():
    bind = "[W1103 10:00:53.402119785 socket.cpp:767] [c10d] The server socket has failed to bind to 10.20.0.100:5000 (errno: 99 - Cannot assign requested address)."
    error = "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: 5000, useIpv6: 0, code: -99, name: EADDRNOTAVAIL, message: cannot assign requested address"
    result = run(f"{bind}\n{error}\n")
    assert (result.failure_class, result.root_cause_line) == (C.DISTRIBUTED_INIT, bind)
    taken = error.replace(
        "code: -99, name: EADDRNOTAVAIL, message: cannot assign requested address",
        "code: -98, name: EADDRINUSE, message: address already in use",
    )
    assert run(f"{taken}\n").failure_class is C.PORT_IN_USE


def test_an_annotation_naming_the_env_is_no_environment_section():
    text = """# env from our helm values: NCCL_SOCKET_IFNAME=eth0 NCCL_DEBUG=WARN
[2026-10-21 09:12:46 TP8] sglang is using nccl==2.27.7
sgl-node-1:412:412 [0] NCCL WARN Bootstrap : no socket interface found
RuntimeError: NCCL error: internal error - please report this issue to the NCCL developers
"""
    assert run(text).failure_class is C.DISTRIBUTED_INIT
    # an issue's environment section is the report's, and what it prints is not the log
    section = "### Environment\nCUDA available: False\nRuntimeError: No CUDA GPUs are available\n"
    assert (
        run(
            f"[2026-01-01 10:00:00] The server is fired up and ready to roll!\n{section}"
        ).failure_class
        is C.NONE
    )


def test_a_command_the_operator_typed_is_no_line_of_the_log():
    command = "$ docker inspect sgl --format '{{.State.Status}} exit={{.State.ExitCode}} oomkilled={{.State.OOMKilled}}'"
    kill = "[Fri Feb 20 15:47:31 2026] Memory cgroup out of memory: Killed process 3311 (sglang::schedul) total-vm:98412276kB, anon-rss:43915884kB"
    result = run(
        f"Loading safetensors checkpoint shards:  40% Completed | 4/10 [00:41<01:02, 10.4s/it]\n{command}\nexited exit=137 oomkilled=true\n$ sudo dmesg -T | tail -1\n{kill}\n"
    )
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, kill)


def test_a_driver_upgraded_under_the_system_is_a_cuda_error():
    said = (
        "RuntimeError: nvidia-smi error: Failed to initialize NVML: Driver/library version mismatch"
    )
    assert run(f"{said}\n").failure_class is C.CUDA_ERROR
    assert (
        run(
            "[Thu Aug 28 07:02:14 2025] NVRM: API mismatch: the client has the version 550.163.01, but\n"
        ).failure_class
        is C.CUDA_ERROR
    )


@pytest.mark.parametrize(
    ("warning", "failure", "failure_class"),
    [
        (  # the hub, before a download the disk cannot hold
            "/usr/lib/python3.10/site-packages/huggingface_hub/file_download.py:1153: UserWarning: Not enough free disk space to download the file. The expected file size is: 4976.70 MB. The target location /root/.cache/huggingface/hub only has 2210.33 MB free disk space.",
            "OSError: [Errno 28] No space left on device",
            C.MODEL_LOAD_ERROR,
        ),
        (  # torch, whose build has no kernels for this GPU
            "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation.",
            "RuntimeError: CUDA error: no kernel image is available for execution on the device",
            C.CUDA_ERROR,
        ),
    ],
)
def test_a_warning_that_names_the_cause_roots_the_failure_after_it_and_alone_is_none(
    warning, failure, failure_class
):
    result = run(f"{warning}\n  warnings.warn(\n{failure}\n")
    assert (result.failure_class, result.root_cause_line) == (failure_class, warning)
    ready = "[2026-01-01 10:00:00] The server is fired up and ready to roll!"
    assert run(f"{warning}\n  warnings.warn(\n{ready}\n").failure_class is C.NONE


def test_a_gpu_fault_the_kernel_logged_while_the_server_served_on_is_no_failure():
    xid = "[Mon Jun 30 14:02:55 2025] NVRM: Xid (PCI:0000:81:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception: ESR 0x404600=0x80000002"
    before = "[2025-06-30 14:02:50] Decode batch, #running-req: 3, #token: 2920, token usage: 0.01, cuda graph: True, gen throughput (token/s): 301.11, #queue-req: 0,"
    after = "[2025-06-30 14:03:10] Decode batch, #running-req: 4, #token: 3920, token usage: 0.01, cuda graph: True, gen throughput (token/s): 310.02, #queue-req: 0,"
    assert run(f"{before}\n{after}\n$ dmesg -T | grep Xid\n{xid}\n").failure_class is C.NONE
    assert run(f"{before}\n$ dmesg -T | grep Xid\n{xid}\n").failure_class is C.CUDA_ERROR


def test_the_kernels_journal_pasted_below_is_read_by_its_clock_and_its_gpu_fault_is_the_root():
    server = """[2026-11-12 03:14:06 TP0] Prefill batch, #new-seq: 2, #new-token: 7168, #cached-token: 1024, token usage: 0.31, #running-req: 40, #queue-req: 0,
[2026-11-12 03:14:08 TP1] Scheduler hit an exception: Traceback (most recent call last):
torch.AcceleratorError: CUDA error: an illegal memory access was encountered
[2026-11-12 03:14:08] Received sigquit from a child process. It usually means the child failed.
"""
    xid = "Nov 12 03:14:07 gpu-h100-11 kernel: NVRM: Xid (PCI:0000:9d:00): 31, pid=2817731, name=sglang::schedul, Ch 00000010, intr 00000000"
    result = run(f"{server}\n$ journalctl -k --since 03:10\n{xid}\n")
    assert (result.failure_class, result.root_cause_line) == (C.CUDA_ERROR, xid)
    # a fault the kernel logged after the error is its consequence, not its root
    later = xid.replace("03:14:07", "03:14:12")
    assert run(f"{server}\n$ journalctl -k --since 03:10\n{later}\n").root_cause_line.startswith(
        "torch.AcceleratorError"
    )


def test_a_script_the_shell_says_exited_0_ended_and_did_not_stop_printing():
    text = """$ python run_batch.py --input prompts.jsonl
Loading safetensors checkpoint shards: 100% Completed | 3/3 [00:01<00:00,  1.88it/s]
Capturing batches (bs=1 avail_mem=12.31 GB): 100%|##########| 52/52 [00:09<00:00,  5.42it/s]
wrote 20000 results to out.jsonl (0 errors)
$ echo $?
0
"""
    assert run(text).failure_class is C.NONE
    stuck = "\n".join(text.splitlines()[:3])
    assert run(f"{stuck}\n^C\n$ echo $?\n130\n").failure_class is C.HANG_TIMEOUT
    # a prompt alone: `docker logs` returns one while the server it reads is stuck
    assert run(f"{stuck}\n$ docker ps\n").failure_class is C.HANG_TIMEOUT


def test_a_hybrid_state_cache_that_holds_no_request_is_the_state_pool():
    said = "RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve any requests. max_mamba_cache_size=2, mamba_ratio=3, resulting max_num_reqs=0."
    assert run(f"{said}\n").failure_class is C.MAMBA_CACHE_EXHAUSTED
    memory = "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed max_mamba_cache_size=0."
    assert run(f"{memory}\n").failure_class is C.POOL_INIT_OOM


def test_a_startup_the_operator_interrupted_is_a_hang_not_its_teardown():
    last = "[2026-10-05 16:20:14 TP1] Init torch distributed begin."
    teardown = "[2026-10-05 16:45:31] Received sigquit from a child process. It usually means the child failed."
    interrupt = """Traceback (most recent call last):
  File "/x/sglang/launch_server.py", line 35, in <module>
    run_server(server_args)
KeyboardInterrupt
"""
    result = run(f"{last}\n^C\n{teardown}\n{interrupt}")
    assert (result.failure_class, result.root_cause_line) == (C.HANG_TIMEOUT, last)
    # without the operator's Ctrl-C the teardown alone says the cause was cut off above it
    assert run(f"{last}\n{teardown}\n").failure_class is C.OTHER


def test_other_backends_words_for_memory_a_gpu_hang_and_a_missing_compiler():
    cpu_oom = "RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory: you tried to allocate 25769803776 bytes."
    served = "[2026-02-26 02:13:50] Decode batch, #running-req: 3, #token: 2920, token usage: 0.01, gen throughput (token/s): 30.11, #queue-req: 0,"
    assert run(f"{served}\n{cpu_oom}\n").failure_class is C.RUNTIME_OOM
    hang = "sglang-1 | HW Exception by GPU node-5 (Agent handle: 0x55d6b8a3c4e0) reason :GPU Hang"
    result = run(f"{hang}\nsglang-1 exited with code 137\n")
    assert (result.failure_class, result.root_cause_line) == (C.CUDA_ERROR, hang)
    compiler = "InvalidCxxCompiler: No working C++ compiler found in torch._inductor.config.cpp.cxx: (None, 'g++')"
    text = f"torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\n{compiler}\n"
    assert (run(text).failure_class, run(text).root_cause_line) == (C.KERNEL_ERROR, compiler)


def test_an_oom_under_a_traceback_cut_to_its_first_frame_is_placed_by_the_call_it_shows():
    text = """[2026-11-03 02:14:55 TP1] Scheduler hit an exception: Traceback (most recent call last):
  File "/x/sglang/srt/managers/scheduler.py", line 6368, in run_scheduler_process
    scheduler.run_event_loop()
[...] (agent dropped 61 lines: max_line_count)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.69 GiB. GPU 1 has a total capacity of 139.81 GiB of which 3.92 GiB is free. Of the allocated memory 127.02 GiB is allocated by PyTorch, and 7.71 GiB is reserved by PyTorch but unallocated.
"""
    assert run(text).failure_class is C.RUNTIME_OOM


def test_a_reporter_saying_the_exit_code_was_0_reports_no_teardown():
    said = "(I pressed Ctrl-C by accident right after it came up. Just checking: exit code 0 and no errors means nothing went wrong, right?)"
    ready = "[2026-01-01 10:00:00] The server is fired up and ready to roll!"
    assert run(f"{ready}\n{said}\n").failure_class is C.NONE


def test_what_kubernetes_and_the_host_say_when_the_server_never_ran_or_was_preempted():
    assert run("exec /usr/bin/python3: exec format error\n").failure_class is C.OTHER
    pending = "  Warning  FailedScheduling  2m41s (x4 over 17m)  default-scheduler  0/5 nodes are available: 2 node(s) had untolerated taint {nvidia.com/gpu: present}, 3 Insufficient nvidia.com/gpu."
    assert run(f"{pending}\n").failure_class is C.OTHER
    preempted = "  Normal   Preempted  4m2s   default-scheduler  Preempted by pod training/llama-sft-worker-3 on node gpu-a100-07"
    shards = (
        "Loading safetensors checkpoint shards:  37% Completed | 11/30 [01:26<02:31,  7.97s/it]"
    )
    result = run(f"{shards}\n{preempted}\n")
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, preempted.strip())


def test_a_startup_probe_that_failed_before_the_server_was_up_is_no_failure_once_it_serves():
    probe = '  Warning  Unhealthy  5m    kubelet            Startup probe failed: Get "http://10.244.3.41:30000/health": dial tcp 10.244.3.41:30000: connect: connection refused'
    ready = "[2026-01-01 10:00:00] The server is fired up and ready to roll!"
    assert run(f"{probe}\n{ready}\n").failure_class is C.NONE
    assert run(f"{probe}\n").failure_class is C.HANG_TIMEOUT


def test_an_error_raised_under_the_standard_librarys_bootstrap_is_not_the_transports():
    """multiprocessing's ``_bootstrap`` (and importlib's, threading's) is no PD bootstrap: an
    error nothing else explains stays ``other``."""
    error = "OSError: [Errno 22] Invalid argument"
    text = f"""Process SpawnProcess-1:
Traceback (most recent call last):
  File "/usr/lib/python3.10/multiprocessing/process.py", line 314, in _bootstrap
    self.run()
  File "/usr/local/lib/python3.10/dist-packages/psutil/_pslinux.py", line 2061, in cpu_affinity_set
    cext.proc_cpu_affinity_set(self.pid, cpus)
{error}
"""
    result = run(text)
    assert (result.failure_class, result.root_cause_line) == (C.OTHER, error)


def test_a_scheduler_found_dead_with_an_exit_code_of_its_own_died_of_the_error_above():
    error = "OSError: [Errno 22] Invalid argument"
    dead = (
        "[2026-03-09 07:12:40] Rank 0 scheduler is dead. Please check if there are relevant logs."
    )
    text = """Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/utils/common.py", line 2259, in set_gpu_proc_affinity
    p.cpu_affinity(bind_cpu_ids)
{error}
{dead}
[2026-03-09 07:12:40] Exit code: {code}
"""
    result = run(text.format(error=error, dead=dead, code=1))
    assert (result.failure_class, result.root_cause_line) == (C.OTHER, error)
    # killed: the signal is the cause, whatever the traceback above, and the status says it
    result = run(text.format(error=error, dead=dead, code=-9))
    status = "[2026-03-09 07:12:40] Exit code: -9"
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, status)


def test_a_request_the_server_refused_with_a_4xx_is_no_failure_while_it_serves_on():
    served = '[2026-06-09 08:0{m}:09] INFO:     10.42.0.15:51744 - "POST /v1/chat/completions HTTP/1.1" 200 OK'
    refused = (
        "[2026-06-09 08:05:40] ERROR:    The input (271023 tokens) is longer than the model's "
        "context length (262144 tokens)."
    )
    answer = '[2026-06-09 08:05:40] INFO:     10.42.0.15:51790 - "POST /v1/chat/completions HTTP/1.1" {status}'
    log = f"{served.format(m=3)}\n{refused}\n{answer}\n{served.format(m=6)}\n"
    assert run(log.format(status="400 Bad Request")).failure_class is C.NONE
    assert run(log.format(status="500 Internal Server Error")).failure_class is C.OTHER


def test_frames_a_chat_client_joined_onto_one_line_still_show_their_exception():
    oom = (
        'File "/envs/sgl/lib/python3.10/site-packages/torch/utils/_device.py", line 79, in '
        "__torch_function__ return func(*args, **kwargs) torch.OutOfMemoryError: CUDA out of "
        "memory. Tried to allocate 576.00 MiB. GPU 0 has a total capacity of 39.39 GiB"
    )
    text = f"""[2024-12-19 10:02:52 TP0] Load weight begin. avail mem=39.04 GB
[2024-12-19 10:02:53 TP0] Traceback (most recent call last): File "/envs/sgl/lib/python3.10/site-packages/sglang/srt/managers/scheduler.py", line 1404, in run_scheduler_process scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)
File "/envs/sgl/lib/python3.10/site-packages/sglang/srt/layers/linear.py", line 149, in create_weights torch.empty(
{oom}
"""
    result = run(text)
    assert (result.failure_class, result.root_cause_line) == (C.WEIGHTS_OOM, oom)


@pytest.mark.parametrize("killed", ["Убито", "Getötet", "已杀死"])
def test_a_shells_killed_in_the_operators_language_is_a_kill(killed):
    progress = (
        "Loading safetensors checkpoint shards:  33% Completed | 1/3 [00:19<00:38, 19.11s/it]"
    )
    text = (
        f"[2024-12-14 18:20:12 TP0] Load weight begin. avail mem=22.52 GB\n{progress}\n{killed}\n"
    )
    result = run(text)
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, killed)


NOTEBOOK_START = """In [4]: import sglang as sgl
   ...: llm = sgl.Engine(model_path="Qwen/Qwen2.5-32B-Instruct-AWQ", tp_size=2)
[2025-08-02 14:33:05 TP0] Init torch distributed begin.
[2025-08-02 14:33:09 TP0] Init torch distributed ends. mem usage=0.38 GB
"""


def test_an_engine_start_interrupted_in_a_notebook_hangs_at_its_last_step():
    interrupted = """---------------------------------------------------------------------------
KeyboardInterrupt                         Traceback (most recent call last)
Cell In[4], line 2
----> 2 llm = sgl.Engine(model_path="Qwen/Qwen2.5-32B-Instruct-AWQ", tp_size=2)

File /usr/lib/python3.10/multiprocessing/connection.py:414, in _ConnectionBase._recv_bytes(self, maxsize)
--> 414 buf = self._recv(4)

KeyboardInterrupt:
"""
    result = run(NOTEBOOK_START + interrupted)
    assert (result.failure_class, result.root_cause_line) == (
        C.HANG_TIMEOUT,
        "[2025-08-02 14:33:09 TP0] Init torch distributed ends. mem usage=0.38 GB",
    )


def test_a_notebook_that_went_on_to_its_next_cell_had_its_engine_up():
    next_cell = """
In [5]: outs = llm.generate(["Capital of Mongolia?"], {"max_new_tokens": 16})
The capital of Mongolia is Ulaanbaatar.
"""
    assert run(NOTEBOOK_START + next_cell).failure_class is C.NONE
    assert run(NOTEBOOK_START).failure_class is C.HANG_TIMEOUT  # the cell never returned


def test_the_kernels_oom_kill_in_the_second_sglang_noticed_the_death_is_its_root():
    kill = (
        "[Mon Sep 14 21:03:54 2026] Out of memory: Killed process 5512 (sglang::schedul) "
        "total-vm:48811236kB, anon-rss:30112448kB"
    )
    noticed = (
        "[2026-09-14 21:03:{s}] Subprocess scheduler_0 (pid=5512) crashed with exit code -9. "
        "Triggering SIGQUIT for cleanup..."
    )
    log = "[2026-09-14 21:03:40 TP0] Load weight begin. avail mem=78.50 GB\n{noticed}\n{kill}\n"
    same_second = run(log.format(noticed=noticed.format(s=54), kill=kill))
    assert (same_second.failure_class, same_second.root_cause_line) == (C.KILLED_BY_SIGNAL, kill)
    later = noticed.format(s=50)  # SGLang noticed first: a kill after it is another's
    earlier = run(log.format(noticed=later, kill=kill))
    assert (earlier.failure_class, earlier.root_cause_line) == (C.KILLED_BY_SIGNAL, later)


def test_a_member_the_kernel_killed_is_why_its_group_failed():
    kill = (
        "[Tue Dec  9 10:02:11 2025] Out of memory: Killed process 48213 (sglang::schedul) "
        "total-vm:612450300kB, anon-rss:118042112kB"
    )
    text = f"""[2025-12-09 10:02:05 TP0] Prefill batch, #new-seq: 3, #new-token: 8192, #cached-token: 24576, token usage: 0.42, #running-req: 96, #queue-req: 5
[2025-12-09 10:02:12 TP4] [rank4]:[E1209 10:02:12.446102118 ProcessGroupNCCL.cpp:1895] [PG ID 2 PG GUID 3(TP) Rank 4] Process group watchdog thread terminated with exception: NCCL error: remote process exited or there was a network error, NCCL version 2.27.3
ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.

==== node1: dmesg -T | tail ====
{kill}
"""
    result = run(text)
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, kill)


def test_a_gateway_that_gave_up_on_a_server_retracting_for_memory_saw_the_full_pool():
    retract = (
        "[2026-03-04 17:42:09 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 4, "
        "#new_tokens_gained: 38912, #new_token_ratio: 0.3310 -> 0.7000"
    )
    timeout = (
        "2026-03-04T17:48:01.544Z ERROR smg::routers::http::router: all 3 attempts failed for "
        "POST /v1/chat/completions: upstream timeout"
    )
    result = run(f"{retract}\n{timeout}\n")
    assert (result.failure_class, result.root_cause_line) == (C.KV_POOL_EXHAUSTED, retract)
    assert run(f"{timeout}\n").failure_class is C.HANG_TIMEOUT


def test_a_native_librarys_cuda_error_is_the_devices_unless_its_launch_was_wrong():
    fault = (
        "RuntimeError: Failed: CUDA error /sgl-workspace/DeepEP/csrc/deep_ep.cpp:587 "
        "'uncorrectable NVLink error detected during the execution'"
    )
    launch = (
        "RuntimeError: Failed: CUDA error /media/ssd1/DeepEP/csrc/kernels/internode_ll.cu:341 "
        "'too many blocks in cooperative launch'"
    )
    assert (run(f"{fault}\n").failure_class, run(f"{launch}\n").failure_class) == (
        C.CUDA_ERROR,
        C.KERNEL_ERROR,
    )


def test_a_kv_transfer_for_a_request_its_client_aborted_is_no_failure_while_serving_goes_on():
    batch = (
        "[2026-02-24 15:58:{s} TP0] Prefill batch, #new-seq: 1, #new-token: 2201, #cached-token: "
        "0, #token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0"
    )
    failed = (
        "[2026-02-24 15:58:49 TP0] Prefill transfer failed for request rank=0 req.rid='e04c7d9a' "
        "req.bootstrap_room=2991847561200384117 with exception "
        "KVTransferError(bootstrap_room=2991847561200384117): {why}"
    )
    log = f"{batch.format(s=40)}\n{failed}\n{batch.format(s=52)}\n"
    assert run(log.format(why="Aborted by AbortReq.")).failure_class is C.NONE
    lost = run(log.format(why="Failed to get kvcache from decode instance"))
    assert lost.failure_class is C.DISTRIBUTED_INIT


@pytest.mark.parametrize("size", ["tp_size", "attn_tp_size", "moe_ep_size"])
def test_a_models_assert_that_its_heads_split_by_a_parallel_size_rejects_that_size(size):
    source = f"assert self.total_num_heads % {size} == 0"
    text = f"""[2026-09-30 20:11:07 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/models/qwen3.py", line 166, in __init__
    {source}
AssertionError
"""
    result = run(text)
    assert (result.failure_class, result.root_cause_line) == (C.INVALID_ARGUMENT, source)


HUB_CHAIN = """Traceback (most recent call last):
  File "/venv/lib/python3.10/site-packages/huggingface_hub/utils/_validators.py", line 154, in validate_repo_id
    raise HFValidationError(
{validation}

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/venv/lib/python3.10/site-packages/transformers/utils/hub.py", line 517, in cached_files
    raise OSError(f"Incorrect path_or_model_id: '{{path_or_repo_id}}'. Please provide either the path to a local folder or the repo_id of a model on the Hub.") from e
{summary}
"""
HF_VALIDATION = (
    "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
    "'namespace/repo_name': '/mnt/models/Qwen2.5-14B-Instruct'. Use `repo_type` argument if needed."
)
INCORRECT_PATH = (
    "OSError: Incorrect path_or_model_id: '/mnt/models/Qwen2.5-14B-Instruct'. Please provide "
    "either the path to a local folder or the repo_id of a model on the Hub."
)


def test_transformers_summary_of_a_path_the_hub_rejected_is_the_root():
    result = run(HUB_CHAIN.format(validation=HF_VALIDATION, summary=INCORRECT_PATH))
    assert (result.failure_class, result.root_cause_line) == (C.MODEL_LOAD_ERROR, INCORRECT_PATH)


def test_a_supervisors_relaunch_that_serves_says_nothing_of_the_run_that_failed():
    failed = HUB_CHAIN.format(validation=HF_VALIDATION, summary=INCORRECT_PATH)
    relaunch = (
        "[2025-10-06 06:41:36] server_args=ServerArgs(model_path='/mnt/models/Qwen2.5-14B-Instruct')\n"
        "[2025-10-06 06:42:46] INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)\n"
        "[2025-10-06 06:42:48] The server is fired up and ready to roll!\n"
    )
    result = run(failed + relaunch)
    assert (result.failure_class, result.root_cause_line) == (C.MODEL_LOAD_ERROR, INCORRECT_PATH)
    # with no relaunch's arguments between, the serving is the failed run's own: the
    # condition's first sign is then the root (rooted_earliest's served-on rule)
    same_run = relaunch.split("\n", 1)[1]
    assert run(failed + same_run).root_cause_line == HF_VALIDATION


def test_torchs_warning_that_cuda_failed_to_initialize_is_the_root_of_the_error_repeating_it():
    warning = (
        "/usr/local/lib/python3.10/dist-packages/torch/cuda/__init__.py:174: UserWarning: CUDA "
        "initialization: Unexpected error from cudaGetDeviceCount(). Did you run some cuda "
        "functions before calling NumCudaDevices() that might have already set an error? Error "
        "802: system not yet initialized"
    )
    error = (
        "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions "
        "before calling NumCudaDevices() that might have already set an error? Error 802: system "
        "not yet initialized"
    )
    text = f"""{warning}
  return torch._C._cuda_getDeviceCount() > 0
[2026-02-02 10:00:01] server_args=ServerArgs(model_path='Qwen/Qwen3-8B')
Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/torch/cuda/__init__.py", line 372, in _lazy_init
    torch._C._cuda_init()
{error}
"""
    result = run(text)
    assert (result.failure_class, result.root_cause_line) == (C.CUDA_ERROR, warning)
    assert run(text.replace(warning, "")).root_cause_line == error  # no warning: the error


def test_flashinfers_own_check_failing_in_a_kernels_dispatch_is_a_kernel_error():
    error = (
        "RuntimeError: Error in function 'BatchPrefillWithPagedKVCacheDispatched' at "
        "/workspace/include/flashinfer/attention/prefill.cuh:2335: FlashInfer Internal Error: "
        "Invalid configuration : NUM_MMA_Q=1 NUM_MMA_D_QK=32 NUM_MMA_D_VO=32 NUM_MMA_KV=1"
    )
    text = f"[2026-03-11 12:04:52] Scheduler hit an exception: Traceback (most recent call last):\n...\n{error}\n"
    result = run(text)
    assert (result.failure_class, result.root_cause_line) == (C.KERNEL_ERROR, error)


@pytest.mark.parametrize(
    "hub",
    [
        "/opt/venv/lib/python3.11/site-packages/huggingface_hub/file_download.py",
        "/opt/venv/lib/python3.11/site-packages/modelscope/hub/file_download.py",
    ],
)
def test_a_network_error_the_models_download_went_on_through_is_a_model_load_error(hub):
    timeout = (
        "urllib3.exceptions.ReadTimeoutError: HTTPSConnectionPool(host='cas-bridge.xethub.hf.co', "
        "port=443): Read timed out."
    )
    text = f"""Traceback (most recent call last):
  File "/opt/venv/lib/python3.11/site-packages/urllib3/response.py", line 748, in _error_catcher
    yield
{timeout}

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "{hub}", line 1722, in _download_to_tmp_and_move
    http_get(
  File "/opt/venv/lib/python3.11/site-packages/requests/models.py", line 822, in generate
    raise ConnectionError(e)
requests.exceptions.ConnectionError: HTTPSConnectionPool(host='cas-bridge.xethub.hf.co', port=443): Read timed out.
"""
    result = run(text)
    assert (result.failure_class, result.root_cause_line) == (C.MODEL_LOAD_ERROR, timeout)


@pytest.mark.parametrize(
    "limit",
    [
        "=>> PBS: job killed: walltime 28836 exceeded limit 28800",
        "Warning  DeadlineExceeded  12m   job-controller  Job was active longer than specified deadline",
        "2026-04-14T09:48:40.1025339Z ##[error]The job running on runner h100-runner-2 has exceeded "
        "the maximum execution time of 60 minutes.",
    ],
)
def test_a_job_schedulers_time_limit_kills_the_server_from_outside(limit):
    progress = "[2026-04-14 09:40:02 TP0] Load weight begin. avail mem=78.50 GB"
    result = run(f"{progress}\n{limit}\n")
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, limit)


def test_a_ctrl_c_echoed_onto_the_next_line_stops_a_stuck_start():
    last = "[2026-09-02 22:14:09 TP3] Init parallel begin."
    text = f"""[2026-09-02 22:14:08 TP0] Init parallel begin.
{last}
^C[2026-09-02 22:54:31] Received sigquit from a child process. It usually means the child failed.
Killed
"""
    result = run(text)
    assert (result.failure_class, result.root_cause_line) == (C.HANG_TIMEOUT, last)


def test_docker_events_container_oom_is_the_kill():
    oom = (
        "2025-07-08T15:21:05.418227610Z container oom 9c1de7f03b2a55e0c4a1a87f3b9fa7b53ff8aa2c0f36a0b1e1b3a0fd4b4f9e6d "
        "(image=lmsysorg/sglang:v0.4.6.post5-cu124, name=sglang-vl)"
    )
    text = f"$ docker ps -a\nExited (137) 6 minutes ago\n$ docker events --since 1h\n{oom}\n"
    result = run(text)
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, oom)


BATCH = (
    "[2026-02-01 10:00:05 TP0] Decode batch, #running-req: 1, #token: 10, token usage: 0.01,"
    " cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 0\n"
)


def test_one_pd_transfer_its_client_aborted_on_a_serving_server_is_no_failure():
    failed = (
        "[2026-02-01 10:00:06 TP0] Prefill transfer failed for request rank=0 "
        "req.rid='8c1f2b7d44e04f0fa3b9c2e1d7a6f511' req.bootstrap_room=4419026671530148823\n"
    )
    aborted = (
        "2026-02-01T10:00:05.903Z  WARN sglang_router_rs::routers::http::pd_router: Client "
        "disconnected, aborting request rid=8c1f2b7d44e04f0fa3b9c2e1d7a6f511\n"
    )
    assert run(BATCH + failed + BATCH + aborted).failure_class is C.NONE
    # no word that its client gave up on it: a transfer that failed
    assert run(BATCH + failed + BATCH).failure_class is C.DISTRIBUTED_INIT


def test_a_hybrid_models_state_slots_full_with_requests_waiting_is_the_mamba_cache():
    capped = (
        "[2026-09-15 08:03:27] max_running_requests is capped to 12 by the mamba state cache "
        "(max_mamba_cache_size=36, 3 state slots per request). To raise it: increase "
        "--mamba-full-memory-ratio or --max-mamba-cache-size\n"
    )
    full = (
        "[2026-09-15 08:19:40] Decode batch, #running-req: 12, #full token: 96115, full token "
        "usage: 0.12, mamba num: 36, mamba usage: 1.00, cuda graph: True, gen throughput "
        "(token/s): 401.62, #queue-req: 52\n"
    )
    result = run(capped + full + full)
    assert (result.failure_class, result.root_cause_line) == (
        C.MAMBA_CACHE_EXHAUSTED,
        capped.strip(),
    )
    assert result.signature == "mamba_full_with_requests_waiting"
    # the slots all taken with nobody waiting: the cache sized right for the load
    assert run(capped + full.replace("#queue-req: 52", "#queue-req: 0")).failure_class is C.NONE


def test_pythons_faulthandler_going_off_is_a_hang_at_its_header():
    log = (
        BATCH + "Timeout (0:30:00)!\n\nThread 0x00007f3a1dbfe640 (most recent call first):\n"
        '  File "/usr/lib/python3.12/threading.py", line 359 in wait\n'
    )
    result = run(log)
    assert (result.failure_class, result.root_cause_line) == (C.HANG_TIMEOUT, "Timeout (0:30:00)!")


def test_no_gpu_to_be_found_after_the_driver_lost_one_is_that_loss():
    lost = (
        "Oct 07 03:12:55 inf-07 kernel: NVRM: Xid (PCI:0000:ca:00): 79, pid='<unknown>', "
        "name=<unknown>, GPU has fallen off the bus."
    )
    gone = "RuntimeError: No CUDA GPUs are available\n"
    result = run(f"{BATCH}{lost}\n{gone}")
    assert (result.failure_class, result.root_cause_line) == (C.CUDA_ERROR, lost)
    assert run(gone).failure_class is C.OTHER  # no GPU at all: the host's


def test_json_that_does_not_parse_is_the_override_flag_or_the_config_file():
    frames = (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.12/json/decoder.py", line 353, in raw_decode\n'
        "    obj, end = self.scan_once(s, idx)\n"
    )
    python_dict = (
        "json.decoder.JSONDecodeError: Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1)"
    )
    command = (
        "$ python -m sglang.launch_server --model-path Qwen/Qwen3-32B "
        "--json-model-override-args {'rope_scaling': {'rope_type': 'yarn', 'factor': 4.0}}\n"
    )
    result = run(command + frames + python_dict + "\n")
    assert (result.failure_class, result.root_cause_line) == (C.INVALID_ARGUMENT, python_dict)
    # no flag passed: a file that reads as nothing (config.json cut to zero bytes)
    assert run(frames + python_dict + "\n").failure_class is C.MODEL_LOAD_ERROR
    # a config.json hand-edited wrong, though the flag is there: the decoder says line 27
    trailing_comma = python_dict.replace("line 1 column 2 (char 1)", "line 27 column 1 (char 803)")
    assert run(command + frames + trailing_comma + "\n").failure_class is C.MODEL_LOAD_ERROR


def test_cuda_that_could_not_start_on_gpus_that_are_there_is_the_cause_of_no_accelerator():
    warning = (
        "/usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py:182: UserWarning: CUDA "
        "initialization: Unexpected error from cudaGetDeviceCount(). Did you run some cuda "
        "functions before calling NumCudaDevices() that might have already set an error? Error "
        "802: system not yet initialized (Triggered internally at "
        "/pytorch/c10/cuda/CUDAFunctions.cpp:109.)"
    )
    raised = "RuntimeError: No accelerator (CUDA, XPU, HPU, NPU, MUSA) is available."
    result = run(f"{warning}\n  return torch._C._cuda_getDeviceCount() > 0\n{raised}\n")
    assert (result.failure_class, result.root_cause_line) == (C.CUDA_ERROR, warning)
    # error 100 is no GPU at all: the host's
    no_gpu = warning.replace(
        "Error 802: system not yet initialized", "Error 100: no CUDA-capable device is detected"
    )
    assert run(f"{no_gpu}\n{raised}\n").failure_class is C.OTHER


def test_an_architecture_the_loader_says_is_not_supported_is_an_unsupported_model():
    raised = "ValueError: GGUF model with architecture qwen35moe is not supported yet."
    log = (
        "Traceback (most recent call last):\n"
        '  File "/x/transformers/modeling_gguf_pytorch_utils.py", line 431, in load_gguf_checkpoint\n'
        '    raise ValueError(f"GGUF model with architecture {architecture} is not supported yet.")\n'
        f"{raised}\n"
    )
    result = run(log)
    assert (result.failure_class, result.root_cause_line) == (C.UNSUPPORTED_MODEL, raised)


def test_a_flag_or_backend_this_gpu_cannot_run_is_the_choice_rejected_not_a_kernel():
    chosen = "AssertionError: --dsv4-attn-backend trtllm requires an SM100/SM103 (Blackwell) GPU."
    frames = (
        'Traceback (most recent call last):\n  File "/usr/local/bin/sglang", line 8, in <module>\n'
    )
    result = run(f"{frames}{chosen}\n")
    assert (result.failure_class, result.root_cause_line) == (C.INVALID_ARGUMENT, chosen)
    # a kernel built only for other GPUs, nothing the operator chose
    built = "RuntimeError: FlashInfer requires GPUs with sm75 or higher"
    assert run(f"{frames}{built}\n").failure_class is C.KERNEL_ERROR


@pytest.mark.parametrize(
    "gateway",
    [
        "2026-03-30T22:08:01Z ERROR no healthy workers for model qwen3-32b, returning 503",
        "2026-03-30T22:08:01Z WARN Worker http://10.0.0.7:30000 marked unhealthy",
    ],
)
def test_a_gateway_finding_no_healthy_worker_says_the_server_stopped_answering(gateway):
    assert run(BATCH + gateway + "\n").failure_class is C.HANG_TIMEOUT


FALLBACK = (
    "[2025-10-29 15:40:06 TP0] MiniMaxM2ForCausalLM has no SGLang implementation, falling back "
    "to Transformers implementation. Some features may not be supported."
)


def test_a_run_that_failed_after_falling_back_to_transformers_cannot_serve_the_model():
    unsupported = run(
        f"{FALLBACK}\nValueError: MiniMaxM2Model does not support an attention implementation "
        "through torch.nn.functional.scaled_dot_product_attention yet.\n"
    )
    assert (unsupported.failure_class, unsupported.root_cause_line) == (
        C.UNSUPPORTED_MODEL, FALLBACK,
    )  # fmt: skip
    # a cause of its own still names the class: the fallback ran, memory ran out
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    assert run(f"{FALLBACK}\n{oom}\n").failure_class is not C.UNSUPPORTED_MODEL
    served = "[2025-10-29 15:41:06] The server is fired up and ready to roll!"
    assert run(f"{FALLBACK}\n{served}\n").failure_class is C.NONE


def test_argparses_error_above_another_pods_log_is_the_root_not_the_reporters_prose():
    rejected = (
        "launch_server.py: error: argument --disaggregation-mode: invalid choice: 'prefil' "
        "(choose from 'null', 'prefill', 'decode')"
    )
    prefill_pod = ["usage: launch_server.py [-h] --model-path MODEL_PATH", rejected]
    # the decode pod, waiting on the prefill pod that never started
    decode_pod = [
        "[2026-02-27 09:14:51 TP0] Error fetching prefill parallel info from bootstrap: "
        "HTTPConnectionPool(host='qwen-pd-prefill', port=8998): Max retries exceeded"
    ]
    paste = [
        "$ kubectl logs -n llm qwen-pd-prefill-7c4b8d9f6-r2k8m",
        *prefill_pod,
        "$ kubectl logs -n llm qwen-pd-decode-6d5f9c7b8-jx2lq | tail -1",
        *decode_pod,
    ]
    result = run("\n".join(paste) + "\n")
    assert (result.failure_class, result.root_cause_line) == (C.INVALID_ARGUMENT, rejected)
