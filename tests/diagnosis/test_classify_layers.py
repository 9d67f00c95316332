"""The classifier's layers below the signatures, one family per test, on logs no signature
knows: the class must come from the exception's origin, the wording, the numbers or the way
the process ended, and every failure gets a class (``none`` only for a clean log)."""

from __future__ import annotations

import pytest

from exporter.diagnosis.classify import Confidence, Outcome, classify
from exporter.diagnosis.reading import caught_cause, last_meaningful
from exporter.diagnosis.taxonomy import FailureClass as C
from exporter.logs.lines import parse_line
from exporter.logs.reader import read_log


def run(text: str, outcome: Outcome | None = None):
    return classify(*read_log(text), outcome)


def raised_in(path: str, func: str, exception: str, source: str = "raise_it()") -> str:
    return (
        "Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.12/dist-packages/sglang/launch_server.py", line 14, in '
        "<module>\n"
        "    main()\n"
        f'  File "{path}", line 321, in {func}\n'
        f"    {source}\n"
        f"{exception}\n"
    )


SITE = "/usr/local/lib/python3.12/dist-packages"


@pytest.mark.parametrize(
    ("path", "func", "exception", "want"),
    [
        # 0.5.23 moved its argument checks out of server_args.py into arg_groups/
        (
            f"{SITE}/sglang/srt/arg_groups/speculative.py",
            "_check_draft",
            "ValueError: draft model and target model must share a vocabulary size",
            C.INVALID_ARGUMENT,
        ),
        (
            f"{SITE}/sglang/srt/server_args.py",
            "_handle_pd_disaggregation",
            "AssertionError: the decode server must not set a prefill-only option",
            C.INVALID_ARGUMENT,
        ),
        (
            f"{SITE}/transformers/configuration_utils.py",
            "_get_config_dict",
            "OSError: stale.json is not a valid JSON file",
            C.MODEL_LOAD_ERROR,
        ),
        (
            f"{SITE}/triton/compiler/compiler.py",
            "compile",
            "RuntimeError: PassManager::run failed",
            C.KERNEL_ERROR,
        ),
        # SGLang's check that a parallel size divides the model's heads, under the loader
        (
            f"{SITE}/sglang/srt/distributed/utils.py",
            "ensure_divisibility",
            "AssertionError: 16 is not divisible by 6",
            C.INVALID_ARGUMENT,
        ),
        (
            f"{SITE}/torch/distributed/rendezvous.py",
            "_create_c10d_store",
            "RuntimeError: the store at 10.0.0.2 never answered",
            C.DISTRIBUTED_INIT,
        ),
    ],
)
def test_the_code_that_raised_names_the_class(path, func, exception, want):
    result = run(raised_in(path, func, exception))
    assert result.failure_class is want
    assert result.root_cause_line == exception
    assert result.layer == "exception"
    assert result.confidence is Confidence.MEDIUM


def test_a_bind_cut_before_its_exception_took_a_taken_port_and_one_with_a_message_says_it():
    bind = raised_in(f"{SITE}/zmq/sugar/socket.py", "bind", "", "super().bind(addr)")
    cut = run(bind.rstrip("\n") + "\n")
    assert cut.failure_class is C.PORT_IN_USE
    read_only = "zmq.error.ZMQError: Read-only file system (addr='ipc:///tmp/tmpk2v8d1qe')"
    assert run(bind.rstrip("\n") + "\n" + read_only + "\n").failure_class is C.OTHER


def test_the_tail_of_an_assert_over_several_lines_is_code_not_the_error():
    # Grafana's log panel, newest first: the assert's last line with its message's literal
    # sits beside the AssertionError, with the same time
    message = (
        "Not enough space for mamba cache, try to increase --mamba-full-memory-ratio or "
        "--max-mamba-cache-size."
    )
    at = "2026-05-12 14:22:07.880\t"
    lines = [
        "2026-05-12 14:22:07.913\t[2026-05-12 14:22:07 TP0] Received sigquit from a child process.",
        f"{at}AssertionError: {message}",
        f'{at}    ), f"{message}"',
        f"{at}[2026-05-12 14:22:07 TP0] Scheduler hit an exception: Traceback (most recent call "
        "last):",
        "2026-05-12 14:22:07.102\t[2026-05-12 14:22:07 TP0] Decode batch, #running-req: 75, "
        "#full token: 212004, full token usage: 0.19, mamba num: 300, mamba usage: 1.00, "
        "#queue-req: 3",
        "2026-05-12 14:21:58.455\t[2026-05-12 14:21:58 TP0] Decode batch, #running-req: 74, "
        "#full token: 208773, full token usage: 0.19, mamba num: 296, mamba usage: 0.99, "
        "#queue-req: 0",
        "2026-05-12 14:15:40.019\t[2026-05-12 14:15:40 TP0] The server is fired up and ready to "
        "roll!",
    ]
    result = run("\n".join(lines) + "\n")
    assert result.failure_class is C.MAMBA_CACHE_EXHAUSTED
    assert result.root_cause_line == lines[1]


def test_a_validation_outside_argument_checks_is_not_an_argument_error():
    """An AttributeError in server_args.py is a bug in SGLang, not a rejected flag."""
    text = raised_in(
        f"{SITE}/sglang/srt/server_args.py",
        "__post_init__",
        "AttributeError: 'NoneType' object has no attribute 'lower'",
    )
    assert run(text).failure_class is C.OTHER


