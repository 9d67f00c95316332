"""Golden tests of the log grammar, per SGLang version, from its real format strings.

Each line below is a format string from SGLang's source (file:line in
shared/reference/sglang-internals.md sections 2-3) rendered with known numbers; the test
asserts the event kind and every number parsed, bytes in base units (SGLang's GB is GiB).
"""

from __future__ import annotations

import pytest

from exporter.logs.events import EventKind as K
from exporter.logs.grammar import GIB, grammar_for, parse_event
from exporter.logs.lines import parse_line
from exporter.logs.reader import LogReader, read_log, split_lines
from exporter.sglang.versions import VERSIONS
from tests.conftest import GOLDEN

G = GIB

COMMON_LINES = [
    (
        "[2026-05-14 09:12:19 TP1] Load weight begin. avail mem=46.86 GB",
        K.WEIGHT_LOAD_BEGIN,
        {"avail_bytes": round(46.86 * G)},
    ),
    (
        "[2026-05-14 09:13:22 TP0] Load weight end. elapsed=63.07 s, type=Qwen3_5ForConditionalGeneration, "
        "dtype=torch.bfloat16, avail mem=21.30 GB, mem usage=25.56 GB.",
        K.WEIGHT_LOAD_END,
        {
            "elapsed_s": 63.07,
            "model_type": "Qwen3_5ForConditionalGeneration",
            "dtype": "torch.bfloat16",
            "avail_bytes": round(21.30 * G),
            "usage_bytes": round(25.56 * G),
        },
    ),
    (
        "[2026-05-14 09:13:23 TP0] Mamba Cache is allocated. max_mamba_cache_size: 8, conv_state size: "
        "0.01GB, ssm_state size: 0.63GB intermediate_ssm_state_cache size: 2.53GB "
        "intermediate_conv_window_cache size: 0.05GB ",
        K.MAMBA_CACHE_ALLOCATED,
        {
            "slots": 8,
            "conv_bytes": round(0.01 * G),
            "ssm_bytes": round(0.63 * G),
            "intermediate_ssm_bytes": round(2.53 * G),
            "intermediate_conv_bytes": round(0.05 * G),
        },
    ),
    (
        "[2026-05-14 09:13:23 TP0] Mamba Cache is allocated. max_mamba_cache_size: 48, conv_state size: "
        "0.05GB, ssm_state size: 3.38GB ",
        K.MAMBA_CACHE_ALLOCATED,
        {"slots": 48, "conv_bytes": round(0.05 * G), "ssm_bytes": round(3.38 * G)},
    ),
    (
        "[2026-05-14 09:13:23 TP1] KV Cache is allocated. #tokens: 373672, K size: 5.70 GB, V size: 5.70 GB",
        K.KV_CACHE_ALLOCATED,
        {
            "cache": "KV Cache",
            "tokens": 373672,
            "k_bytes": round(5.70 * G),
            "v_bytes": round(5.70 * G),
        },
    ),
    (
        "[2026-05-14 09:13:23 TP0] KV Cache is allocated. #tokens: 1000000, KV size: 8.58 GB",
        K.KV_CACHE_ALLOCATED,
        {"cache": "KV Cache", "tokens": 1000000, "kv_bytes": round(8.58 * G)},
    ),
    (
        "[2026-05-14 09:13:23 TP0] Memory pool end. avail mem=6.67 GB",
        K.MEMORY_POOL_END,
        {"avail_bytes": round(6.67 * G)},
    ),
    (
        "[2026-05-14 09:13:25 TP0] Capture cuda graph begin. This can take up to several minutes. "
        "avail mem=6.60 GB",
        K.CUDA_GRAPH_BEGIN,
        {"stage": "target", "avail_bytes": round(6.60 * G)},
    ),
    (
        "[2026-05-14 09:13:35 TP0] Capture cuda graph end. Time elapsed: 10.21 s. mem usage=0.52 GB. "
        "avail mem=6.08 GB.",
        K.CUDA_GRAPH_END,
        {
            "stage": "target",
            "elapsed_s": 10.21,
            "usage_bytes": round(0.52 * G),
            "avail_bytes": round(6.08 * G),
        },
    ),
    (
        "[2026-05-14 09:13:42 TP1] Capture draft extend cuda graph begin. This can take up to several "
        "minutes. avail mem=4.72 GB",
        K.CUDA_GRAPH_BEGIN,
        {"stage": "draft_extend", "avail_bytes": round(4.72 * G)},
    ),
    (
        "[2026-05-14 09:13:55 TP0] max_total_num_tokens=373672, chunked_prefill_size=4096, "
        "max_prefill_tokens=16384, max_running_requests=8, context_len=32768, available_gpu_mem=4.63 GB",
        K.SCHEDULER_READY,
        {
            "max_total_num_tokens": 373672,
            "chunked_prefill_size": 4096,
            "max_prefill_tokens": 16384,
            "max_running_requests": 8,
            "context_len": 32768,
            "device": "gpu",
            "avail_bytes": round(4.63 * G),
        },
    ),
    (
        "[2026-05-14 09:14:40 TP0] Prefill batch, #new-seq: 3, #new-token: 2131, #cached-token: 0, "
        "full token usage: 0.01, mamba usage: 0.38, #running-req: 0, #queue-req: 0, "
        "input throughput (token/s): 51.92, cuda graph: False",
        K.PREFILL_BATCH,
        {
            "new_seqs": 3,
            "new_tokens": 2131,
            "cached_tokens": 0,
            "token_usage": 0.01,
            "mamba_usage": 0.38,
            "running_requests": 0,
            "queued_requests": 0,
            "input_throughput": 51.92,
            "cuda_graph": False,
        },
    ),
    (
        "[2026-05-14 09:14:43 TP0] Decode batch, #running-req: 3, #full token: 2411, full token usage: "
        "0.01, mamba num: 3, mamba usage: 0.38, accept len: 3.21, accept rate: 0.80, cuda graph: True, "
        "gen throughput (token/s): 96.42, #queue-req: 0",
        K.DECODE_BATCH,
        {
            "running_requests": 3,
            "tokens": 2411,
            "token_usage": 0.01,
            "mamba_used": 3,
            "mamba_usage": 0.38,
            "accept_len": 3.21,
            "accept_rate": 0.80,
            "cuda_graph": True,
            "gen_throughput": 96.42,
            "queued_requests": 0,
        },
    ),
    (
        "[2026-05-14 09:14:43 TP0] Decode batch, #running-req: 1, #token: 37, token usage: 0.01, "
        "cpu graph: False, gen throughput (token/s): 12.40, #queue-req: 0",
        K.DECODE_BATCH,
        {
            "running_requests": 1,
            "tokens": 37,
            "token_usage": 0.01,
            "cuda_graph": False,
            "gen_throughput": 12.40,
            "queued_requests": 0,
        },
    ),
    (
        "[2026-05-14 09:20:00 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2, "
        "#new_tokens_gained: 4096, #new_token_ratio: 0.4000 -> 0.7000",
        K.RETRACTION,
        {"retracted_requests": 2},
    ),
    (
        "Max running requests is reset to 48 for speculative decoding. You can override this by "
        "explicitly setting --max-running-requests.",
        K.RESOLUTION_WARNING,
        {"setting": "max_running_requests", "value": 48},
    ),
    (
        "[2026-05-14 08:41:14 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        K.PROCESS_EXCEPTION,
        {"process": "Scheduler"},
    ),
    (
        "[2026-05-14 08:41:14] Received sigquit from a child process. It usually means the child failed.",
        K.CHILD_FAILED,
        {},
    ),
    (
        "[2026-05-14 09:20:00 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
        K.WATCHDOG_TIMEOUT,
        {"process": "Scheduler", "timeout_s": 300.0},
    ),
    (
        "[2026-05-14 12:03:10] ERROR:    [Errno 98] error while attempting to bind on address "
        "('127.0.0.1', 30000): address already in use",
        K.BIND_FAILED,
        {"address": "('127.0.0.1', 30000)", "reason": "address already in use"},
    ),
    ("[2026-05-14 09:13:59] The server is fired up and ready to roll!", K.SERVER_READY, {}),
    (
        "launch_server.py: error: unrecognized arguments: --enable_metrics",
        K.ARGUMENT_ERROR,
        {"prog": "launch_server.py", "error": "unrecognized arguments: --enable_metrics"},
    ),
]

