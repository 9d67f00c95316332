"""plan() over a grid of the planner tests' own inputs, against values recorded once.

The expected values in ``tests/data/planner_grid.json`` were recorded from the single-module
``exporter/diagnosis/planner.py`` of commit 6d4888e, before it became a package: this module
was run as a script against a copy of that commit (``git archive 6d4888e | tar -x -C OLD``,
this file copied in, then ``PYTHONPATH=OLD .venv/bin/python -m tests.diagnosis.planner.test_planner_grid``).
They pin the package to the old behaviour: every case's verdict and token count, and a
digest of its whole JSON (budget steps, explanations, notes, inputs, suggestions).
Re-recording is only right for a deliberate change of the arithmetic, never to make a
refactoring pass.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator

import pytest

from exporter.diagnosis.planner import GIB, Calibration, PlanError, calibrate, plan
from exporter.sglang.versions import VERSIONS
from exporter.sglang_cpu.models import model_config
from tests.conftest import DATA
from tests.diagnosis.planner.test_planner import (
    A6000,
    DEEPSEEK_V3,
    INCIDENT,
    LLAMA3_8B,
    LOGGED,
    QWEN36,
    SENSITIVITY,
    recorded,
)

RECORDED = DATA / "planner_grid.json"
GPUS = 8
GPU_SIZES = {"a6000": A6000, "30gib": 30 * GIB, "80gib": 80 * GIB}
MODELS = {"qwen36": QWEN36, "deepseek_v3": DEEPSEEK_V3, "llama3_8b": LLAMA3_8B}
CPU_MODELS = {"tiny": model_config("tiny"), "large": model_config("large")}
NO_FRACTION = {k: v for k, v in INCIDENT.items() if k != "mem-fraction-static"}
# The flag sets the planner tests use, and the incident's with each branch-deciding flag.
FLAG_SETS: dict[str, dict[str, object]] = {
    "none": {},
    "tp2": {"tp-size": 2},
    "tp4": {"tp-size": 4},
    "tp16": {"tp-size": 16},  # more GPUs than the grid's eight: a PlanError
    "fraction-0.99": {"mem-fraction-static": 0.99},
    "incident": INCIDENT,
    "incident-no-fraction": NO_FRACTION,
    "incident-ratio-0.5": {**INCIDENT, "mamba-full-memory-ratio": 0.5},
    "incident-no-radix": {**INCIDENT, "disable-radix-cache": True},
    "incident-fraction-0.93": {**INCIDENT, "mem-fraction-static": 0.93},
    "incident-extra-buffer": {**INCIDENT, "mamba-scheduler-strategy": "extra_buffer"},
    "incident-no-buffer-0.5.23": {**INCIDENT, "mamba-radix-cache-strategy": "no_buffer"},
    "incident-max-mamba": {**INCIDENT, "max-mamba-cache-size": 40},
    "incident-no-overlap-page": {**INCIDENT, "disable-overlap-schedule": True, "page-size": 16},
    "incident-graph-bs": {**NO_FRACTION, "cuda-graph-max-bs": 16, "max-running-requests": 8},
    "incident-graph-bs-0.5.23": {**NO_FRACTION, "cuda-graph-max-bs-decode": 16},
    "incident-no-graphs": {**NO_FRACTION, "disable-cuda-graph": True},
    "incident-dp-attention": {**NO_FRACTION, "enable-dp-attention": True, "dp-size": 2},
    "incident-cap": {**INCIDENT, "max-total-tokens": "64k", "max-running-requests": 16},
    "incident-mm-ipc": {**INCIDENT, "mm-feature-transport": "cuda_ipc"},
    "incident-standalone": {**INCIDENT, "speculative-algo": "STANDALONE"},
    "incident-standalone-no-fraction": {**NO_FRACTION, "speculative-algo": "STANDALONE"},
    "incident-eagle3-no-fraction": {**NO_FRACTION, "speculative-algo": "EAGLE3"},
    "incident-tp4": {**INCIDENT, "tp-size": 4},
    "incident-tp4-no-fraction": {**NO_FRACTION, "tp-size": 4},
    "incident-ngram": {"tp-size": 2, "speculative-algorithm": "NGRAM"},
    "eagle-default-shape": {"tp-size": 2, "speculative-algorithm": "EAGLE"},
    "long-context": {"context-length": 1 << 20},
    **{
        "sensitivity-" + "-".join(f"{k}={v}" for k, v in changes.items()) + f"-r{len(removed)}": {
            k: v for k, v in INCIDENT.items() if k not in removed
        }
        | changes
        for changes, removed, _, _ in SENSITIVITY
    },
}


def calibrations() -> dict[str, Calibration | None]:
    """No log, §4.10's logged P and A, and each recorded real CPU log."""
    found: dict[str, Calibration | None] = {"estimated": None, "logged": LOGGED}
    for version in VERSIONS:
        for name in ("serve.log", "pool_init_oom.log"):
            found[f"{version}-{name}"] = calibrate(recorded(version, name)[1])
    return found