@pytest.mark.parametrize(
    ("line", "want"),
    [
        # pool sizing in the words of other allocators and pools
        ("ValueError: Not enough host memory available to hold 64.0 GB of cache", C.POOL_INIT_OOM),
        (
            "AssertionError: cannot allocate mamba state for 8 requests, raise the ratio",
            C.MAMBA_CACHE_EXHAUSTED,
        ),
        ("RuntimeError: No space left for the next request in the token pool", C.KV_POOL_EXHAUSTED),
        # the request slots, in 0.4.2's words and in 0.4.6+'s
        (
            "RuntimeError: Out of memory. Please set a smaller number for `--max-running-requests`.",
            C.KV_POOL_EXHAUSTED,
        ),
        # the token allocator's own words, without "Prefill" or "Decode" before them
        ("[2025-11-19 15:58:03] Out of memory. Try to lower your batch size.", C.KV_POOL_EXHAUSTED),
        # torch.compile failing to trace a custom kernel
        (
            "torch._dynamo.exc.TorchRuntimeError: Dynamo failed to run FX node with fake "
            "tensors: call_function sgl_kernel.awq_dequantize.default(*(FakeTensor(...),))",
            C.KERNEL_ERROR,
        ),
        # a router that gave up waiting for its workers at its start
        (
            "[Router (Rust)] 2025-06-11 07:49:12 - ERROR - Timeout 300s waiting for workers "
            '["http://llama-0:30000"] to become healthy. Please set '
            "--router-worker-startup-timeout-secs (sglang_router --worker-startup-timeout-secs) "
            "to a larger value",
            C.HANG_TIMEOUT,
        ),
        # a hybrid model's state slots, sized at startup, that hold no request (0.5.21+)
        (
            "RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve any "
            "requests. max_mamba_cache_size=1, mamba_ratio=5, resulting max_num_reqs=0.",
            C.MAMBA_CACHE_EXHAUSTED,
        ),
        # colours a terminal left in a docker compose paste
        (
            "\x1b[33mseed-b-1  |\x1b[0m RuntimeError: engine_info_bootstrap_port 6789 is already "
            "in use.",
            C.PORT_IN_USE,
        ),
        ("zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:5757')", C.PORT_IN_USE),
        ("RuntimeError: flash_mla is not installed; pip install flash-mla", C.DEPENDENCY_ERROR),
        # the shell finding no Python on the PATH cron gave it
        ("/bin/sh: 1: python: not found", C.DEPENDENCY_ERROR),
        (
            "RuntimeError: An error occurred while downloading using `hf_transfer`. Consider "
            "disabling HF_HUB_ENABLE_HF_TRANSFER for better error handling.",
            C.MODEL_LOAD_ERROR,
        ),
        # the graph capture's wrapper quoting FlashInfer's own words: a kernel that failed
        (
            "Exception: Capture cuda graph failed: FlashInfer Internal Error: Invalid "
            "configuration : NUM_MMA_Q=1 NUM_MMA_D_QK=20 NUM_MMA_D_VO=20 NUM_MMA_KV=1",
            C.KERNEL_ERROR,
        ),
        # a read-only model volume under the hub's lock file: the model could not be loaded
        (
            "OSError: [Errno 30] Read-only file system: '/models/llama-3.1-8b/.cache/huggingface/"
            "download/model-00001-of-00004.safetensors.lock'",
            C.MODEL_LOAD_ERROR,
        ),
        # a wheel built against another NumPy's C API
        (
            "ValueError: numpy.dtype size changed, may indicate binary incompatibility. "
            "Expected 96 from C header, got 88 from PyObject",
            C.DEPENDENCY_ERROR,
        ),
        # a kernel's launcher that reports the device's memory gone is memory, not a kernel
        ("RuntimeError: Triton Error [CUDA]: out of memory", C.RUNTIME_OOM),
        ("RuntimeError: Triton Error [CUDA]: invalid argument", C.KERNEL_ERROR),
        # CUDA that cannot start on GPUs that are there; error 100 is no GPU at all
        (
            "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda "
            "functions before calling NumCudaDevices() that might have already set an error? "
            "Error 802: system not yet initialized",
            C.CUDA_ERROR,
        ),
        (
            "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda "
            "functions before calling NumCudaDevices() that might have already set an error? "
            "Error 100: no CUDA-capable device is detected",
            C.OTHER,
        ),
    ],
)
def test_a_one_line_paste_is_classified_by_its_wording(line, want):
    result = run(line + "\n")
    assert result.failure_class is want
    assert result.root_cause_line == line


@pytest.mark.parametrize(
    ("line", "want"),
    [
        (
            "E0412 08:00:01.000000 4242 transfer_engine.cpp:88] RDMA handshake with peer 3 failed",
            C.DISTRIBUTED_INIT,
        ),
        (
            "[2026-02-01 10:00:00] Decode instance failed to register to bootstrap server: refused",
            C.DISTRIBUTED_INIT,
        ),
        (
            "[2026-02-01 10:00:00 TP0] Failed to compile the fused kernel for sm_120: ptxas error",
            C.KERNEL_ERROR,
        ),
        (
            "[rank0]:[W101 10:00:00.000 CUDACachingAllocator.cpp:1] memory allocation failed "
            "with OOM on device 0 while trying to allocate 4096 bytes",
            C.RUNTIME_OOM,
        ),
    ],
)
def test_error_records_of_the_layers_below_are_classified_by_their_wording(line, want):
    result = run(line + "\n")
    assert result.failure_class is want
    assert result.root_cause_line == line
    assert result.confidence is Confidence.LOW


@pytest.mark.parametrize(
    "line",
    [
        "[2026-02-01 10:00:00 TP0] ERROR: the frobnicator gave up on rank 0",
        # a program's error in its own capitals, before the server could start
        'docker: Error response from daemon: could not select device driver "" with '
        "capabilities: [[gpu]].",
        # SIGILL: a binary built for a CPU with more instructions; nothing killed it, and no
        # CUDA's "illegal instruction was encountered" either
        "Illegal instruction (core dumped)",
    ],
)
def test_an_unknown_error_record_is_other_never_none(line):
    result = run("[2026-02-01 09:59:00] Load weight begin. avail mem=70.00 GB\n" + line + "\n")
    assert result.failure_class is C.OTHER
    assert result.root_cause_line == line


