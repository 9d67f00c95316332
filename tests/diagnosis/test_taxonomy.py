"""Every failure class has one complete spec, and everything that acts on a class agrees
with it: a class added to the enum without its spec fails here, not as a KeyError in the
daemon's main loop."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter.diagnosis.taxonomy import DETERMINISTIC, REMEDIED, SPECS, FailureClass
from exporter.supervisor.remedies import remedy_for

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.mark.parametrize("failure_class", list(FailureClass))
def test_every_class_has_a_complete_spec(failure_class):
    spec = SPECS[failure_class]
    assert spec.summary.strip() and spec.advice.strip()
    assert not spec.summary.endswith(".")  # the diagnosis reads "<summary>: <details>."


@pytest.mark.parametrize("failure_class", list(FailureClass))
def test_a_class_has_an_automatic_remedy_exactly_when_its_spec_says_so(failure_class):
    args = {"mem-fraction-static": 0.8, "chunked-prefill-size": 8192, "cuda-graph-max-bs": 64}
    remedy = remedy_for(failure_class, args, None, 0.95)
    planned = failure_class in (FailureClass.POOL_INIT_OOM, FailureClass.MAMBA_CACHE_EXHAUSTED)
    # The pool classes take their change from the planner; without a plan there is none.
    assert (remedy is not None or planned) == SPECS[failure_class].automatic_remedy
    assert (failure_class in REMEDIED) == SPECS[failure_class].automatic_remedy


def test_deterministic_classes_are_those_not_worth_an_unchanged_retry():
    assert {c for c, spec in SPECS.items() if not spec.retry_unchanged} == DETERMINISTIC
    assert FailureClass.INVALID_ARGUMENT in DETERMINISTIC
    assert FailureClass.CUDA_ERROR not in DETERMINISTIC


def test_the_readme_taxonomy_lists_every_class():
    text = README.read_text(encoding="utf-8")
    table = text[text.index("## The failure taxonomy") :]
    listed = set(re.findall(r"^\| `(\w+)` \|", table, re.M))
    assert listed >= {c.value for c in FailureClass if c is not FailureClass.NONE}
