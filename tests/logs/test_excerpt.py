"""The excerpt a log is classified from, kept as the log is read (exporter/logs/excerpt.py).

Classifying the excerpt must give exactly what classifying the whole log gives, on every
log the tests hold, however the log arrives (in reads of any size, in batches of lines),
and with a server's long life added: days of batch lines before the failure, an error
storm. The comparison is against ``classify`` itself, whatever its rules are today.
"""

from __future__ import annotations

import io
import random
import re
import tracemalloc
from pathlib import Path

import pytest

from exporter.diagnosis.classify import Outcome, classify
from exporter.diagnosis.signatures import SIGNATURES
from exporter.diagnosis.taxonomy import FailureClass
from exporter.diagnosis.vocabulary import says_failed
from exporter.logs import excerpt as excerpt_module
from exporter.logs.events import EventKind
from exporter.logs.excerpt import Excerpt, error_shaped
from exporter.logs.lines import parse_line
from exporter.logs.reader import LogReader, read_excerpt, read_log, split_lines
from exporter.logs.splitter import line_batches
from exporter.logs.tracebacks import EXCEPTION_LINE
from exporter.logs.unwrap import wrap_width
from tests.conftest import CORPUS, DATA, GOLDEN
from tests.diagnosis.test_classify_recorded import HELDOUT_SETS

RECORDED = sorted(DATA.glob("sglang-*-cpu/*.log")) + sorted(GOLDEN.glob("*.log"))
LOGS = sorted(CORPUS.glob("*.log")) + sorted((DATA / "heldout").glob("*.log")) + RECORDED
IDS = [f"{path.parent.name}/{path.name}" for path in LOGS]
RUN = 3000  # batch lines added: far more than the head, the window and the per-kind events
_STAMP = re.compile(r"^\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{3})?)")


def whole(text: str, outcome: Outcome | None = None):
    return classify(*read_log(text), outcome)


def _reader(excerpt: Excerpt, rows: list[str]) -> LogReader:
    """A reader as ``read_excerpt`` makes one: told whether the rows were hard-wrapped."""
    return LogReader(keep_lines=False, excerpt=excerpt, wrap_width=wrap_width(rows))


def streamed(data: bytes, read_bytes: int, outcome: Outcome | None = None):
    excerpt = Excerpt()
    reader = _reader(excerpt, split_lines(data.decode("utf-8", errors="replace")))
    for batch in line_batches(io.BytesIO(data), read_bytes=read_bytes):
        reader.feed(batch)
    reader.close()
    return classify(*excerpt.read(), outcome)


def in_batches(lines: list[str], size: int):
    excerpt = Excerpt()
    reader = _reader(excerpt, lines)
    for i in range(0, len(lines), size):
        reader.feed(lines[i : i + size])
    reader.close()
    return classify(*excerpt.read())


def decode_run(stamp: str | None, count: int) -> list[str]:
    prefix = f"[{stamp} TP0] " if stamp else ""
    return [
        f"{prefix}Decode batch, #running-req: {1 + i % 8}, #token: {1000 + i}, token usage: "
        f"0.{i % 90 + 10}, cuda graph: True, gen throughput (token/s): 42.00, #queue-req: 0"
        for i in range(count)
    ]


def stamp_before(lines: list[str], index: int) -> str | None:
    """The SGLang timestamp of the nearest line before ``index`` (else after it): added
    lines carry it, so the order of time in the log is what it was."""
    for line in [*reversed(lines[:index]), *lines[index:]]:
        match = _STAMP.match(line.strip())
        if match:
            return match.group(1)
    return None


def inserted(lines: list[str], index: int, added: list[str]) -> str:
    return "\n".join(lines[:index] + added + lines[index:]) + "\n"


@pytest.mark.parametrize("name", [n for n in HELDOUT_SETS if n != "heldout"])
def test_the_excerpt_of_every_other_labelled_log_classifies_as_the_whole_log(name: str):
    # The later sets, read once each as `classify FILE` reads them (the test below reads the
    # first ones every way a log arrives).
    differ = []
    for path in sorted((DATA / name).glob("*.log")):
        data = path.read_bytes()
        excerpt, _ = read_excerpt(io.BytesIO(data))
        if classify(*excerpt.read()) != whole(data.decode("utf-8", errors="replace")):
            differ.append(path.name)
    assert differ == []