def test_an_exception_the_standard_library_names_in_lower_case_is_the_root():
    # uvicorn's error record opens the traceback; the socket module's exception ends it
    error = "socket.gaierror: [Errno -2] Name or service not known"
    text = (
        "ERROR:    Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.12/socket.py", line 976, in getaddrinfo\n'
        "    for res in _socket.getaddrinfo(host, port, family, type, proto, flags):\n"
        f"{error}\n"
    )
    result = run(text)
    assert (result.failure_class, result.root_cause_line) == (C.OTHER, error)


def test_a_script_named_after_the_package_it_imports_is_no_missing_package():
    shadowed = (
        "AttributeError: partially initialized module 'sglang' has no attribute 'Engine' (most "
        "likely due to a circular import)"
    )
    text = (
        "Traceback (most recent call last):\n"
        '  File "/home/maria/llm-test/sglang.py", line 3, in <module>\n'
        '    llm = sgl.Engine(model_path="Qwen/Qwen2.5-1.5B-Instruct")\n'
        f"{shadowed}\n"
    )
    assert run(text).failure_class is C.OTHER
    # a package whose module lacks what its caller wants is a version mismatch
    mismatch = text.replace(shadowed, "AttributeError: module 'triton' has no attribute 'knobs'")
    assert run(mismatch).failure_class is C.DEPENDENCY_ERROR


def test_a_wrapper_quoting_the_failed_command_rejects_none_of_its_flags():
    # The wrapper's error quotes the launch command whole: its flags are the operator's, and
    # the child's own output, which held the cause, is not in this paste.
    line = (
        "subprocess.CalledProcessError: Command '['python3', '-m', 'sglang.launch_server', "
        "'--model-path', 'Qwen/Qwen3-8B', '--tp', '2']' returned non-zero exit status 1."
    )
    text = (
        "Traceback (most recent call last):\n"
        '  File "/app/run.py", line 12, in <module>\n'
        "    subprocess.run(cmd, check=True)\n" + line + "\n"
    )
    result = run(text)
    assert result.failure_class is C.OTHER
    assert result.root_cause_line == line


def test_a_tail_of_sglang_teardown_is_other_and_says_the_cause_is_cut_off():
    text = (
        "[2026-02-01 10:00:00 TP1] Scheduler hit an exception: Traceback (most recent call last):\n"
        "[2026-02-01 10:00:00] Received sigquit from a child process. It usually means the child "
        "failed.\n"
    )
    result = run(text)
    assert result.failure_class is C.OTHER
    assert result.root_cause_line.startswith("[2026-02-01 10:00:00 TP1] Scheduler hit an exception")
    assert "cut off" in result.diagnosis


def test_a_traceback_cut_before_its_exception_is_read_from_its_frames():
    text = (
        f'  File "{SITE}/sglang/srt/disaggregation/mooncake/conn.py", line 50, in __init__\n'
        "    self._listen()\n"
        f'  File "{SITE}/sglang/srt/disaggregation/common/conn.py", line 96, in _listen\n'
        "    self.socket.bind(self.endpoint)\n"
        f'  File "{SITE}/zmq/sugar/socket.py", line 320, in bind\n'
        "    super().bind(addr)\n"
    )
    result = run(text)
    assert result.failure_class is C.PORT_IN_USE
    assert result.root_cause_line == "self.socket.bind(self.endpoint)"
    assert "cut off" in result.diagnosis


def test_a_hard_wrapped_frame_still_places_an_oom():
    text = (
        f'File "{SITE}/sglang/srt/mem_cache/memory_pool.py",\n'
        "line 120, in _create_buffers\n"
        "torch.OutOfMemoryError: CUDA out of memory.\n"
        "Tried to allocate 9.00 GiB.\n"
    )
    result = run(text)
    assert result.failure_class is C.POOL_INIT_OOM
    assert result.root_cause_line == "torch.OutOfMemoryError: CUDA out of memory."


def test_an_error_logged_before_it_is_raised_is_rooted_where_it_was_said_first():
    said = "[2026-02-01 10:00:00 TP0] Radix cache check failed: leaf 12 is missing from the LRU"
    text = (
        said
        + "\n"
        + raised_in(
            f"{SITE}/sglang/srt/mem_cache/radix_cache.py",
            "sanity_check",
            "AssertionError: leaf 12 is missing from the LRU",
        )
    )
    assert run(text).root_cause_line == said


def test_a_pool_full_with_requests_waiting_shows_in_the_numbers():
    batch = (
        "[2026-02-01 10:00:0{n} TP0] Decode batch, #running-req: 9, #token: 81920, token usage: "
        "{usage}, cuda graph: True, gen throughput (token/s): 300.00, #queue-req: {queued}"
    )
    healthy = batch.format(n=0, usage="0.60", queued=0) + "\n"
    assert run(healthy).failure_class is C.NONE
    full = batch.format(n=1, usage="1.00", queued=12)
    result = run(healthy + full + "\n")
    assert result.failure_class is C.KV_POOL_EXHAUSTED
    assert result.root_cause_line == full
    # SGLang's own words for it, later, are the root: the numbers only corroborate them.
    retract = (
        "[2026-02-01 10:00:07 TP0] Decode out of memory happened. #retracted_reqs: 1, "
        "#new_token_ratio: 0.4000 -> 0.4718"
    )
    said = run(healthy + full + "\n" + retract + "\n")
    assert (said.failure_class, said.root_cause_line) == (C.KV_POOL_EXHAUSTED, retract)


