"""Pre-flight: the planner on the command about to launch, its inputs (model config from a
directory or the Hugging Face cache, device memory per TP rank, a calibration from the last
attempt of the same setup), and that no bad input ever blocks a launch."""

from __future__ import annotations

import json

import pytest

from exporter.commands.history import table
from exporter.diagnosis.planner import GIB, UNKNOWN, PlanError, PlanInputs
from exporter.history import History
from exporter.plan_inputs import (
    PlanInputError,
    calibration_from_log,
    device_memory,
    gather,
    rank_devices,
    read_model_config,
)
from exporter.sglang_cpu.models import model_config
from exporter.supervisor import preflight as preflight_module
from exporter.supervisor.preflight import check, disagreement
from tests.conftest import DATA
from tests.diagnosis.planner.test_planner import A6000, INCIDENT, QWEN36, cli

CPU_LOG = DATA / "sglang-0.5.9-cpu" / "pool_init_oom.log"


@pytest.fixture
def incident_model(tmp_path):
    directory = tmp_path / "Qwen3.6-27B"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(QWEN36))
    return directory


def incident_args(model) -> dict:
    return {"model-path": str(model), **INCIDENT}


def two_a6000s() -> list[int]:
    return [A6000, A6000]


def test_seed_incident_is_predicted_before_launch_and_fixed_with_fewer_running_requests(
    incident_model,
):
    """The 2x A6000 incident, from its config and the GPU size alone (no log yet)."""
    args = incident_args(incident_model)
    inputs = gather(args, {}, None, "0.5.9", gpus=two_a6000s)
    assert (inputs.device_memory_bytes, inputs.devices, inputs.calibration) == (A6000, 2, None)
    result = check("fix", args, inputs, "0.5.9", 0.95)
    assert result.verdict == "pool_init_oom"
    assert result.reason.startswith("speculative decoding reserved 13.8 GiB")
    assert result.applied and set(result.change.set) == {"max-running-requests"}
    assert result.launch_verdict == "fits" and result.planned_tokens >= 32768
    assert not result.calibrated
    assert "launching with --max-running-requests" in result.sentence()
    record = result.record(100.0)["preflight"]
    assert record["time"] == 100.0 and record["change"]["set"] == result.change.set
    json.dumps(record)  # the history writes it as JSON


def test_warn_reports_the_fix_and_launches_unchanged(incident_model):
    args = incident_args(incident_model)
    inputs = gather(args, {}, None, "0.5.9", gpus=two_a6000s)
    result = check("warn", args, inputs, "0.5.9", 0.95)
    assert result.verdict == result.launch_verdict == "pool_init_oom"
    assert result.change is not None and not result.applied
    assert result.planned_tokens < 0
    assert "launching unchanged (warn mode)" in result.sentence()


def test_a_fitting_command_is_left_alone(incident_model):
    args = {**incident_args(incident_model), "max-running-requests": 8}
    result = check("fix", args, gather(args, {}, None, "0.5.9", gpus=two_a6000s), "0.5.9", 0.95)
    assert (result.verdict, result.change, result.applied) == ("fits", None, False)
    assert result.sentence().startswith("pre-flight: fits, ")


def test_the_fix_respects_the_fraction_bound(tmp_path):
    """The CPU demo's budget: the only fix is a larger fraction; a bound below it leaves
    the command unchanged rather than breaking policy.max_mem_fraction_static."""
    (tmp_path / "config.json").write_text(json.dumps(model_config("large")))
    args = {"model-path": str(tmp_path), "device": "cpu", "mem-fraction-static": 0.005}
    inputs = PlanInputs(model_config("large"), 20 * GIB, 1, "test", None)
    fixed = check("fix", args, inputs, "0.5.9", 0.9)
    assert fixed.applied and fixed.change.set["mem-fraction-static"] <= 0.9
    bounded = check("fix", args, inputs, "0.5.9", 0.01)
    assert bounded.verdict == "pool_init_oom" and not bounded.applied
    assert "no change within the bounds fits" in bounded.sentence()


# --------------------------------------------------------------------------- bad input


def test_bad_model_path_nvml_failure_and_planner_errors_are_unknown_never_raised(
    tmp_path, incident_model, monkeypatch
):
    missing = {"model-path": str(tmp_path / "nowhere"), "tp-size": 2}
    with pytest.raises(PlanInputError, match="nowhere"):
        gather(missing, {}, None, "0.5.9", gpus=two_a6000s)

    def nvml_down() -> list[int]:
        raise PlanInputError("NVML: Driver Not Loaded")

    with pytest.raises(PlanInputError, match="Driver Not Loaded"):
        gather(incident_args(incident_model), {}, None, "0.5.9", gpus=nvml_down)
    result = check("fix", {}, "NVML: Driver Not Loaded", "0.5.9", 0.95)
    assert (result.verdict, result.launch_verdict, result.planned_tokens) == (UNKNOWN,) * 2 + (
        None,
    )
    assert result.sentence() == (
        "pre-flight cannot plan (NVML: Driver Not Loaded); launching unchanged"
    )
    # An architecture the planner cannot size, and a planner that blows up.
    inputs = PlanInputs({"architectures": ["Mystery"]}, A6000, 2, "test", None)
    refused = check("fix", incident_args(incident_model), inputs, "0.5.9", 0.95)
    assert refused.verdict == UNKNOWN and "planner cannot size it" in refused.reason

    def broken(*args, **kwargs):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(preflight_module, "plan", broken)
    good = PlanInputs(QWEN36, A6000, 2, "test", None)
    crashed = check("fix", incident_args(incident_model), good, "0.5.9", 0.95)
    assert crashed.verdict == UNKNOWN and "ZeroDivisionError" in crashed.reason