def cases() -> Iterator[tuple[str, dict]]:
    """Every model x flag set x version x GPU size, estimated and with §4.10's log; the
    real CPU logs with their own flags on the CPU models."""
    cals = calibrations()
    for model, config in MODELS.items():
        for flags_name, flags in FLAG_SETS.items():
            for version in VERSIONS:
                for gpu, size in GPU_SIZES.items():
                    for cal in ("estimated", "logged"):
                        key = f"{model}|{flags_name}|{version}|{gpu}|{cal}"
                        yield key, dict(config=config, gpu=size, flags=flags, version=version,
                                        calibration=cals[cal])  # fmt: skip
    for version in VERSIONS:
        for name in ("serve.log", "pool_init_oom.log"):
            flags = recorded(version, name)[0]
            for model, config in CPU_MODELS.items():
                key = f"{model}|{version}-{name}|{version}|24gib|{version}-{name}"
                yield key, dict(config=config, gpu=24 * GIB, flags=flags, version=version,
                                calibration=cals[f"{version}-{name}"])  # fmt: skip


def outcome(config, gpu, flags, version, calibration) -> dict[str, object]:
    """What one plan() call gives, in a form that JSON keeps exactly: the headline numbers,
    and a digest of the whole JSON (budget, explanations, notes, inputs, suggestions)."""
    try:
        result = plan(config, gpu, GPUS, flags, version, calibration)
    except PlanError as error:
        return {"error": str(error)}
    whole = json.dumps(result.to_json(), sort_keys=True)
    return {
        "verdict": result.verdict,
        "max_total_num_tokens": result.max_total_num_tokens,
        "sha256": hashlib.sha256(whole.encode()).hexdigest(),
    }


def test_every_grid_case_plans_exactly_as_recorded():
    expected = json.loads(RECORDED.read_text())
    actual = {key: outcome(**case) for key, case in cases()}
    assert actual.keys() == expected.keys()
    wrong = [key for key in expected if actual[key] != expected[key]]
    assert not wrong, (
        f"{len(wrong)} of {len(expected)} cases differ; first {wrong[0]}: "
        f"{actual[wrong[0]]} != {expected[wrong[0]]}"
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_the_grid_reaches_every_verdict_of_the_version(version):
    """A grid that only ever fits would pin little: each version's grid holds every verdict
    its sizing can reach, and refusals."""
    verdicts = {
        value.get("verdict", "error")
        for key, value in json.loads(RECORDED.read_text()).items()
        if key.split("|")[2] == version
    }
    reachable = {"fits", "pool_init_oom", "cuda_graph_oom", "invalid_argument", "error"}
    assert verdicts >= reachable


if __name__ == "__main__":
    recording = {key: outcome(**case) for key, case in cases()}
    lines = [f"{json.dumps(key)}: {json.dumps(value)}" for key, value in sorted(recording.items())]
    RECORDED.write_text("{\n" + ",\n".join(lines) + "\n}\n")
    print(f"recorded {len(recording)} cases into {RECORDED}", file=sys.stderr)