def test_a_graph_capture_started_without_memory_is_a_graph_oom():
    starved = "Capturing batches (bs=256 avail_mem=0.08 GB):   0%|          | 0/35 [00:00<?, ?it/s]"
    text = (
        starved
        + "\n"
        + raised_in(f"{SITE}/torch/fx/graph_module.py", "__call__", "RuntimeError: the graph broke")
    )
    result = run(text)
    assert result.failure_class is C.CUDA_GRAPH_OOM
    assert result.root_cause_line == starved
    roomy = starved.replace("0.08", "12.50")
    assert run(roomy + "\n" + text.split("\n", 1)[1]).failure_class is not C.CUDA_GRAPH_OOM


def test_a_launcher_killed_from_outside_has_no_root_cause_line():
    text = (
        "[2026-02-01 10:00:00] The server is fired up and ready to roll!\n"
        '[2026-02-01 10:05:00] INFO:     127.0.0.1:40000 - "GET /health HTTP/1.1" 200 OK\n'
    )
    result = run(text, Outcome(exit_code=-9))
    assert result.failure_class is C.KILLED_BY_SIGNAL
    assert result.root_cause_line is None
    assert "no error" in result.diagnosis and "signal 9" in result.diagnosis


def test_a_restart_with_no_last_words_is_a_kill_from_outside_with_no_root_line():
    shards = (
        "Loading safetensors checkpoint shards:  31% Completed | 4/13 [00:38<01:26,  9.58s/it]\n"
    )
    first = (
        "[2026-10-13 22:41:06] Init torch distributed begin.\n"
        "[2026-10-13 22:41:07] Load weight begin. avail mem=93.12 GB\n" + shards
    )
    again = (
        "[2026-10-13 22:42:38] Init torch distributed begin.\n"
        "[2026-10-13 22:42:40] Load weight begin. avail mem=93.12 GB\n"
    )
    result = run(first + again)
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, None)
    assert result.signature == "restarted_silently" and "starting again" in result.diagnosis
    # Stopped, then started again: no kill; and one startup that stops is no restart.
    stopped = first + "[2026-10-13 22:42:00] SIGTERM received. signum=None frame=None.\n"
    assert run(stopped + again).failure_class is not C.KILLED_BY_SIGNAL
    # ... even when it answered a last request while it drained
    drained = '[2026-10-13 22:42:01] INFO:     10.20.1.5:33022 - "POST /generate HTTP/1.1" 200 OK\n'
    assert run(stopped + drained + again).failure_class is not C.KILLED_BY_SIGNAL
    assert run(first).failure_class is C.HANG_TIMEOUT
    # A draft model's init after the target's finished one (MTP, EAGLE) is no restart.
    draft = (
        "[2026-10-13 22:41:30] Capture cuda graph begin. This can take up to several minutes.\n"
        "[2026-10-13 22:41:40] Capture cuda graph end. Time elapsed: 10.21 s. mem usage=0.52 GB.\n"
        "[2026-10-13 22:41:40] Init torch distributed begin.\n"
    )
    assert run(first + draft).failure_class is not C.KILLED_BY_SIGNAL
    # Ranks of one launch reach their steps at their own pace: no restart.
    ranks = (
        "[2026-10-13 22:41:06 TP0] Init torch distributed begin.\n"
        "[2026-10-13 22:41:07 TP0] Load weight begin. avail mem=93.12 GB\n"
        "[2026-10-13 22:41:07 TP1] Init torch distributed begin.\n"
    )
    assert run(ranks).failure_class is not C.KILLED_BY_SIGNAL


def test_the_kubelets_events_say_a_hung_server_was_restarted_or_its_container_killed():
    describe = (
        "    Last State:     Terminated\n"
        "      Reason:       Error\n"
        "      Exit Code:    137\n"
        "Events:\n"
        "  Type     Reason     Age                  From     Message\n"
        "  ----     ------     ----                 ----     -------\n"
    )
    probe = (
        "  Warning  Unhealthy  4m12s (x3 over 4m52s)  kubelet  Liveness probe failed: Get "
        '"http://10.42.3.18:30000/health": context deadline exceeded\n'
    )
    killing = "  Normal   Killing    4m12s   kubelet  Container sglang failed liveness probe, will be restarted\n"
    hung = run(describe + probe + killing)
    assert hung.failure_class is C.HANG_TIMEOUT
    assert hung.root_cause_line == probe.strip()
    killed = run(describe)
    assert (killed.failure_class, killed.root_cause_line) == (
        C.KILLED_BY_SIGNAL,
        "Exit Code:    137",
    )


def test_c10d_naming_an_address_it_cannot_resolve_is_the_root_before_the_store_times_out():
    benign = "1: [W519 22:04:50.118734201 socket.cpp:209] [c10d] The hostname of the client socket cannot be retrieved. err=-3"
    cause = (
        "1: [W519 22:04:50.121002384 socket.cpp:755] [c10d] The IPv6 network addresses of "
        "(gpu-a-017.cluster, 5000) cannot be retrieved (gai error: -2 - Name or service not known)."
    )
    text = (
        "1: [2026-05-19 22:04:50 TP8] Init torch distributed begin.\n"
        f"{benign}\n{cause}\n"
        "1: [2026-05-19 22:14:50 TP8] Scheduler hit an exception: Traceback (most recent call last):\n"
        f'1:   File "{SITE}/torch/distributed/rendezvous.py", line 189, in _create_c10d_store\n'
        "1:     return TCPStore(\n"
        "1: torch.distributed.DistNetworkError: The client socket has timed out after 600000ms "
        "while trying to connect to (gpu-a-017.cluster, 5000).\n"
    )
    result = run(text)
    assert (result.failure_class, result.root_cause_line) == (C.DISTRIBUTED_INIT, cause)


