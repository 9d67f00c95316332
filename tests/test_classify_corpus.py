"""The classifier on every real log of the labelled corpus (shared/corpus).

Classes must all match. Root-cause lines must match for at least 95% of the files: the
labels pick, in two files, one of several equivalent lines (another rank's copy of the same
error; a wrapper that repeats its inner message), and the test prints every disagreement.
"""

from __future__ import annotations

import pytest

from exporter.diagnosis.classify import classify
from exporter.logs.reader import read_log
from tests.conftest import CORPUS, load_labels

LABELS = load_labels(CORPUS) if (CORPUS / "labels.jsonl").exists() else []


def _classify(name: str):
    text = (CORPUS / name).read_bytes().decode("utf-8", errors="replace")
    return classify(*read_log(text))


def test_corpus_is_present():
    assert len(LABELS) >= 72, f"expected the labelled corpus at {CORPUS}"


@pytest.mark.parametrize("label", LABELS, ids=[label["file"] for label in LABELS])
def test_class_matches_label(label):
    result = _classify(label["file"])
    assert result.failure_class.value == label["failure_class"], result.root_cause_line


def test_root_cause_lines_match_labels():
    misses = []
    for label in LABELS:
        result = _classify(label["file"])
        if result.root_cause_line != label["root_cause_line"].strip():
            misses.append(
                f"{label['file']}: want {label['root_cause_line'][:90]!r}, "
                f"got {(result.root_cause_line or '')[:90]!r}"
            )
    assert len(misses) <= 0.05 * len(LABELS), "\n".join(misses)


@pytest.mark.parametrize("label", LABELS, ids=[label["file"] for label in LABELS])
def test_root_cause_is_a_line_of_the_log_and_in_the_evidence(label):
    result = _classify(label["file"])
    text = (CORPUS / label["file"]).read_bytes().decode("utf-8", errors="replace")
    assert result.root_cause_line in {line.strip() for line in text.splitlines()}
    assert result.root_cause_line in result.evidence