V0_5_23_LINES = [
    (
        "[2026-05-14 12:02:12 TP0] Decode batch, #running-req: 3, #full token: 2411, full token "
        "usage: 0.02, mamba num: 3, mamba usage: 0.50, accept len: 3.21, accept rate: 0.74, "
        "cap len: 4, block accept len: 2.50, cuda graph: True, gen throughput (token/s): 96.42, "
        "#queue-req: 2",
        K.DECODE_BATCH,
        {
            "running_requests": 3,
            "tokens": 2411,
            "token_usage": 0.02,
            "mamba_used": 3,
            "mamba_usage": 0.50,
            "accept_len": 3.21,
            "accept_rate": 0.74,
            "cuda_graph": True,
            "gen_throughput": 96.42,
            "queued_requests": 2,
        },
    ),
    ("[2026-05-14 11:20:12 TP1] Init parallel begin.", K.DIST_INIT_BEGIN, {}),
    (
        "[2026-05-14 11:20:14 TP0] Init parallel ends. elapsed=2.02 s",
        K.DIST_INIT_END,
        {"elapsed_s": 2.02},
    ),
    (
        "[2026-05-14 11:20:14 TP0] Memory baseline taken. mem usage=0.42 GB",
        K.MEMORY_BASELINE,
        {"mem_usage_bytes": round(0.42 * G)},
    ),
    (
        "[2026-05-14 11:21:15 TP1] Load weight end. elapsed=61.82 s, type=Qwen3_5ForConditionalGeneration, "
        "quant=fp8, fmt=e4m3, avail mem=21.30 GB, mem usage=25.56 GB.",
        K.WEIGHT_LOAD_END,
        {
            "elapsed_s": 61.82,
            "model_type": "Qwen3_5ForConditionalGeneration",
            "quant": "fp8",
            "avail_bytes": round(21.30 * G),
            "usage_bytes": round(25.56 * G),
        },
    ),
    (
        "[2026-05-14 11:21:19 TP0] max_running_requests is capped to 6 by the mamba state cache "
        "(max_mamba_cache_size=32, 5 state slots per request). To raise it: increase "
        "--mamba-full-memory-ratio or --max-mamba-cache-size, or halve the state size with "
        "--mamba-ssm-dtype bfloat16.",
        K.MAMBA_REQUESTS_CAPPED,
        {"max_running_requests": 6, "max_mamba_cache_size": 32, "slots_per_request": 5},
    ),
    (
        "[2026-05-14 11:21:19 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 118272, "
        "K size: 1.80 GB, V size: 1.80 GB",
        K.KV_CACHE_ALLOCATED,
        {
            "cache": "KV Cache",
            "dtype": "torch.bfloat16",
            "tokens": 118272,
            "k_bytes": round(1.80 * G),
            "v_bytes": round(1.80 * G),
        },
    ),
    (
        "[2026-05-14 11:21:19 TP0] SWA KV Cache is allocated. dtype: torch.bfloat16, #tokens: 4096, "
        "K size: 0.10 GB, V size: 0.10 GB",
        K.KV_CACHE_ALLOCATED,
        {
            "cache": "SWA KV Cache",
            "dtype": "torch.bfloat16",
            "tokens": 4096,
            "k_bytes": round(0.10 * G),
            "v_bytes": round(0.10 * G),
        },
    ),
    (
        "[2026-05-14 11:21:20 TP0] Capture target verify CUDA graph begin. backend=full, "
        "num_tokens_per_req=4, avail mem=5.30 GB",
        K.CUDA_GRAPH_BEGIN,
        {"stage": "target", "avail_bytes": round(5.30 * G)},
    ),
    (
        "[2026-05-14 11:21:30 TP0] Capture target verify CUDA graph end. bs=[1, 2, 4, 6], "
        "elapsed=10.11 s, mem usage=0.61 GB, avail mem=4.69 GB.",
        K.CUDA_GRAPH_END,
        {
            "stage": "target",
            "elapsed_s": 10.11,
            "usage_bytes": round(0.61 * G),
            "avail_bytes": round(4.69 * G),
        },
    ),
    (
        "[2026-05-14 11:21:30 TP0] Capture draft decode CUDA graph end. elapsed=4.02 s, "
        "mem usage=0.20 GB, avail mem=4.49 GB.",
        K.CUDA_GRAPH_END,
        {
            "stage": "draft",
            "elapsed_s": 4.02,
            "usage_bytes": round(0.20 * G),
            "avail_bytes": round(4.49 * G),
        },
    ),
    (
        "[2026-05-14 12:02:10 TP0] Prefill batch, #new-seq: 2, #new-token: 1024, #cached-token: 64, "
        "full token usage: 0.01, mamba usage: 0.33, #running-req: 1, #queue-req: 3, "
        "#pending-token: 512, cuda graph: False, input throughput (token/s): 812.50",
        K.PREFILL_BATCH,
        {
            "new_seqs": 2,
            "new_tokens": 1024,
            "cached_tokens": 64,
            "token_usage": 0.01,
            "mamba_usage": 0.33,
            "running_requests": 1,
            "queued_requests": 3,
            "pending_tokens": 512,
            "cuda_graph": False,
            "input_throughput": 812.50,
        },
    ),
    (
        "[2026-05-14 12:01:34] Engine startup timings (s): load_weight=65.00, kv_cache_allocation=1.10, "
        "scheduler_e2e=82.40, cuda_graph={'target_verify': 10.11}, tokenizer_e2e=0.80",
        K.STARTUP_TIMINGS,
        {"load_weight_s": 65.0, "kv_cache_allocation_s": 1.10, "scheduler_e2e_s": 82.40},
    ),
    (
        "[2026-05-14 11:21:19] Rank 1 scheduler died during initialization (exit code: -9). If exit "
        "code is -9 (SIGKILL), a common cause is the OS OOM killer.",
        K.SCHEDULER_DIED,
        {"rank": 1, "exit_code": -9},
    ),
]