def test_c10d_retrying_its_client_socket_is_rooted_where_the_retries_gave_up():
    retry = (
        "[W310 09:30:23.118402144 socket.cpp:767] [c10d] The client socket has failed to connect "
        "to [10.0.1.21]:20000 (errno: 113 - No route to host)."
    )
    gave_up = (
        "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms "
        "while trying to connect to (10.0.1.21, 20000)."
    )
    text = (
        "[2026-03-10 09:30:20 TP8] Init torch distributed begin.\n"
        f"{retry}\n{retry}\n"
        "[2026-03-10 09:40:23 TP8] Scheduler hit an exception: Traceback (most recent call last):\n"
        f'  File "{SITE}/torch/distributed/rendezvous.py", line 189, in _create_c10d_store\n'
        "    return TCPStore(\n"
        f"{gave_up}\n"
    )
    result = run(text)
    assert (result.failure_class, result.root_cause_line) == (C.DISTRIBUTED_INIT, gave_up)
    gloo = (
        "RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/"
        "pair.cc:144] no error"
    )
    result = run(text.replace(gave_up, gloo))
    assert (result.failure_class, result.root_cause_line) == (C.DISTRIBUTED_INIT, gloo)
    # its server socket that could not bind retried nothing: that warning says it first
    taken = (
        "[W310 09:30:21.206418512 socket.cpp:464] [c10d] The server socket has failed to bind to "
        "[::]:20000 (errno: 98 - Address already in use)."
    )
    listen = (
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
        "network address. port: 20000, useIpv6: false, code: -98, name: EADDRINUSE, message: "
        "address already in use"
    )
    result = run(f"{taken}\n{listen}\n")
    assert (result.failure_class, result.root_cause_line) == (C.PORT_IN_USE, taken)


def test_the_kernels_oom_killer_is_rooted_at_the_kill_not_the_report_around_it():
    invoked = "[Fri Aug 30 19:13:19 2024] python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0"
    report = "[Fri Aug 30 19:13:19 2024] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom"
    kill = "[Fri Aug 30 19:13:19 2024] Out of memory: Killed process 90311 (python3) total-vm:61983312kB, anon-rss:27431872kB"
    result = run(f"{invoked}\n{report}\n{kill}\n")
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, kill)
    # Without the kill's own line, the report still says who did it.
    assert run(f"{invoked}\n{report}\n").root_cause_line == invoked


def test_a_kubelet_eviction_is_a_kill_rooted_at_the_pods_status_message():
    message = (
        "Message:          The node was low on resource: memory. Threshold quantity: 100Mi, "
        "available: 84244Ki. Container sglang was using 61572Mi, request is 32Gi."
    )
    event = "  Warning  Evicted    14m   kubelet  The node was low on resource: memory."
    result = run(f"Status:           Failed\nReason:           Evicted\n{message}\n{event}\n")
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, message)


@pytest.mark.parametrize(
    "line",
    [
        "AssertionError: Torch not compiled with CUDA enabled",
        "AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'",
        "RuntimeError: No CUDA GPUs are available",
        "RuntimeError: CUDA error: no CUDA-capable device is detected",
    ],
)
def test_a_torch_with_no_cuda_device_to_use_is_no_accelerator_other(line):
    result = run(line + "\n")
    assert (result.failure_class, result.root_cause_line) == (C.OTHER, line)


def test_an_outside_memory_monitor_is_a_kill_not_a_device_oom():
    raylet = (
        "(raylet) [2025-10-09 11:09:37,551 E 2231 2231] (raylet) node_manager.cc:3193: 1 Workers "
        "(tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other "
        "reasons at node (ID: 5c1f, IP: 10.0.2.15) over the last time period."
    )
    driver = (
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory."
    )
    result = run(f"{raylet}\n{driver}\n")
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, raylet)
    assert run(driver + "\n").failure_class is C.KILLED_BY_SIGNAL


def test_the_hip_runtimes_api_trace_is_no_failure():
    text = (
        "[2025-08-19 14:03:31] The server is fired up and ready to roll!\n"
        ":3:hip_event.cpp:362 : 9135550393 us: [pid:412 tid:0x7f] hipEventQuery: Returned "
        "hipErrorNotReady : \n"
    )
    assert run(text).failure_class is C.NONE


def test_the_hip_runtime_naming_its_error_outranks_the_scheduler_that_died_of_it():
    hip = "hipErrorNoBinaryForGpu: Unable to find code object for all current devices!"
    text = (
        f"[2025-08-19 14:03:31 TP0] Init torch distributed begin.\n{hip}\n"
        "[2025-08-19 14:03:33] Rank 0 scheduler is dead. Please check if there are relevant logs.\n"
        "[2025-08-19 14:03:33] Exit code: -6\n"
    )
    result = run(text)
    assert (result.failure_class, result.root_cause_line) == (C.CUDA_ERROR, hip)


def test_an_operator_named_after_a_collective_is_no_collective():
    # Ascend's fused matmul-and-allreduce kernel failed to build: a kernel's failure
    compile_error = (
        "[ERROR] TBE(88211,python3):2026-11-17-22:30:44.118.902 [op_compile] E40021: Failed to "
        "compile Op [MatmulAllReduce]."
    )
    text = (
        "[2026-11-17 22:30:10] Capture npu graph begin. avail mem=12.40 GB\n"
        f"{compile_error}\n"
        "[2026-11-17 22:30:44] Scheduler hit an exception: Traceback (most recent call last):\n"
        "  ...\n"
        "RuntimeError: GetTask:torch_npu/csrc/framework/OpCommand.cpp:120 NPU function error: "
        "call aclnnMatmulAllReduce failed, error code is 561000\n"
    )
    result = run(text)
    assert (result.failure_class, result.root_cause_line) == (C.KERNEL_ERROR, compile_error)


