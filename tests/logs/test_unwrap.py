"""Pastes hard-wrapped at a terminal's width, rejoined (exporter/logs/unwrap.py)."""

from __future__ import annotations

import io

from exporter.diagnosis.classify import classify
from exporter.logs.events import EventKind
from exporter.logs.reader import read_excerpt, read_log
from exporter.logs.unwrap import Rejoined, Rejoiner, wrap_width

READY = (
    "[2026-05-01 12:00:09] The server is fired up and ready to roll! (listening on "
    "http://127.0.0.1:30000, waiting for requests)"
)
BATCH = (
    "[2026-05-01 12:00:{s:02d} TP0] Decode batch, #running-req: {n}, #token: {t}, token usage: "
    "0.{u:02d}, cuda graph: True, gen throughput (token/s): 1{n}.37, #queue-req: 0"
)
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB. GPU 0 has a total "
    "capacity of 79.19 GiB of which 1.02 GiB is free. Of the allocated memory 74.10 GiB is "
    "allocated by PyTorch, with 3.20 GiB allocated in private pools (e.g., CUDA Graphs)"
)
LOG = [
    "[2026-05-01 12:00:01 TP0] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, "
    "avail mem=60.10 GB, mem usage=15.26 GB.",
    READY,
    *(BATCH.format(s=10 + i, n=20 + i, t=4000 + 97 * i, u=30 + i) for i in range(6)),
    "[2026-05-01 12:00:20 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", '
    "line 2312, in run_scheduler_process",
    "    scheduler.event_loop_overlap()",
    OOM,
    "",
]


def hard_wrapped(lines: list[str], width: int) -> list[str]:
    """What a terminal ``width`` columns wide gives a copy of ``lines``."""
    rows = []
    for line in lines:
        rows.extend([line[i : i + width] for i in range(0, len(line), width)] or [""])
    return rows


def test_a_paste_wrapped_at_a_terminals_width_shows_that_width():
    for width in (80, 100, 120):
        assert wrap_width(hard_wrapped(LOG, width)) == width
    assert wrap_width(LOG) is None


def test_no_width_where_long_lines_repeat_are_padded_or_head_a_code_line():
    repeated = [f"[2026-05-01 12:00:0{r} TP{r}] {'x' * 90}" for r in range(8)]
    padded = [line.ljust(120) for line in LOG[:6]]
    frames = [
        '  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", '
        f"line {n}, in run_scheduler_process"
        for n in (311, 312, 313)
    ]
    code = [row for frame in frames for row in (frame.strip(), "scheduler = Scheduler(args)")]
    for rows in (repeated, padded, code):
        assert wrap_width(rows) is None, rows


def test_rejoined_records_parse_and_keep_their_first_rows_number_and_text():
    rows = hard_wrapped(LOG, 80)
    lines, events = read_log("\n".join(rows))
    ready = [e for e in events if e.kind is EventKind.SERVER_READY]
    batches = [e for e in events if e.kind is EventKind.DECODE_BATCH]
    assert len(ready) == 1 and len(batches) == 6
    first_row = rows.index(READY[:80]) + 1
    assert ready[0].line.number == first_row and ready[0].line.raw == READY[:80]
    assert lines[-1].number == len(rows)  # the rows after a record keep their numbers
    result = classify(lines, events)
    assert result.failure_class.value == "runtime_oom"  # the private pools: the server's
    assert result.root_cause_line == OOM[:80]
    assert result.root_cause_number == rows.index(OOM[:80]) + 1


def test_a_record_cut_between_two_reads_is_rejoined_whole():
    rows = hard_wrapped([OOM, "after"], 60)
    rejoiner = Rejoiner(60)
    out = [*rejoiner.feed(rows[:2]), *rejoiner.feed(rows[2:]), *rejoiner.close()]
    assert out == [Rejoined(rows[0], OOM, len(rows) - 1), "after"]


def test_the_excerpt_of_a_wrapped_paste_reads_as_the_whole_file_does():
    rows = hard_wrapped(LOG, 100)
    text = "".join(f"{row}\n" for row in rows)
    whole = classify(*read_log(text))
    excerpt, stats = read_excerpt(io.BytesIO(text.encode()))
    assert classify(*excerpt.read()).to_json() == whole.to_json()
    assert stats.lines == len(rows)


def test_a_wrapped_paste_quoted_in_a_reply_or_a_chat_row_by_row_is_rejoined_too():
    rows = hard_wrapped(LOG, 80)
    bare = classify(*read_log("\n".join(rows))).failure_class
    for mark in (lambda row: f"> {row}", lambda row: f"> > {row}", lambda row: f"`{row}`"):
        lines, events = read_log("\n".join(mark(row) if row else row for row in rows))
        assert sum(e.kind is EventKind.DECODE_BATCH for e in events) == 6
        result = classify(lines, events)
        assert (result.failure_class, result.root_cause_line) == (bare, mark(OOM[:80]))