@pytest.mark.parametrize(("raw", "kind", "fields"), COMMON_LINES)
@pytest.mark.parametrize("version", VERSIONS)
def test_lines_both_versions_print(version, raw, kind, fields):
    event = parse_event(parse_line(1, raw), grammar_for(version))
    assert event is not None, raw
    assert event.kind is kind
    assert dict(event.fields) == fields


@pytest.mark.parametrize(("raw", "kind", "fields"), V0_5_23_LINES)
def test_lines_only_0_5_23_prints(raw, kind, fields):
    event = parse_event(parse_line(1, raw), grammar_for("0.5.23"))
    assert event is not None, raw
    assert event.kind is kind
    assert dict(event.fields) == fields


def test_0_5_9_grammar_does_not_know_0_5_23_only_lines():
    line = parse_line(1, "[2026-05-14 11:20:14 TP0] Memory baseline taken. mem usage=0.42 GB")
    assert parse_event(line, grammar_for("0.5.9")) is None
    assert parse_event(line, grammar_for(None)) is not None  # unknown version: every table


def test_prefix_gives_timestamp_and_ranks():
    line = parse_line(7, "[2025-02-04 21:18:29.123 DP3 TP3] TpModelWorkerClient hit an exception")
    assert (line.timestamp, line.ranks, line.tp_rank) == ("2025-02-04 21:18:29.123", "DP3 TP3", 3)
    assert line.message == "TpModelWorkerClient hit an exception"