def test_the_hsa_runtime_aborting_a_queue_is_the_device_fault_under_the_abort():
    hsa = (
        ":0:rocdevice.cpp            :3020: 18823945317 us: [pid:5521  tid:0x7f2b9dfff640] "
        "Callback: Queue 0x7f2a98200000 aborting with error : HSA_STATUS_ERROR_EXCEPTION: An "
        "HSAIL operation resulted in a hardware exception. code: 0x1016"
    )
    result = run(f"{hsa}\nFatal Python error: Aborted\n\nAborted (core dumped)\n")
    assert (result.failure_class, result.root_cause_line) == (C.CUDA_ERROR, hsa)
    # a device-side assertion HIP reported first is what the queue aborted on
    asserted = (
        "/app/pytorch/aten/src/ATen/native/hip/Indexing.hip:1289: indexSelectLargeIndex: "
        "Device-side assertion `srcIndex < srcSelectDimSize' failed."
    )
    result = run(f"{asserted}\n{hsa}\nAborted (core dumped)\n")
    assert (result.failure_class, result.root_cause_line) == (C.CUDA_ERROR, asserted)


@pytest.mark.parametrize(
    "line",
    ["sglang-1 exited with code 137", "infer-sglang-1  sglang  12 minutes ago  Exited (137) 2 mi"],
)
def test_a_container_runtime_reporting_exit_137_is_a_kill(line):
    text = "[2026-06-07 18:22:19 TP0] Load weight begin. avail mem=138.01 GB\n" + line + "\n"
    assert (run(text).failure_class, run(text).root_cause_line) == (C.KILLED_BY_SIGNAL, line)


def test_the_watchdogs_report_cut_before_its_timeout_line_is_a_hang():
    report = "[2026-11-30 04:18:02 TP0] Scheduler debug info:"
    text = (
        "[2026-11-30 04:12:55 TP0] Decode batch, #running-req: 57, #token: 402112, token usage: "
        f"0.31, cuda graph: True, gen throughput (token/s): 2207.54, #queue-req: 0\n{report}\n"
        "scheduler.cur_batch_for_debug.batch_size()=57\n"
        "[2026-11-30 04:18:02 TP0] Pyspy dump for PID 3307 (py-spy dump --native --pid 3307):\n"
        'Thread 3307 (idle): "MainThread"\n'
        "    ncclGroupEnd (libnccl.so.2)\n"
    )
    result = run(text)
    assert (result.failure_class, result.root_cause_line) == (C.HANG_TIMEOUT, report)


def test_a_ctrl_c_after_serving_is_a_stop_and_during_a_stuck_start_a_hang():
    interrupted = (
        "Process SpawnProcess-1:\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.10/multiprocessing/process.py", line 314, in _bootstrap\n'
        "    self.run()\n"
        "KeyboardInterrupt\n"
    )
    served = (
        "[2025-04-03 22:41:20] The server is fired up and ready to roll!\n"
        "^C[2025-04-03 22:47:03] INFO:     Shutting down\n"
    )
    assert run(served + interrupted).failure_class is C.NONE
    # the terminal's echo of the Ctrl-C on the traceback's first line
    echoed = interrupted.replace("Process SpawnProcess-1:\nTraceback", "^CTraceback")
    assert run(served + echoed).failure_class is C.NONE
    stuck = "[2025-04-03 22:41:18 TP0] Load weight begin. avail mem=44.10 GB\n"
    for echo in ("^C\n", ""):  # a terminal echoes the Ctrl-C; a redirected log does not
        result = run(stuck + echo + interrupted)
        assert (result.failure_class, result.root_cause_line) == (C.HANG_TIMEOUT, stuck.strip())
    # A traceback cut off before its exception stays an error of its own after a Ctrl-C's.
    cut = (
        'Traceback (most recent call last):\n  File "/srv/app.py", line 3, in <module>\n    do()\n'
    )
    assert run(stuck + cut + stuck + interrupted).failure_class is C.OTHER


def test_asyncios_cancellation_under_a_ctrl_c_is_the_stops_too():
    served = (
        "[2026-02-26 09:40:14] The server is fired up and ready to roll!\n"
        "^C[2026-02-26 09:40:15] INFO:     Shutting down\n"
        "[2026-02-26 09:40:15] INFO:     Finished server process [1]\n"
    )
    cancelled = (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.12/asyncio/base_events.py", line 691, in run_until_complete\n'
        "    return future.result()\n"
        "asyncio.exceptions.CancelledError\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.12/dist-packages/uvicorn/main.py", line 580, in run\n'
        "    server.run()\n"
        "{last}\n"
    )
    assert run(served + cancelled.format(last="KeyboardInterrupt")).failure_class is C.NONE
    # ... but not when what was raised while handling the cancellation is an error
    failed = run(served + cancelled.format(last="RuntimeError: Event loop is closed"))
    assert failed.failure_class is not C.NONE


def test_the_group_torn_down_after_a_requested_stop_is_no_failure():
    text = (
        "[2026-08-18 14:01:25 TP0 EP0] Decode batch, #running-req: 29, #token: 586393, token "
        "usage: 0.21, cuda graph: True, gen throughput (token/s): 1943.66, #queue-req: 0\n"
        "[2026-08-18 14:01:27] SIGTERM received. signum=None frame=None. Draining requests and "
        "shutting down...\n"
        "[2026-08-18 14:01:32] Gracefully exiting... Remaining number of requests 0.\n"
        "[rank13]:[W818 14:02:21.551204718 TCPStore.cpp:125] [c10d] recvValue failed on "
        "SocketImpl(fd=77, addr=[kimi-k2-0-1]:53866, remote=[kimi-k2-0]:20000): failed to recv\n"
        "[rank13]:[W818 14:02:21.551390211 ProcessGroupNCCL.cpp:1771] [PG ID 0 PG GUID 0 Rank "
        '13] Failed to check the "should dump" flag on TCPStore, (maybe TCPStore server has shut '
        "down too early), with error: failed to recv, got 0 bytes\n"
    )
    assert run(text).failure_class is C.NONE


