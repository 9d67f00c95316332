"""Automatic remedies, the ladder-then-remedy policy, and the pre-launch flag check."""

from __future__ import annotations

import json
import sys

import pytest

from exporter.config import Policy
from exporter.diagnosis.planner import calibrate, plan
from exporter.diagnosis.taxonomy import DETERMINISTIC
from exporter.diagnosis.taxonomy import FailureClass as C
from exporter.history import AttemptRecord
from exporter.logs.reader import read_log
from exporter.sglang_cpu.models import model_config
from exporter.supervisor.flags import read_known_flags
from exporter.supervisor.policy import decide
from exporter.supervisor.remedies import Remedy, remedy_for
from tests.conftest import DATA, GOLDEN
from tests.diagnosis.planner.test_planner import INCIDENT as INCIDENT_FLAGS
from tests.diagnosis.planner.test_planner import QWEN36 as INCIDENT_CONFIG

GIB = 1 << 30
POLICY = Policy(backoff_base_s=1.0, backoff_cap_s=8.0)


def incident_plan():
    events = read_log((GOLDEN / "sglang-0.5.9-pool-init-oom-incident.log").read_text())[1]
    return plan(INCIDENT_CONFIG, round(47.53 * GIB), 2, INCIDENT_FLAGS, "0.5.9", calibrate(events))


def test_pool_oom_remedy_is_the_planners_cheapest_change_with_its_reason():
    remedy = remedy_for(C.POOL_INIT_OOM, INCIDENT_FLAGS, incident_plan(), 0.95)
    assert set(remedy.set) == {"max-running-requests"}
    assert "speculative decoding reserved 13.8 GiB" in remedy.reason
    assert "48 request slots" in remedy.reason and "KV tokens" in remedy.reason
    assert remedy.reason.startswith("pool_init_oom: ")


def test_pool_oom_remedy_never_raises_the_fraction_above_the_maximum():
    """The real CPU log: weights exceed a 0.005 budget; the fix is a higher fraction, within bounds."""
    log = (DATA / "sglang-0.5.9-cpu" / "pool_init_oom.log").read_text()
    flags = {"device": "cpu", "max-total-tokens": 4096, "mem-fraction-static": 0.005}
    result = plan(model_config("large"), 24 * GIB, 1, flags, "0.5.9", calibrate(read_log(log)[1]))
    remedy = remedy_for(C.POOL_INIT_OOM, flags, result, 0.95)
    assert 0.005 < remedy.set["mem-fraction-static"] <= 0.95
    assert remedy_for(C.POOL_INIT_OOM, flags, result, 0.004) is None  # nothing within bounds


def test_graph_oom_lowers_the_fraction_then_the_batch_then_disables_graphs():
    args = {"mem-fraction-static": 0.9}
    steps = []
    for _ in range(20):
        remedy = remedy_for(C.CUDA_GRAPH_OOM, args, None, 0.95)
        if remedy is None:
            break
        steps.append(remedy.set)
        args = remedy.apply(args)
    assert steps[0] == {"mem-fraction-static": 0.85}
    assert {"cuda-graph-max-bs": 16} in steps
    assert steps[-1] == {"disable-cuda-graph": True}
    assert args["mem-fraction-static"] >= 0.5


def test_runtime_oom_lowers_chunked_prefill_then_running_requests():
    first = remedy_for(
        C.RUNTIME_OOM, {"chunked-prefill-size": 1024, "max-running-requests": 64}, None, 0.95
    )
    assert first.set == {"chunked-prefill-size": 512}
    floor = remedy_for(
        C.RUNTIME_OOM, {"chunked-prefill-size": 256, "max-running-requests": 64}, None, 0.95
    )
    assert floor.set == {"max-running-requests": 32}


def test_no_remedy_for_classes_a_flag_cannot_fix():
    for failure_class in (C.WEIGHTS_OOM, C.INVALID_ARGUMENT, C.KERNEL_ERROR, C.DEPENDENCY_ERROR):
        assert remedy_for(failure_class, {"mem-fraction-static": 0.9}, None, 0.95) is None