def test_foreign_wrappers_are_peeled_off():
    line = parse_line(
        1, "ERROR 2025-04-05T00:01:19.2Z [2025-04-05 00:01:19 TP1] Init torch distributed begin."
    )
    assert line.foreign_timestamp == "2025-04-05T00:01:19.2Z"
    assert (line.ranks, line.message) == ("TP1", "Init torch distributed begin.")
    compose = parse_line(
        2, "sglang-1  | [2025-04-05 00:01:19] The server is fired up and ready to roll!"
    )
    assert parse_event(compose).kind is K.SERVER_READY


@pytest.mark.parametrize(
    ("raw", "stamp"),
    [
        # the kubelet's CRI file under /var/log/pods
        ("2026-03-01T10:00:02.5Z stderr F [2026-03-01 10:00:02 TP1] Load weight begin.", None),
        # docker's json-file record, its timestamp the collector's
        (
            '{"log":"[2026-03-01 10:00:02 TP1] Load weight begin.\\n","stream":"stderr",'
            '"time":"2026-03-01T10:00:02.5Z"}',
            "2026-03-01T10:00:02.5Z",
        ),
        # JSON-lines exports: Loki's logcli, GCP, CloudWatch (a number for its time),
        # Datadog (the record nested), journalctl -o json
        (
            '{"labels":{"pod":"qwen-0"},"line":"[2026-03-01 10:00:02 TP1] Load weight begin.",'
            '"timestamp":"2026-03-01T10:00:02.5Z"}',
            "2026-03-01T10:00:02.5Z",
        ),
        (
            '{"textPayload":"[2026-03-01 10:00:02 TP1] Load weight begin.\\n",'
            '"timestamp":"2026-03-01T10:00:02.5Z","severity":"INFO"}',
            "2026-03-01T10:00:02.5Z",
        ),
        (
            '{"timestamp":1772359202500,"message":"[2026-03-01 10:00:02 TP1] Load weight begin."}',
            "1772359202500",
        ),
        (
            '{"id":"AQAAAZ","content":{"timestamp":"2026-03-01T10:00:02.5Z","service":"sglang",'
            '"message":"[2026-03-01 10:00:02 TP1] Load weight begin."}}',
            "2026-03-01T10:00:02.5Z",
        ),
        (
            '{"date":"2026-03-01T10:00:02.5Z","host":"h1","service":"sglang","status":"info",'
            '"message":"[2026-03-01 10:00:02 TP1] Load weight begin."}',
            "2026-03-01T10:00:02.5Z",
        ),
        (
            '{"_index":"logs-sglang","_source":{"@timestamp":"2026-03-01T10:00:02.5Z",'
            '"message":"[2026-03-01 10:00:02 TP1] Load weight begin."},"sort":[1772359202500]}',
            "2026-03-01T10:00:02.5Z",
        ),
        (
            '{"__REALTIME_TIMESTAMP":"1772359202500000","_PID":"4242",'
            '"MESSAGE":"[2026-03-01 10:00:02 TP1] Load weight begin."}',
            "1772359202500000",
        ),
        # CloudWatch Logs Insights' tab-separated export ("@timestamp<TAB>@message")
        ("2026-03-01T10:00:02.5Z\t[2026-03-01 10:00:02 TP1] Load weight begin.", None),
        # the AWS CLI's text output of get-log-events: epoch milliseconds, a tab, the line
        ("1772359202500\t[2026-03-01 10:00:02 TP1] Load weight begin.", "1772359202500"),
        # Grafana's copy of a Loki query: the time with a space, a tab, the line
        (
            "2026-03-01 10:00:02.500\t[2026-03-01 10:00:02 TP1] Load weight begin.",
            "2026-03-01 10:00:02.500",
        ),
        # journalctl -o short-iso: the time in RFC 3339, the host, the process
        (
            "2026-03-01T10:00:02+01:00 gpu-7 sglang[1198]: [2026-03-01 10:00:02 TP1] Load weight"
            " begin.",
            "2026-03-01T10:00:02+01:00",
        ),
        # Loki's logcli, its default output: the time, the stream's labels, the line
        (
            '2026-03-01T10:00:02.5Z {container="sglang", pod="qwen-0"} [2026-03-01 10:00:02 TP1]'
            " Load weight begin.",
            "2026-03-01T10:00:02.5Z",
        ),
        ("3: [2026-03-01 10:00:02 TP1] Load weight begin.", None),  # Slurm srun --label
        # journalctl: a unit's process, named in parentheses until its command runs
        (
            "Mar 01 10:00:02 gpu-7 (python)[3120]: [2026-03-01 10:00:02 TP1] Load weight begin.",
            "Mar 01 10:00:02",
        ),
        # pytest's report of a failed test: each line of what it caught under an "E"
        ("E   [2026-03-01 10:00:02 TP1] Load weight begin.", None),
        # a Metaflow step's output: its time, then the run, step and task with the pid
        (
            "2026-03-01 10:00:02.500 [1780362701221845/generate/4 (pid 61)] [2026-03-01 10:00:02"
            " TP1] Load weight begin.",
            "2026-03-01 10:00:02.500",
        ),
        # stern following a Deployment's pods: the pod, then the container
        ("sglang-qwen-5f7c9d8b4-2xkqp sglang [2026-03-01 10:00:02 TP1] Load weight begin.", None),
        # a platform's stream tag after its timestamp (RunPod's worker logs)
        (
            "2026-03-01T10:00:02.5Z [error] [2026-03-01 10:00:02 TP1] Load weight begin.",
            "2026-03-01T10:00:02.5Z",
        ),
        # nested: kubectl over a Ray worker over Slurm, the innermost timestamp kept
        (
            "2026-03-01T10:00:09Z [pod/r-0/w] (RayWorker pid=9) 0: 2026-03-01T10:00:02.5Z "
            "[2026-03-01 10:00:02 TP1] Load weight begin.",
            "2026-03-01T10:00:02.5Z",
        ),
    ],
    ids=[
        "cri",
        "docker-json",
        "loki",
        "gcp",
        "cloudwatch",
        "datadog",
        "datadog-flat",
        "elasticsearch-hit",
        "journal-json",
        "cloudwatch-tsv",
        "aws-cli-text",
        "grafana-tsv",
        "journal-short-iso",
        "logcli",
        "slurm",
        "journal-unit",
        "pytest",
        "metaflow",
        "stern",
        "stream-tag",
        "nested",
    ],
)
def test_a_wrapper_inside_another_is_peeled_too_in_any_order(raw, stamp):
    line = parse_line(1, raw)
    assert (line.timestamp, line.ranks, line.message) == (
        "2026-03-01 10:00:02", "TP1", "Load weight begin.",
    )  # fmt: skip
    if stamp is not None:
        assert line.foreign_timestamp == stamp
    assert line.raw == raw  # the evidence stays as the log has it


