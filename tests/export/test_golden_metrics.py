"""Golden expositions: each recorded real SGLang log, followed the way the daemon follows an
attempt's log and classified the way it ends one, renders to exactly the `/metrics` text kept
beside it (`<log>.metrics`), byte for byte. In the table style of mtail's example program
tests: a change in the grammar, the progress, the classifier or a family shows here as a diff
of the exposition a scraper would read.

After a deliberate change: `./dev test tests/export/test_golden_metrics.py --update-golden`, then
review the diff of the `.metrics` files like code.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter import metrics
from exporter.attempt.attempt_log import AttemptLog
from exporter.attempt.counters import Counters
from exporter.attempt.snapshot import Snapshot
from exporter.attempt.states import ServerState
from exporter.diagnosis.classify import classify
from exporter.diagnosis.taxonomy import FailureClass
from exporter.exposition import render
from tests.conftest import DATA, GOLDEN

RECORDED = sorted(
    [*GOLDEN.glob("*.log"), *DATA.glob("sglang-*-cpu/*.log")],
    key=lambda path: (path.parent.name, path.name),
)
ENDED_AT = 1_767_225_600.0  # a fixed clock: every timestamp family renders the same
BATCH = 64  # lines per feed, about what the tailer hands over under load
# The build's version changes with every release, not with the log.
BUILD_INFO = re.compile(rb"^(# (HELP|TYPE) )?sglang_sentinel_build_info\b.*\n", re.MULTILINE)


def _version_of(path: Path) -> str:
    found = re.search(r"sglang-(\d+\.\d+\.\d+)", f"{path.parent.name}/{path.name}")
    assert found, f"{path}: a recorded log's folder or name says its SGLang version"
    return found.group(1)


def exposition_of(path: Path) -> bytes:
    """The log fed in batches through the daemon's AttemptLog and counted with its Counters,
    its excerpt classified as an attempt that ended when the log did, and the snapshot the
    daemon would hold rendered."""
    version = _version_of(path)
    log = AttemptLog(version, clock=lambda: ENDED_AT)
    counters = Counters().launched()
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    for start in range(0, len(lines), BATCH):
        fed = log.feed(lines[start : start + BATCH])
        counters = counters.read(fed.matched, fed.unknown)
    log.close()
    found = classify(*log.excerpt.read(), None, version).failure_class
    failed = found is not FailureClass.NONE
    if failed:
        counters = counters.failed(found.value, ENDED_AT)
    snapshot = Snapshot(
        state=ServerState.BACKOFF if failed else ServerState.READY,
        attempts_total=counters.attempts_total,
        failures=counters.failures,
        last_failure_time=counters.last_failure_time,
        progress=log.progress,
        log_lines=counters.log_lines,
        last_line_time=log.last_line_at,
        last_batch_time=log.last_batch_at,
        last_progress_time=log.last_progress_at,
    )
    return BUILD_INFO.sub(b"", render(metrics.families(snapshot)))


def _name(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def test_no_golden_exposition_outlives_its_log():
    expositions = [*GOLDEN.glob("*.metrics"), *DATA.glob("sglang-*-cpu/*.metrics")]
    assert expositions, "no golden exposition at all: run with --update-golden"
    stale = [_name(path) for path in expositions if not path.with_suffix(".log").exists()]
    assert not stale, f"golden expositions of logs that are gone: {stale}"


@pytest.mark.parametrize("path", RECORDED, ids=_name)
def test_recorded_log_renders_its_golden_exposition(path, request):
    golden = path.with_suffix(".metrics")
    actual = exposition_of(path)
    if request.config.getoption("--update-golden"):
        golden.write_bytes(actual)
        return
    assert golden.exists(), f"{golden} is missing: run with --update-golden and review it"
    expected = golden.read_bytes()
    if actual != expected:
        diff = _first_difference(expected, actual)
        pytest.fail(f"{golden.name} differs (rerun with --update-golden if meant):\n{diff}")


def _first_difference(expected: bytes, actual: bytes) -> str:
    want, got = expected.decode().splitlines(), actual.decode().splitlines()
    for number, (a, b) in enumerate(zip(want, got, strict=False), start=1):
        if a != b:
            return f"line {number}:\n- {a}\n+ {b}"
    return f"expected {len(want)} lines, rendered {len(got)}"