def test_the_operators_commands_after_a_stuck_start_are_not_its_last_words():
    last = "(pid=19907, ip=172.31.40.12) [2025-04-22 16:31:21 TP15] Init torch distributed begin."
    text = (
        f"{last}\n^C\n$ ray job stop raysubmit_Q3nV --address http://172.31.40.11:8265\n"
        "Attempting to stop job 'raysubmit_Q3nV'\nJob 'raysubmit_Q3nV' was stopped\n"
    )
    result = run(text)
    assert (result.failure_class, result.root_cause_line) == (C.HANG_TIMEOUT, last)
    for prompt in ("root@gpu-3:/sgl-workspace#", "(venv) kai@ws:~$ nvidia-smi", "[root@h ~]#"):
        assert run(f"{last}\n{prompt}\n").root_cause_line == last
    # The command that started it, atop a paste with no prefixed line, ends nothing.
    loading = "Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:09<00:09]"
    started = "$ python3 -m sglang.launch_server --model-path /m --tp 2\nLoad weight begin.\n"
    lines = [parse_line(n, raw) for n, raw in enumerate([*started.splitlines(), loading], 1)]
    assert last_meaningful(lines) == 2


def test_the_reporters_words_around_a_paste_are_not_its_root_line():
    error = "RuntimeError: CUDA error: an illegal memory access was encountered"
    for words in (
        "**[Bug] fp8 KV cache: illegal memory access once a request passes ~64k tokens**",
        "## illegal memory access with fp8 KV cache",
        "Why do I get an illegal memory access with the fp8 KV cache?",
    ):
        result = run(f"{words}\nThe log:\n{error}\n")
        assert (result.failure_class, result.root_cause_line) == (C.CUDA_ERROR, error)


def test_a_clean_log_with_informational_failures_is_none():
    text = (
        "[2026-02-01 10:00:00] Cannot detect CUDA architecture.\n"
        "[2026-02-01 10:00:01] [http_server] Error: Request is disconnected from the client side "
        "(type 1). Abort request obj.rid='ab'\n"
        "[2026-02-01 10:00:02] The server is fired up and ready to roll!\n"
    )
    assert run(text).failure_class is C.NONE


def test_a_collector_separator_line_after_each_record_is_ignored():
    record = f'  File "{SITE}/sglang/srt/server_args.py", line 9, in __post_init__\n'
    noise = "2026-02-01 10:00:00  sglang-worker-0-abcde\n"
    text = "Traceback (most recent call last):\n" + noise + record + noise + "    check()\n" + noise
    text += "ValueError: tp_size must be a power of two here\n" + noise
    result = run(text)
    assert result.failure_class is C.INVALID_ARGUMENT
    assert result.root_cause_line == "ValueError: tp_size must be a power of two here"


def test_json_says_which_layer_decided_how_sure_and_the_runner_up():
    text = (
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1, unhandled "
        "cuda error, NCCL version 2.21.5\n"
        "ncclUnhandledCudaError: Call to CUDA function failed.\n"
        "Failed to CUDA calloc 16777216 bytes\n"
    )
    payload = run(text).to_json()
    assert payload["failure_class"] == "distributed_init"
    assert payload["layer"] == "signature"
    assert payload["confidence"] == "high"
    assert payload["runner_up"] == "runtime_oom"
    weak = run("RuntimeError: the widget broke while serving\n").to_json()
    assert (weak["failure_class"], weak["confidence"], weak["runner_up"]) == ("other", "low", None)


def test_an_oom_that_the_log_does_not_place_is_not_high_confidence():
    """A bare PyTorch OOM line could be weights, pool, graph or runtime: the class is a
    guess, and an automatic remedy must not act on it."""
    line = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB."
    assert run(line + "\n").confidence is Confidence.MEDIUM
    placed = run(
        "[2026-02-01 10:00:00] The server is fired up and ready to roll!\n"
        "[2026-02-01 10:00:05 TP0] Decode batch, #running-req: 1, #token: 10, token usage: 0.01, "
        "cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 0\n" + line + "\n"
    )
    assert (placed.failure_class, placed.confidence) == (C.RUNTIME_OOM, Confidence.HIGH)


@pytest.mark.parametrize(
    "prefix",
    [
        "Dec 01 10:00:00 gpu-7 sglang-sentinel@qwen[1234]: ",  # journalctl
        "(ServeReplica:app:SGLang pid=5120) ",  # a Ray worker
        "(task, pid=412, ip=10.0.0.2) ",
        "[pod/qwen-lws-0-1/sglang] ",  # kubectl logs --prefix
    ],
)
def test_a_collectors_prefix_is_peeled_before_the_layers_read_the_line(prefix):
    text = "".join(
        prefix + line + "\n"
        for line in (
            "Traceback (most recent call last):",
            f'  File "{SITE}/sglang/srt/server_args.py", line 9, in check_server_args',
            "    check()",
            "ValueError: --tp-size 3 does not divide the 32 attention heads",
        )
    )
    result = run(text)
    assert result.failure_class is C.INVALID_ARGUMENT
    assert result.root_cause_line.endswith(
        "ValueError: --tp-size 3 does not divide the 32 attention heads"
    )


def test_collectives_that_time_out_after_a_ranks_own_crash_are_its_consequence():
    serving = "[2026-04-18 02:40:00 TP0] Decode batch, #running-req: 12, #token: 9000, gen throughput (token/s): 800.00\n"
    oom = raised_in(
        f"{SITE}/sglang/srt/layers/logits_processor.py",
        "_get_logits",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 5 has a "
        "total capacity of 139.72 GiB of which 2.87 GiB is free.",
    )
    timeout = (
        "[rank0]:[E418 02:54:11.120443958 ProcessGroupNCCL.cpp:685] [Rank 0] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=88412, OpType=ALLREDUCE, "
        "Timeout(ms)=600000) ran for 600064 milliseconds before timing out.\n"
    )
    after_crash = run(serving + oom + timeout)
    assert after_crash.failure_class is C.RUNTIME_OOM
    assert after_crash.root_cause_line.startswith("torch.OutOfMemoryError")
    # Alone, the same timeout after serving is the hang it says.
    assert run(serving + timeout).failure_class is C.HANG_TIMEOUT