def test_a_line_that_only_looks_like_a_json_record_is_kept_whole():
    for raw in (
        '{"log": "cut sho',
        '{"log": 3}',
        '{"level": "info", "count": 3}',
        '{"object": "error", "message": "CUDA out of memory.", "code": 500}',  # a reply
        '{"error": {"message": "CUDA out of memory.", "timestamp": 1}}',
    ):
        assert parse_line(1, raw).message == raw


def test_server_args_both_formats():
    old = parse_event(
        parse_line(
            1,
            "[2026-05-14 08:40:02] server_args=ServerArgs(model_path='/m', "
            "tp_size=2, mem_fraction_static=0.85, max_running_requests=48, "
            "disable_radix_cache=True, speculative_algorithm='EAGLE')",
        )
    )
    new = parse_event(
        parse_line(
            1,
            "[2026-05-14 11:20:05] server_args={'model_path': '/m', 'tp_size': 2, "
            "'mem_fraction_static': 0.85, 'max_running_requests': 48, "
            "'disable_radix_cache': True, 'speculative_algorithm': 'EAGLE'}",
        )
    )
    expected = {
        "model_path": "/m",
        "tp_size": 2,
        "mem_fraction_static": 0.85,
        "max_running_requests": 48,
        "disable_radix_cache": True,
        "speculative_algorithm": "EAGLE",
    }
    assert dict(old.fields) == {"format": "ServerArgs", **expected}
    assert dict(new.fields) == {"format": "dict", **expected}


