"""What a report writes around the log it pastes is not read as the server's lines."""

from __future__ import annotations

import pytest

from exporter.diagnosis.classify import classify
from exporter.diagnosis.report import the_reports_own
from exporter.diagnosis.taxonomy import FailureClass as C
from exporter.logs.reader import read_log

ERROR = "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"
LOG = [
    "[2026-05-02 10:00:00 TP0] Decode batch, #running-req: 3, #token: 900, token usage: 0.01, "
    "cuda graph: True, gen throughput (token/s): 90.00, #queue-req: 0",
    "[2026-05-02 10:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/x/sglang/srt/managers/scheduler.py", line 9, in process_batch_result',
    "    next_token_ids = next_token_ids.tolist()",
    ERROR,
]
PROSE = f"gpt-oss-120b TP2 on 2x H100 crashes under load with a {ERROR} after an hour"


def run(lines: list[str]):
    return classify(*read_log("\n".join(lines) + "\n"))


def test_the_reporters_prose_outside_the_fenced_log_is_not_its_root():
    result = run(["### Describe the bug", "", PROSE, "", "```", *LOG, "```"])
    assert result.failure_class is C.CUDA_ERROR
    assert result.root_cause_line == ERROR


def test_a_log_pasted_outside_the_fences_is_still_read():
    """Only the command is fenced: nothing in the fences fails, so nothing outside them
    is taken for the report's."""
    lines = ["```", "python3 -m sglang.launch_server --model-path /m --tp 2", "```", *LOG]
    assert the_reports_own(read_log("\n".join(lines))[0]) == set()
    assert run(lines).root_cause_line == ERROR


def test_the_environment_section_is_not_the_log():
    environment = [
        "### Environment",
        "```",
        "/x/torch/cuda/__init__.py:182: UserWarning: CUDA initialization: The NVIDIA driver on "
        "your system is too old (found version 12020).",
        "CUDA available: False",
        "vllm: Module Not Found",
        "```",
    ]
    lines = [*environment, "### Log", "```", *LOG, "```"]
    own = the_reports_own(read_log("\n".join(lines))[0])
    assert {3, 4, 5} <= own  # the warning, CUDA and the packages: the section's content
    first_log_line = len(environment) + 3
    assert own.isdisjoint(range(first_log_line, first_log_line + len(LOG)))
    assert run(lines).root_cause_line == ERROR


def test_torchs_cuda_initialization_warning_is_where_the_error_was_said_first():
    """Five writers of six root torch's warning (the moment CUDA failed to initialize), not
    the RuntimeError that repeats it when CUDA is used."""
    message = "The NVIDIA driver on your system is too old (found version 12020)."
    warning = f"/x/torch/cuda/__init__.py:182: UserWarning: CUDA initialization: {message}"
    lines = [
        warning,
        "Traceback (most recent call last):",
        '  File "/x/torch/cuda/__init__.py", line 9, in set_device',
        "    torch._C._cuda_setDevice(device)",
        f"RuntimeError: {message}",
    ]
    assert run(lines).root_cause_line == warning


def test_the_question_below_a_fenced_log_that_stopped_is_not_its_last_progress():
    """A startup that went quiet: the fences hold the server's records, so the reporter's
    sentence after them is theirs, and the last shard loaded is the root."""
    stalled = [
        "[2026-01-08 09:01:57 TP0] Load weight begin. avail mem=78.53 GB",
        "Loading safetensors checkpoint shards:  43% Completed | 13/30 [06:51<09:12, 31.64s/it]",
    ]
    after = "nothing after that, it's been 40 min. GPU util 0%, python in D state on our NFS share"
    result = run(
        [
            "is it normal to take 40+ min to load llama 3.3 70b?",
            "",
            "```",
            *stalled,
            "```",
            "",
            after,
        ]
    )
    assert result.failure_class is C.HANG_TIMEOUT
    assert result.root_cause_line == stalled[-1]


def test_the_reporters_sentences_and_edits_below_an_unfenced_stall_are_not_its_progress():
    """No fences: the reporter's own sentences after the server's last line, and an "EDIT:"
    added later, are not where the startup stopped."""
    stalled = [
        "[2025-09-30 11:02:47 TP0] Init torch distributed begin.",
        "[2025-09-30 11:02:47 TP1] Init torch distributed begin.",
    ]
    below = [
        "",
        "Nothing after that line: I waited for forty minutes and then I killed it by hand.",
        "",
        "EDIT: NCCL_P2P_DISABLE=1 makes it go past this. No idea why yet.",
    ]
    result = run(["python3 -m sglang.launch_server --model-path /m --tp 2", *stalled, *below])
    assert result.failure_class is C.HANG_TIMEOUT
    assert result.root_cause_line == stalled[-1]


@pytest.mark.parametrize(
    "title",
    [
        'SGLang crashes with "device-side assert triggered" when I send input_ids',
        'Level1Techs forum \u00b7 "SGLang randomly crashes with device-side assert triggered"',
        'Stack Overflow: "SGLang fails with device-side assert triggered on my inputs"',
    ],
)
def test_a_title_quoting_the_error_in_a_sentence_is_not_the_logs_line(title):
    assert_line = (
        "/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1553: indexSelectLargeIndex: block: "
        "[187,0,0], thread: [96,0,0] Assertion `srcIndex < srcSelectDimSize` failed."
    )
    result = run([title, "", assert_line, "RuntimeError: CUDA error: device-side assert triggered"])
    assert result.failure_class is C.CUDA_ERROR
    assert result.root_cause_line == assert_line


def test_a_bar_drawn_once_and_never_moved_is_no_progress_past_the_step_that_drew_it():
    capture = (
        "[2026-10-21 16:02:58 TP0] Capture cuda graph begin. This can take up to several "
        "minutes. avail mem=10.84 GB"
    )
    result = run([capture, "  0%|          | 0/23 [00:00<?, ?it/s]", "^C"])
    assert result.failure_class is C.HANG_TIMEOUT
    assert result.root_cause_line == capture


def test_a_reply_below_the_log_explains_and_observes_no_hang():
    ready = "[2026-09-21 09:01:03] The server is fired up and ready to roll!"
    reply = (
        "Reply: Expected. Health reports unhealthy until warmup finishes. Give your checker an "
        "initial delay."
    )
    result = run(
        [
            "[2026-09-21 09:00:58] INFO:     Uvicorn running on http://0.0.0.0:30000",
            ready,
            "",
            reply,
        ]
    )
    assert result.failure_class is C.NONE


def test_ssh_closing_its_connection_is_not_where_the_startup_stopped():
    shards = (
        "Loading safetensors checkpoint shards:   7% Completed | 2/30 [08:02<1:52:30, 241.08s/it]"
    )
    lines = ["[2025-11-03 10:17:02] Load weight begin. avail mem=70.00 GB", shards]
    result = run([*lines, "Shared connection to 10.0.5.23 closed."])
    assert (result.failure_class, result.root_cause_line) == (C.HANG_TIMEOUT, shards)