def test_a_lower_case_path_with_sglang_in_it_is_no_rejected_setting():
    text = raised_in(
        f"{SITE}/sglang/srt/multimodal/processors/base_processor.py",
        "load_mm_data",
        "OSError: [Errno 24] Too many open files: '/tmp/sglang_mm/3f1e.png'",
    )
    assert run(text).failure_class is not C.INVALID_ARGUMENT
    rejected = raised_in(
        f"{SITE}/sglang/srt/utils/common.py",
        "get_int_env",
        "ValueError: SGLANG_DISAGGREGATION_THREAD_POOL_SIZE must be a positive integer",
    )
    assert run(rejected).failure_class is C.INVALID_ARGUMENT


def test_a_memory_fault_after_a_failed_allocation_is_its_consequence():
    oom = raised_in(
        f"{SITE}/sglang/srt/layers/moe/fused_moe_triton/layer.py",
        "forward",
        "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 4.00 GiB. GPU 3 has a "
        "total capacity of 191.98 GiB of which 2.71 GiB is free.",
    )
    fault = raised_in(
        f"{SITE}/sglang/srt/managers/scheduler.py",
        "event_loop_overlap",
        "RuntimeError: HIP error: an illegal memory access was encountered",
    )
    result = run(oom + fault)
    assert result.failure_class is C.RUNTIME_OOM
    assert result.root_cause_line.startswith("torch.OutOfMemoryError")
    # The fault alone, or before the allocation failed, is the device's.
    assert run(fault).failure_class is C.CUDA_ERROR
    assert run(fault + oom).failure_class is C.CUDA_ERROR


def test_a_swallowed_import_is_the_cause_and_the_architecture_it_hid_the_runner_up():
    ignored = (
        "[2025-05-06 10:11:21] Ignore import error when loading "
        "sglang.srt.managers.multimodal_processors.qwen_vl: No module named 'decord'\n"
    )
    unregistered = raised_in(
        f"{SITE}/sglang/srt/managers/multimodal_processor.py",
        "get_mm_processor",
        "ValueError: No processor registered for architecture: "
        "['Qwen2_5_VLForConditionalGeneration'].",
    )
    result = run(ignored + unregistered)
    assert result.failure_class is C.DEPENDENCY_ERROR
    assert result.root_cause_line.startswith("[2025-05-06 10:11:21] Ignore import error")
    assert result.runner_up is C.UNSUPPORTED_MODEL
    assert run(unregistered).failure_class is C.UNSUPPORTED_MODEL


def test_an_import_that_failed_for_another_model_is_not_why_the_architecture_is_missing():
    """Every release fails to import some models it does not need and says so: only a
    module that may hold the architecture the error names is its cause."""
    unsupported = raised_in(
        f"{SITE}/sglang/srt/models/registry.py",
        "_raise_for_unsupported",
        "ValueError: Model architectures ['Ovis2_5'] are not supported for now.",
    )
    other_model = (
        "[2026-02-20 10:44:05] Ignore import error when loading sglang.srt.models.glm4v_moe: "
        "No module named 'transformers.models.glm4v_moe'\n"
    )
    assert run(other_model + unsupported).failure_class is C.UNSUPPORTED_MODEL
    its_model = other_model.replace("glm4v_moe", "ovis2_5")
    assert run(its_model + unsupported).failure_class is C.DEPENDENCY_ERROR
    # the registry's other words for it: the architecture's module "failed to be inspected"
    uninspected = unsupported.replace("are not supported for now", "failed to be inspected")
    assert run(uninspected).failure_class is C.UNSUPPORTED_MODEL
    assert run(its_model + uninspected).failure_class is C.DEPENDENCY_ERROR
    # the model class named in the loader's words, not after "architectures"
    unimplemented = raised_in(
        f"{SITE}/sglang/srt/models/registry.py",
        "resolve_transformers_arch",
        "ValueError: Mamba2ForCausalLM has no SGlang implementation and the Transformers "
        "implementation is not compatible with SGLang.",
    )
    assert run(other_model + unimplemented).failure_class is C.UNSUPPORTED_MODEL
    mamba = other_model.replace("glm4v_moe", "mamba2")
    assert run(mamba + unimplemented).failure_class is C.DEPENDENCY_ERROR


def test_a_handler_that_raises_anew_with_the_caught_errors_words_is_rooted_at_the_caught_one():
    caught = "RuntimeError: CUDA error: out of memory"
    text = (
        raised_in(f"{SITE}/sglang/srt/model_executor/cuda_graph_runner.py", "capture", caught)
        + "CUDA kernel errors might be asynchronously reported at some other API call, so the "
        "stacktrace below might be incorrect.\n"
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
        "\n"
        + raised_in(
            f"{SITE}/sglang/srt/model_executor/cuda_graph_runner.py",
            "__init__",
            "Exception: Capture CUDA graph failed: CUDA error: out of memory",
        )
    )
    result = run(text)
    assert (result.failure_class, result.root_cause_line) == (C.CUDA_GRAPH_OOM, caught)
    # A handler whose own words do not quote the caught error raised something else.
    other = text.replace(
        "Exception: Capture CUDA graph failed: CUDA error: out of memory",
        "Exception: Capture CUDA graph failed: the graph pool is exhausted",
    )
    lines, _ = read_log(other)
    handler = next(i for i, line in enumerate(lines) if line.message.startswith("Exception:"))
    assert caught_cause(lines, handler) == handler
    assert caught_cause(read_log(text)[0], handler) == 5  # the caught error's line