def test_tqdm_carriage_returns_split_into_lines():
    assert split_lines("Capturing (bs=8):  0%|\rCapturing (bs=8): 50%|\r\nnext\n") == [
        "Capturing (bs=8):  0%|",
        "Capturing (bs=8): 50%|",
        "next",
        "",
    ]


def test_unknown_lines_are_counted_not_fatal():
    reader = LogReader()
    reader.feed(
        [
            "hello",
            "\x00\x01garbage\ufffd",
            "[2026-05-14 09:13:59] The server is fired up and ready to roll!",
        ]
    )
    assert (reader.stats.lines, reader.stats.matched, reader.stats.unknown) == (3, 1, 2)


def _events(name: str):
    return read_log((GOLDEN / name).read_text(encoding="utf-8"))[1]


def test_golden_0_5_9_serving_log_pool_sizes_per_rank():
    events = _events("sglang-0.5.9-serve-hybrid-tp2.log")
    kv = [(e.tp_rank, e.get("tokens")) for e in events if e.kind is K.KV_CACHE_ALLOCATED]
    # target pool then draft pool, both ranks each
    assert kv == [(0, 373672), (1, 373672), (0, 373672), (1, 373672)]
    mamba = [e for e in events if e.kind is K.MAMBA_CACHE_ALLOCATED]
    assert [e.get("slots") for e in mamba] == [8, 8]
    weights = [e.get("model_type") for e in events if e.kind is K.WEIGHT_LOAD_END]
    assert weights == ["Qwen3_5ForConditionalGeneration"] * 2 + ["Qwen3_5ForCausalLMMTP"] * 2
    ready = [e for e in events if e.kind is K.SCHEDULER_READY]
    assert [(e.tp_rank, e.get("max_total_num_tokens")) for e in ready] == [(0, 373672)]
    kinds = [e.kind for e in events]
    assert (
        kinds.index(K.SERVER_READY) > kinds.index(K.HTTP_STARTED) > kinds.index(K.SCHEDULER_READY)
    )
    assert kinds.count(K.DECODE_BATCH) == 1 and kinds.count(K.PREFILL_BATCH) == 2
    assert K.TRACEBACK not in kinds


