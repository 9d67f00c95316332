"""Shared paths and helpers for the tests."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
GOLDEN = TESTS / "golden"
DATA = TESTS / "data"
# The labelled corpus lives in shared/, beside the repository (CI lays it there too).
CORPUS = Path(os.environ.get("SGLANG_SENTINEL_CORPUS", TESTS.parents[1] / "shared" / "corpus"))


def load_labels(directory: Path) -> list[dict]:
    with open(directory / "labels.jsonl", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


@pytest.fixture(scope="session")
def corpus_labels() -> list[dict]:
    if not (CORPUS / "labels.jsonl").exists():
        raise FileNotFoundError(f"the labelled corpus is missing at {CORPUS}")
    return load_labels(CORPUS)