@pytest.mark.parametrize("path", LOGS, ids=IDS)
def test_the_excerpt_classifies_as_the_whole_log(path: Path):
    data = path.read_bytes()
    text = data.decode("utf-8", errors="replace")
    expected = whole(text)
    for read_bytes in (7, 4096, 1 << 20):
        assert streamed(data, read_bytes) == expected, f"read {read_bytes} bytes at a time"
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    assert in_batches(lines, 1) == expected
    assert in_batches(lines, 13) == expected
    killed = Outcome(exit_code=-9)
    assert streamed(data, 4096, killed) == whole(text, killed)


@pytest.mark.parametrize("path", LOGS, ids=IDS)
def test_days_of_batch_lines_before_the_failure_change_nothing_between_the_two(path: Path):
    """A long run of decode lines at the start, in the middle, and just before the root
    cause: the excerpt's classification is still the whole log's (both see the run, and the
    run may change the class: a startup OOM after serving is a runtime one)."""
    text = path.read_bytes().decode("utf-8", errors="replace")
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    root = whole(text).root_cause_number
    for index in sorted({0, len(lines) // 2, max(0, (root or 1) - 1)}):
        longer = inserted(lines, index, decode_run(stamp_before(lines, index), RUN))
        expected = whole(longer)
        got = streamed(longer.encode(), 1 << 16)
        assert got == expected, f"{RUN} decode lines at line {index + 1}"


@pytest.fixture
def small_budgets(monkeypatch):
    """Budgets a few hundred lines wide, so that a test-sized storm overflows them; the
    window stays as wide as the classifier looks."""
    monkeypatch.setattr(excerpt_module, "REGION_LINES", 600)
    monkeypatch.setattr(excerpt_module, "FIRST_READ", 100)
    monkeypatch.setattr(excerpt_module, "LAST_READ", 200)


@pytest.mark.parametrize("path", RECORDED, ids=[p.name for p in RECORDED])
def test_an_error_storm_before_the_failure_changes_nothing_between_the_two(
    path: Path, small_budgets
):
    """More error-shaped lines than the first and last regions hold, mid-log: the middle
    of the storm is dropped, the classification is the whole log's."""
    text = path.read_bytes().decode("utf-8", errors="replace")
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    index = len(lines) // 3
    stamp = stamp_before(lines, index)
    prefix = f"[{stamp}] " if stamp else ""
    storm = [
        f"{prefix}WARNING: request {i} was aborted by the client (connection reset)"
        for i in range(2500)
    ]
    longer = inserted(lines, index, storm)
    assert streamed(longer.encode(), 1 << 16) == whole(longer)


def test_every_signature_and_exception_line_of_the_tests_logs_is_error_shaped():
    """The shape test is broad by design, not the signature list: this says when a rule
    the classifier gains, or a line its wording layers read as a failure, is a line the
    excerpt would not keep for itself."""
    missed = []
    for path in LOGS:
        text = path.read_bytes().decode("utf-8", errors="replace")
        for line in read_log(text)[0]:
            message = line.message
            decisive = (
                EXCEPTION_LINE.match(message)
                or any(s.matches(message) for s in SIGNATURES)
                or says_failed(message)  # what the classifier's wording layers read
            )
            if decisive and not error_shaped(line):
                missed.append(f"{path.name}:{line.number}: {message[:100]}")
    assert not missed, "\n".join(missed)


def test_ordinary_serving_lines_are_not_error_shaped():
    for text in (
        '[2026-05-14 09:14:00] INFO:     127.0.0.1:50312 - "POST /generate HTTP/1.1" 200 OK',
        "[2026-05-14 09:14:00 TP0] Prefill batch, #new-seq: 1, #new-token: 40, #cached-token: 0",
        "[2026-05-14 09:14:00] INFO:     Shutting down connection (keep-alive)",
    ):
        assert not error_shaped(parse_line(1, text)), text


def _serving_then_crash(serving_lines: int) -> bytes:
    startup = (GOLDEN / "sglang-0.5.9-serve-hybrid-tp2.log").read_text().splitlines()
    crash = (GOLDEN / "sglang-0.5.9-cuda-graph-oom.log").read_text().splitlines()
    run = decode_run("2026-05-14 09:14:00", serving_lines)
    return ("\n".join(startup + run + crash[-30:]) + "\n").encode()


def test_what_is_held_does_not_grow_with_the_log():
    small, _ = read_excerpt(io.BytesIO(_serving_then_crash(5_000)))
    large, stats = read_excerpt(io.BytesIO(_serving_then_crash(100_000)))
    assert stats.lines > 100_000
    assert large.held <= small.held + 10
    lines, _ = large.read()
    assert len(lines) < 1500


def _within_budget(excerpt: Excerpt, longest_line: int) -> bool:
    """The excerpt's text fits its budgets: the regions' bytes, and whole lines for the
    head, the window and the events kept per kind."""
    e = excerpt_module
    lines, _ = excerpt.read()
    loose = e.HEAD_LINES + e.CONTEXT_LINES + 1 + (e.FIRST_PER_KIND + 1) * len(EventKind)
    budget = e.FIRST_BYTES + e.LAST_BYTES + 2 * e.REGION_BYTES + loose * longest_line
    return sum(len(line.raw) for line in lines) <= budget


def test_random_bytes_are_unknown_lines_in_bounded_memory():
    rng = random.Random(15)
    data = rng.randbytes(3 << 20)
    excerpt, stats = read_excerpt(io.BytesIO(data))
    assert stats.lines > 10_000 and stats.unknown == stats.lines - stats.matched
    assert stats.unknown > 0.99 * stats.lines
    assert _within_budget(excerpt, 64 * 1024)
    classify(*excerpt.read())  # whatever it says, it says it


def test_an_endless_line_is_cut_and_memory_stays_bounded():
    class Endless(io.RawIOBase):
        """100 MB of one line, never all in memory."""

        def __init__(self) -> None:
            self.left = 100 << 20

        def readable(self) -> bool:
            return True

        def readinto(self, buffer) -> int:
            n = min(len(buffer), self.left)
            buffer[:n] = b"error " * (n // 6) + b"x" * (n % 6)
            self.left -= n
            return n

    tracemalloc.start()
    try:
        excerpt, stats = read_excerpt(io.BufferedReader(Endless(), 1 << 20))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert stats.lines == 1 and peak < 16 << 20, f"peak {peak} bytes"
    (line,), _ = excerpt.read()
    assert len(line.raw) == 64 * 1024


def test_a_hundred_thousand_tracebacks_keep_the_first_as_root_in_bounded_memory():
    block = [
        "[2026-05-14 09:14:00] ERROR:    Exception in ASGI application",
        "Traceback (most recent call last):",
        '  File "/opt/venv/lib/python3.11/site-packages/starlette/responses.py", line 268, in x',
        "    await func()",
        "RuntimeError: client {i} went away",
    ]
    text = "\n".join(line.format(i=i) for i in range(100_000) for line in block) + "\n"
    excerpt, stats = read_excerpt(io.BytesIO(text.encode()))
    assert stats.lines == 500_000
    assert _within_budget(excerpt, 100)
    result = classify(*excerpt.read())
    assert result.root_cause_line == "RuntimeError: client 0 went away"
    assert result.root_cause_number == 5


def test_a_line_repeated_forever_is_held_once_per_window():
    line = "[2026-05-14 09:14:00 TP0] RuntimeError: CUDA error: an illegal memory access"
    excerpt, stats = read_excerpt(io.BytesIO((line + "\n").encode() * 300_000))
    assert stats.lines == 300_000
    assert _within_budget(excerpt, len(line))
    result = classify(*excerpt.read())
    assert result.failure_class is FailureClass.CUDA_ERROR
    assert result.root_cause_number == 1