def test_remedies_accumulate_as_one_patch():
    first = Remedy({"mem-fraction-static": 0.85}, reason="a")
    both = first.then(Remedy({"cuda-graph-max-bs": 16}, ("enable-foo",), reason="b"))
    assert both.set == {"mem-fraction-static": 0.85, "cuda-graph-max-bs": 16}
    assert both.apply({"enable-foo": True, "port": 1}) == {"port": 1, **both.set}


def test_policy_prefers_the_users_ladder_then_the_remedy_then_gives_up():
    remedy = Remedy({"max-running-requests": 8}, reason="pool_init_oom: x")
    ladder = decide(
        C.POOL_INIT_OOM, 0, [["a"], ["b"]], ["first", "second"], POLICY, [], 0.0, remedy
    )
    assert (ladder.profile_index, ladder.remedy) == (1, None)
    auto = decide(C.POOL_INIT_OOM, 1, [["a"], ["b"]], ["first", "second"], POLICY, [], 0.0, remedy)
    assert (auto.relaunch, auto.profile_index, auto.remedy) == (True, 1, remedy)
    assert auto.reason.startswith("pool_init_oom: x")
    none = decide(C.POOL_INIT_OOM, 1, [["a"], ["b"]], ["first", "second"], POLICY, [], 0.0, None)
    assert not none.relaunch


def test_known_flags_come_from_the_real_help_once_and_are_cached(tmp_path):
    command = [sys.executable, "-m", "tests.harness.scripted"]
    env = {"PYTHONPATH": str(DATA.parents[1])}
    known = read_known_flags(command, env, tmp_path, "x")
    assert {"line", "sleep", "exit-code", "ignore-sigterm"} <= known
    (cache,) = tmp_path.glob("sglang-flags-*.json")
    cache.write_text(json.dumps(["only-this"]))
    assert read_known_flags(command, env, tmp_path, "x") == {"only-this"}  # no second --help
    assert (
        read_known_flags([sys.executable, "-c", "import sys; sys.exit(3)"], env, tmp_path, "y")
        is None
    )


def test_a_transient_class_is_retried_once_then_remedied():
    remedy = Remedy({"chunked-prefill-size": 4096}, reason="runtime_oom: halving")
    first = [AttemptRecord(attempt=1, profile_index=0, ended_at=10.0, failure_class="runtime_oom")]
    once = decide(C.RUNTIME_OOM, 0, [["a"]], ["only"], POLICY, first, 20.0, remedy)
    assert once.relaunch and once.remedy is None and "retrying" in once.reason
    again = [
        *first,
        AttemptRecord(attempt=2, profile_index=0, ended_at=30.0, failure_class="runtime_oom"),
    ]
    twice = decide(C.RUNTIME_OOM, 0, [["a"]], ["only"], POLICY, again, 40.0, remedy)
    assert twice.remedy is remedy


@pytest.mark.parametrize("failure_class", [c for c in C if c is not C.NONE])
def test_policy_for_every_class(failure_class):
    """Transient classes retry the same profile; deterministic ones move down the ladder;
    at its end only the classes a flag can fix get an automatic remedy."""
    commands, names = [["a"], ["b"]], ["first", "second"]
    first = decide(failure_class, 0, commands, names, POLICY, [], 0.0)
    if failure_class in DETERMINISTIC:
        assert (first.relaunch, first.profile_index) == (True, 1)
        assert "falling back from profile 'first' to 'second'" in first.reason
    else:
        assert (first.relaunch, first.profile_index) == (True, 0)
        assert "retrying profile 'first'" in first.reason
    remedy = remedy_for(
        failure_class, {"mem-fraction-static": 0.9, "chunked-prefill-size": 2048}, None, 0.95
    )
    assert (remedy is not None) == (failure_class in {C.CUDA_GRAPH_OOM, C.RUNTIME_OOM})
    end = decide(failure_class, 1, commands, names, POLICY, [], 0.0, remedy)
    if failure_class in DETERMINISTIC:
        assert end.relaunch == (remedy is not None)
        assert end.remedy is remedy
    assert failure_class.value in end.reason