def test_golden_0_5_23_serving_log():
    events = _events("sglang-0.5.23-serve-hybrid-tp2.log")
    by_kind = {}
    for event in events:
        by_kind.setdefault(event.kind, []).append(event)
    assert by_kind[K.SERVER_ARGS][0].get("format") == "dict"
    assert by_kind[K.MAMBA_REQUESTS_CAPPED][0].get("max_running_requests") == 6
    assert [e.get("stage") for e in by_kind[K.CUDA_GRAPH_END]] == ["target", "draft"]
    assert by_kind[K.KV_POOL_BELOW_CONTEXT][0].get("context_length") == 262144
    assert by_kind[K.RETRACTION][0].get("retracted_requests") == 2
    assert by_kind[K.PREFILL_BATCH][0].get("pending_tokens") == 512
    assert by_kind[K.STARTUP_TIMINGS][0].get("load_weight_s") == 65.0


def test_golden_tracebacks_are_assembled_per_rank():
    events = _events("sglang-0.5.9-pool-init-oom-incident.log")
    tracebacks = [e for e in events if e.kind is K.TRACEBACK]
    assert [e.line.ranks for e in tracebacks] == ["TP0", "TP1"]
    first = tracebacks[0]
    assert first.get("exception_type") == "RuntimeError"
    assert first.get("exception_message").startswith("Not enough memory. Please try to increase")
    assert first.get("frame_count") == 9


def test_golden_chained_traceback_keeps_cause_and_wrapper():
    events = _events("sglang-0.5.9-cuda-graph-oom.log")
    (tb,) = [e for e in events if e.kind is K.TRACEBACK]
    assert tb.get("cause_type") == "torch.OutOfMemoryError"
    assert tb.get("exception_type") == "Exception"
    assert tb.get("exception_message").startswith("Capture cuda graph failed: CUDA out of memory")
