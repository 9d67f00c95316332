"""Hostile and random input never makes the log reader or the classifier raise."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.diagnosis.classify import Outcome, classify
from exporter.diagnosis.taxonomy import FailureClass
from exporter.logs.reader import read_log
from tests.conftest import GOLDEN

# Fragments of real lines, so random logs reach deep into the grammar and the rules.
FRAGMENTS = [
    "[2026-05-14 09:12:19 TP1] ",
    "[2026-05-14 09:12:19] ",
    "Load weight begin. avail mem=",
    "Load weight end. elapsed=",
    " GB",
    "KV Cache is allocated. #tokens: ",
    "Decode batch, ",
    "#running-req: ",
    "Traceback (most recent call last):",
    '  File "/x/loader.py", line 3, in load_model',
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ",
    "AssertionError",
    "assert x",
    "Capture cuda graph failed: ",
    "During handling of the above exception",
    "ERROR 2025-04-05T00:01:19.2Z ",
    "Killed",
    "\r",
    "\n",
    "\x00",
    "\ufffd",
    "NaN",
    "-1",
    "1e309",
    "address already in use",
    "server_args=ServerArgs(",
    "mem_fraction_static=",
    "{'",
    ": error: ",
]
logs = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=40)), max_size=80).map(
    "".join
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logs, st.one_of(st.none(), st.integers(-64, 255)), st.booleans())
def test_random_logs_never_raise(text, exit_code, stalled):
    lines, events = read_log(text)
    result = classify(lines, events, Outcome(exit_code=exit_code, stalled=stalled))
    assert isinstance(result.failure_class, FailureClass)
    if result.root_cause_line is not None:
        assert result.root_cause_line in {line.raw.strip() for line in lines}
    assert result.to_json()["remedy"]


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=2000))
def test_random_bytes_never_raise(blob):
    lines, events = read_log(blob.decode("utf-8", errors="replace"))
    classify(lines, events)


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2000), st.integers(1, 5))
def test_truncated_real_logs_never_raise(cut, rank):
    text = (GOLDEN / "sglang-0.5.9-cuda-graph-oom.log").read_text()[cut * rank :]
    classify(*read_log(text))
