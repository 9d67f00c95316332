"""The classifier on logs it was not written from.

- ``tests/data/sglang-0.5.9-cpu`` and ``sglang-0.5.23-cpu``: real SGLang runs on this
  machine's CPU, recorded by ``tests/data/record_sglang_logs.py`` (each failure real).
- ``tests/data/heldout``: 60 logs written by a separate engineer from the reference material
  and SGLang's source without reading the classifier, in the shapes real reports take. The
  issue's targets apply: at least 95% classes and 90% exact root-cause lines.
"""

from __future__ import annotations

import pytest

from exporter.diagnosis.classify import classify
from exporter.logs.reader import read_log
from tests.conftest import DATA, load_labels

HELDOUT = DATA / "heldout"
RECORDED_LABELS = [
    {**label, "directory": DATA / directory}
    for directory in ("sglang-0.5.9-cpu", "sglang-0.5.23-cpu")
    for label in load_labels(DATA / directory)
]
HELDOUT_LABELS = load_labels(HELDOUT)


def _classify(directory, name):
    return classify(*read_log((directory / name).read_bytes().decode("utf-8", errors="replace")))


@pytest.mark.parametrize(
    "label",
    RECORDED_LABELS,
    ids=[f"{label['directory'].name}/{label['file']}" for label in RECORDED_LABELS],
)
def test_real_cpu_run(label):
    result = _classify(label["directory"], label["file"])
    if label["failure_class"] == "killed_by_signal" and label.get("root_cause_line") is None:
        # A scheduler killed from outside leaves no trace in 0.5.9's log: the daemon learns
        # it from the process tree (see the end-to-end tests), the log alone reads clean.
        assert result.failure_class.value == "none"
        return
    assert result.failure_class.value == label["failure_class"]
    if label.get("root_cause_line"):
        assert result.root_cause_line == label["root_cause_line"].strip()


def test_heldout_meets_the_targets():
    classes = roots = 0
    misses = []
    for label in HELDOUT_LABELS:
        result = _classify(HELDOUT, label["file"])
        want_root = (label["root_cause_line"] or "").strip() or None
        class_ok = result.failure_class.value == label["failure_class"]
        root_ok = result.root_cause_line == want_root
        classes += class_ok
        roots += root_ok
        if not (class_ok and root_ok):
            misses.append(
                f"{label['file']}: {label['failure_class']} -> {result.failure_class.value}"
            )
    total = len(HELDOUT_LABELS)
    assert total >= 60
    assert classes / total >= 0.95, "\n".join(misses)
    assert roots / total >= 0.90, "\n".join(misses)
