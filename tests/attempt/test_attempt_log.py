"""AttemptLog: one attempt's log as the daemon follows it, batch by batch."""

from __future__ import annotations

from itertools import count

from exporter.attempt.attempt_log import AttemptLog
from exporter.attempt.progress import Step
from exporter.diagnosis.classify import classify
from exporter.diagnosis.taxonomy import FailureClass
from exporter.logs.reader import LogReader, read_log
from tests.conftest import GOLDEN

SERVING = (GOLDEN / "sglang-0.5.9-serve-hybrid-tp2.log").read_text().splitlines()
READY_INDEX = next(i for i, line in enumerate(SERVING) if "ready to roll" in line)
BIND_FAILED = (
    "[2026-05-14 12:03:10] ERROR:    [Errno 98] error while attempting to bind on address "
    "('127.0.0.1', 30000): address already in use"
)


def ticking() -> AttemptLog:
    clock = count(100.0)
    return AttemptLog("0.5.9", clock=lambda: float(next(clock)))


def test_batches_add_up_to_the_whole_log_read_at_once():
    log = ticking()
    fed = [log.feed(SERVING[i : i + 7]) for i in range(0, len(SERVING), 7)]
    whole = LogReader("0.5.9", keep_lines=False)
    whole.feed(SERVING)
    assert sum(f.matched for f in fed) == whole.stats.matched > 0
    assert sum(f.unknown for f in fed) == whole.stats.unknown
    assert whole.stats.matched + whole.stats.unknown == len(SERVING)
    assert log.progress.ready and log.progress.step is Step.SERVING
    assert log.doomed_by is None


def test_ready_turns_once_and_keeps_its_first_time():
    log = ticking()
    before = log.feed(SERVING[:READY_INDEX])
    at_ready = log.feed(SERVING[READY_INDEX : READY_INDEX + 1])
    said_ready_at = log.last_line_at
    after = log.feed(SERVING[READY_INDEX + 1 :])
    assert (before.turned, at_ready.turned, after.turned) == (False, True, False)
    ready_at = log.ready_at
    assert ready_at is not None and log.last_line_at > ready_at
    assert ready_at == said_ready_at  # the time of the batch that said it


def test_the_first_doom_line_is_kept_and_turns_once():
    log = ticking()
    first = log.feed([BIND_FAILED])
    second = log.feed([BIND_FAILED.replace("30000", "30001")])
    assert first.turned and not second.turned
    assert log.doomed_by == BIND_FAILED


def test_the_excerpt_kept_while_following_classifies_as_the_whole_log():
    text = (GOLDEN / "sglang-0.5.9-pool-init-oom-incident.log").read_text()
    lines = text.splitlines()
    log = ticking()
    for i in range(0, len(lines), 3):
        log.feed(lines[i : i + 3])
    log.close()
    whole = classify(*read_log(text))
    assert whole.failure_class is FailureClass.POOL_INIT_OOM
    assert classify(*log.excerpt.read()) == whole


def test_only_batch_lines_move_the_last_batch_time():
    log = ticking()
    access = '[2026-05-14 09:14:00] INFO:     127.0.0.1:50312 - "GET /health HTTP/1.1" 200 OK'
    log.feed([access])
    assert log.last_batch_at is None and log.last_line_at is not None
    decode = next(line for line in SERVING if "Decode batch" in line)
    log.feed([decode])
    assert log.last_batch_at == log.last_line_at
    log.feed([access])
    assert log.last_line_at > log.last_batch_at