def test_a_broken_config_json_names_the_file(tmp_path):
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(PlanError, match=r"config\.json is not JSON"):
        read_model_config(str(tmp_path))


# --------------------------------------------------------------------------- inputs


def test_a_hub_id_is_read_from_the_hugging_face_cache_layout(tmp_path):
    repo = tmp_path / "hub" / "models--Qwen--Qwen3.6-27B"
    old, new = repo / "snapshots" / "aaa", repo / "snapshots" / "bbb"
    for snapshot, layers in ((old, 1), (new, 64)):
        snapshot.mkdir(parents=True)
        (snapshot / "config.json").write_text(json.dumps({"num_hidden_layers": layers}))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("bbb\n")
    env = {"HF_HOME": str(tmp_path)}
    assert read_model_config("Qwen/Qwen3.6-27B", env) == {"num_hidden_layers": 64}
    (repo / "refs" / "main").write_text("aaa")
    assert read_model_config("Qwen/Qwen3.6-27B", {"HF_HUB_CACHE": str(tmp_path / "hub")}) == {
        "num_hidden_layers": 1
    }
    with pytest.raises(PlanInputError, match="nothing is downloaded"):
        read_model_config("Qwen/Other", env)


def test_device_memory_is_the_smallest_gpu_among_the_tp_ranks():
    sizes = [80 * GIB, 40 * GIB, 80 * GIB, 80 * GIB]
    assert rank_devices({"tp-size": 2}, {}) == [0, 1]
    assert rank_devices({"tp-size": 2, "base-gpu-id": 2}, {}) == [2, 3]
    assert rank_devices({"tp-size": 2}, {"CUDA_VISIBLE_DEVICES": "3,2"}) == [3, 2]
    both = device_memory({"tp-size": 2}, {}, lambda: sizes)
    assert (both.per_rank_bytes, both.devices, both.source) == (40 * GIB, 4, "NVML, GPU 0, 1")
    assert device_memory({"tp-size": 2, "base-gpu-id": 2}, {}, lambda: sizes).per_rank_bytes == (
        80 * GIB
    )
    with pytest.raises(PlanInputError, match="need GPU 4"):
        device_memory({"tp-size": 2, "base-gpu-id": 3}, {}, lambda: sizes)
    host = device_memory({"device": "cpu"}, {}, lambda: pytest.fail("NVML asked for a CPU"))
    assert host.per_rank_bytes > 0 and host.source == "host memory (CPU engine)"


def test_the_last_attempts_log_calibrates_only_the_same_model_and_devices():
    """The recorded CPU pool failure: its memory lines calibrate a relaunch of the same
    model on the same device, and nothing else."""
    text = CPU_LOG.read_text()
    logged_model = text.split("model_path='", 1)[1].split("'", 1)[0]
    same = {"model-path": logged_model, "device": "cpu", "mem-fraction-static": 0.5}
    calibration = calibration_from_log(CPU_LOG, same, "0.5.9")
    assert calibration is not None
    assert calibration.free_before_weights == round(21.25 * GIB)
    assert calibration.weights == round(0.30 * GIB)
    assert calibration_from_log(CPU_LOG, {**same, "model-path": "/other"}, "0.5.9") is None
    assert calibration_from_log(CPU_LOG, {**same, "device": "cuda"}, "0.5.9") is None
    assert calibration_from_log(CPU_LOG, {**same, "tp-size": 2}, "0.5.9") is None
    assert calibration_from_log(None, same, "0.5.9") is None
    assert calibration_from_log("/nonexistent.log", same, "0.5.9") is None


def test_disagreement_above_two_percent_is_worth_a_sentence():
    assert disagreement(4096, 4096) is None
    assert disagreement(1020, 1000) is None  # 2.0 %
    assert "2.1%" in disagreement(1021, 1000)
    assert disagreement(None, 1000) is None and disagreement(1000, None) is None


def test_plan_command_sizes_device_memory_as_the_pre_flight_does(tmp_path):
    """No --gpu-memory-gib: with --device cpu the host memory SGLang's CPU engine sizes from;
    a GPU launch whose ranks NVML cannot size (no NVML here, or fewer than 64 GPUs) asks for
    the size, naming why."""
    (tmp_path / "config.json").write_text(json.dumps(model_config("large")))
    cpu = cli("--json", "--model-config", str(tmp_path), "--", "--device", "cpu",
              "--mem-fraction-static", "0.005")  # fmt: skip
    assert cpu.returncode == 0, cpu.stderr
    assert json.loads(cpu.stdout)["verdict"] == "pool_init_oom"
    gpu = cli("--model-config", str(tmp_path), "--", "--tp-size", "64")
    assert gpu.returncode == 1 and "give --gpu-memory-gib" in gpu.stderr


def test_history_reads_the_pre_flight_back_and_the_table_shows_what_it_did(
    tmp_path, incident_model
):
    args = incident_args(incident_model)
    inputs = gather(args, {}, None, "0.5.9", gpus=two_a6000s)
    history = History(tmp_path)
    for attempt, mode in ((1, "fix"), (2, "warn")):
        planned = check(mode, args, inputs, "0.5.9", 0.95)
        history.append({"type": "start", "attempt": attempt, "time": 10.0, **planned.record(9.5)})
    fixed, warned = history.read().attempts
    assert fixed.preflight["time"] == 9.5 and fixed.preflight["applied"] is True
    lines = table([fixed, warned]).splitlines()
    assert lines[2].startswith("    pre-flight: pool_init_oom: speculative decoding reserved")
    assert lines[2].endswith("; launched with --max-running-requests 32")
    assert lines[4].endswith("; launched unchanged (--max-running-requests 32 would fit)")
