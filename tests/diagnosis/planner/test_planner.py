"""The memory planner against the reference's worked example (sglang-internals.md §4.10),
real SGLang logs recorded on this CPU, hand-computed cells, random inputs, and the CLI."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.diagnosis.planner import (
    GIB,
    LOG_ROUNDING_BYTES,
    Calibration,
    PlanError,
    calibrate,
    kv_cell_bytes,
    plan,
    read_launch,
    read_model,
    state_bytes_per_request,
)
from exporter.logs.events import EventKind
from exporter.logs.reader import read_log
from exporter.sglang.flags import parse_flags
from exporter.sglang.versions import VERSIONS
from exporter.sglang_cpu.models import model_config
from tests.conftest import DATA, GOLDEN, load_labels

# §4.10's assumed Qwen3.6-27B config (a VLM checkpoint: the text model is nested).
QWEN36 = {
    "architectures": ["Qwen3_5ForConditionalGeneration"],
    "model_type": "qwen3_5",
    "text_config": {
        "model_type": "qwen3_5_text",
        "hidden_size": 5120,
        "intermediate_size": 17408,
        "num_hidden_layers": 64,
        "full_attention_interval": 4,
        "num_attention_heads": 24,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "attn_output_gate": True,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 48,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "mamba_ssm_dtype": "float32",
        "vocab_size": 248320,
        "tie_word_embeddings": False,
        "max_position_embeddings": 262144,
        "mtp_num_hidden_layers": 1,
        "dtype": "bfloat16",
    },
    "vision_config": {"depth": 27, "hidden_size": 1152},
}
# The incident's flags, as the daemon's config writes them (argparse prefix included).
INCIDENT = {
    "mem-fraction-static": 0.85,
    "context-length": 32768,
    "speculative-algo": "NEXTN",
    "speculative-num-steps": 3,
    "speculative-eagle-topk": 1,
    "speculative-num-draft-tokens": 4,
    "tp-size": 2,
}
A6000 = round(47.53 * GIB)  # what CUDA reports as an RTX A6000's total
# §4.10's P and A: as the incident's log prints them.
LOGGED = Calibration(free_before_weights=round(46.86 * GIB), free_after_weights=round(21.30 * GIB))
SPEC = ("speculative-algo", "speculative-num-steps", "speculative-eagle-topk")
SPEC_FLAGS = (*SPEC, "speculative-num-draft-tokens")


def rounding_tokens(fraction: float, cell: int) -> int:
    """How far a calibrated token count may be off: P and A are printed to 0.01 GiB, so
    each is known to +-0.005 GiB, and the KV budget A - (1 - mfs) P to the sum."""
    return math.ceil(LOG_ROUNDING_BYTES * (1 + (1 - fraction)) / cell)


def within(actual: int, expected: int, fraction: float) -> bool:
    return abs(actual - expected) <= fraction * abs(expected)


# --------------------------------------------------------------------------- §4.10


@pytest.mark.parametrize("calibration", [LOGGED, None], ids=["calibrated", "estimated"])
def test_incident_predicts_the_pool_failure_and_names_the_speculative_reservation(calibration):
    for flags in (INCIDENT, {**INCIDENT, "mamba-full-memory-ratio": 0.5}):
        result = plan(QWEN36, A6000, 2, flags, "0.5.9", calibration)
        assert result.verdict == "pool_init_oom"
        assert result.what_ate_the_budget == "speculative_reservation"
        assert result.max_total_num_tokens < 0  # §4.10: -96 128
        assert (result.mamba_cache_slots, result.max_running_requests) == (48, 48)
        steps = {step.name: step.bytes / GIB for step in result.budget}
        assert steps["speculative_reservation"] == pytest.approx(13.76, abs=0.01)
        assert steps["mamba_state"] == pytest.approx(3.44, abs=0.01)
        assert steps["static_headroom"] == pytest.approx(7.03, abs=0.01)
        first = result.suggestions[0]
        assert first.change.startswith("--max-running-requests")
        assert first.plan.verdict == "fits" and first.plan.max_total_num_tokens >= 32768
        kinds = [next(iter(s.set), "remove") for s in result.suggestions]
        assert kinds == [
            "max-running-requests",
            "speculative-num-steps",
            "mamba-ssm-dtype",
            "remove",  # no speculative decoding
        ]


def test_calibrated_exactly_from_the_incident_log():
    _, events = read_log((GOLDEN / "sglang-0.5.9-pool-init-oom-incident.log").read_text())
    calibration = calibrate(events)
    assert calibration.free_before_weights == LOGGED.free_before_weights
    assert calibration.free_after_weights == LOGGED.free_after_weights
    assert calibration.weights == round(25.56 * GIB)
    assert (calibration.mem_fraction_static, calibration.max_running_requests) == (0.85, 48)
    exact = plan(QWEN36, A6000, 2, INCIDENT, "0.5.9", calibration)
    assert exact.max_total_num_tokens == -96128  # §4.10's table
    assert exact.inputs["calibrated"] is True


# (flags changed from the incident's, tokens, max_running_requests) from §4.10's table.
SENSITIVITY = [
    ({"max-running-requests": 16}, (), 279712, 16),
    ({"max-running-requests": 8}, (), 373672, 8),
    (
        {"max-running-requests": 8, "speculative-num-steps": 1, "speculative-num-draft-tokens": 2},
        (),
        411256,
        8,
    ),
    ({"max-running-requests": 4}, (), 420652, 4),
    ({"mamba-full-memory-ratio": 0.5}, SPEC_FLAGS, 312598, 22),
    ({}, SPEC_FLAGS, 246826, 31),
]


@pytest.mark.parametrize("calibration", [LOGGED, None], ids=["calibrated", "estimated"])
@pytest.mark.parametrize(
    ("changes", "removed", "tokens", "running"),
    SENSITIVITY,
    ids=["N16", "N8", "N8-D2", "N4", "nospec-r0.5", "nospec-default"],
)
def test_sensitivity_table(calibration, changes, removed, tokens, running):
    flags = {k: v for k, v in INCIDENT.items() if k not in removed} | changes
    result = plan(QWEN36, A6000, 2, flags, "0.5.9", calibration)
    assert result.verdict == "fits"
    assert result.max_running_requests == running
    assert within(result.max_total_num_tokens, tokens, 0.02)
    if calibration is not None:  # the table was computed from these P and A
        slack = rounding_tokens(0.85, result.inputs["kv_cell_bytes"])
        assert abs(result.max_total_num_tokens - tokens) <= slack


@pytest.mark.parametrize(
    "calibration",
    [
        Calibration(
            free_before_weights=round(46.86 * GIB),
            free_after_weights=round(21.30 * GIB),
            draft_weights=round(0.43 * GIB),
            version="0.5.23",
        ),
        None,
    ],
    ids=["calibrated", "estimated"],
)
def test_0_5_23_caps_max_running_requests_by_the_state_cache(calibration):
    flags = {**INCIDENT, "mamba-full-memory-ratio": 0.5}
    result = plan(QWEN36, A6000, 2, flags, "0.5.23", calibration)
    assert result.verdict == "fits"
    assert (result.mamba_cache_slots, result.max_running_requests) == (32, 6)
    assert within(result.max_total_num_tokens, 288990, 0.02)
    assert result.inputs["kv_cell_bytes"] == 34816  # the draft layer is charged in the cell
    assert any("capped to 6" in note for note in result.notes)
    assert result.suggestions == []


def test_0_5_23_with_the_radix_cache_disabled_leaves_no_memory():
    """§4.10: K = 48, reserve S x 49 x 4, then 'Loaded weights leave no GPU memory'."""
    calibration = Calibration(
        free_before_weights=round(46.86 * GIB),
        free_after_weights=round(21.30 * GIB),
        draft_weights=round(0.43 * GIB),
        version="0.5.23",
    )
    flags = {**INCIDENT, "disable-radix-cache": True}
    result = plan(QWEN36, A6000, 2, flags, "0.5.23", calibration)
    assert result.verdict == "pool_init_oom"
    kv = next(step for step in result.budget if step.name == "kv_cache")
    assert kv.bytes / GIB == pytest.approx(-3.82, abs=0.01)
    assert any("Loaded weights leave no GPU memory" in note for note in result.notes)


def test_raising_the_fraction_eats_the_0_5_9_draft_headroom():
    """§4.10's mfs 0.93 row: the pool is sized but the draft model cannot load after it."""
    result = plan(QWEN36, A6000, 2, {**INCIDENT, "mem-fraction-static": 0.93}, "0.5.9", LOGGED)
    assert result.verdict == "cuda_graph_oom"
    assert within(result.max_total_num_tokens, 26712, 0.02)
    names = [step.name for step in result.budget]
    assert names.index("draft_weights") > names.index("kv_cache")
    assert all(s.plan.fits for s in result.suggestions)
    # The incident itself: no fraction up to the ceiling both sizes the pool and keeps the
    # draft's headroom, so raising it is not suggested.
    incident = plan(QWEN36, A6000, 2, INCIDENT, "0.5.9", LOGGED)
    assert not any("mem-fraction-static" in s.set for s in incident.suggestions)


def test_when_no_single_change_fits_one_combination_is_suggested():
    """30 GiB GPUs: neither fewer requests nor fewer steps nor any fraction alone fits;
    dropping speculative decoding and raising the fraction together do, and the
    combination keeps none of the changes that became moot (N=1 once speculation is off)."""
    result = plan(QWEN36, 30 * GIB, 2, INCIDENT, "0.5.9")
    assert result.verdict == "pool_init_oom"
    (combined,) = result.suggestions
    assert set(combined.set) == {"mem-fraction-static"}
    assert set(combined.remove) == {  # names as argparse resolves them
        "speculative-algorithm",
        "speculative-num-steps",
        "speculative-eagle-topk",
        "speculative-num-draft-tokens",
    }
    assert combined.plan.fits and combined.plan.max_total_num_tokens >= 32768


def test_golden_serving_log_calibrates_its_own_pool():
    """A run with --max-running-requests 8: its logged KV tokens, from its memory lines."""
    _, events = read_log((GOLDEN / "sglang-0.5.9-serve-hybrid-tp2.log").read_text())
    calibration = calibrate(events)
    assert calibration.draft_weights == round(2.80 * GIB)  # the MTP draft's load peak
    flags = {**INCIDENT, "max-running-requests": 8, "mamba-full-memory-ratio": 0.5}
    result = plan(QWEN36, A6000, 2, flags, "0.5.9", calibration)
    slack = rounding_tokens(0.85, result.inputs["kv_cell_bytes"])
    assert abs(result.max_total_num_tokens - calibration.kv_tokens) <= slack
    assert result.mamba_cache_slots == calibration.mamba_slots == 8
    draft = next(step for step in result.budget if step.name == "draft_weights")
    assert draft.bytes == calibration.draft_weights


# --------------------------------------------------------------------------- real CPU logs


def recorded(version: str, name: str) -> tuple[dict, list]:
    directory = DATA / f"sglang-{version}-cpu"
    label = next(row for row in load_labels(directory) if row["file"] == name)
    _, events = read_log((directory / name).read_text())
    command = label["command"]  # python -m sglang.launch_server --flag ...
    first_flag = next(i for i, word in enumerate(command) if word.startswith("--"))
    return parse_flags(command[first_flag:]), events


@pytest.mark.parametrize("version", VERSIONS)
def test_real_serving_log_predicts_its_pool(version):
    flags, events = recorded(version, "serve.log")
    result = plan(model_config("tiny"), 24 * GIB, 1, flags, version, calibrate(events))
    kv = next(e for e in events if e.kind is EventKind.KV_CACHE_ALLOCATED)
    ready = next(e for e in events if e.kind is EventKind.SCHEDULER_READY)
    assert result.verdict == "fits"
    assert result.max_total_num_tokens == kv.get("tokens") == 4096  # --max-total-tokens
    assert result.max_running_requests == ready.get("max_running_requests") == 2048


def test_real_serving_log_uncapped_matches_the_arithmetic_by_hand():
    """Without --max-total-tokens the CPU pool is sized from host memory (0.5.9):
    P = 21.18 GiB (Load weight begin), mem_fraction_static resolved to 0.812 (server_args),
    the tiny Qwen2's cell = 2 KV heads x (16 + 16) x 2 layers x 2 B = 256 B. Its weights,
    106 496 bf16 parameters = 212 992 B, print as "-0.00 GB": they move the answer by at
    most 212 992 / 256 = 832 tokens."""
    flags, events = recorded("0.5.9", "serve.log")
    del flags["max-total-tokens"]
    result = plan(model_config("tiny"), 24 * GIB, 1, flags, "0.5.9", calibrate(events))
    free = round(21.18 * GIB) / GIB
    by_hand = int((free - free * (1 - 0.812)) * GIB) // 256
    assert result.inputs["kv_cell_bytes"] == 256
    assert abs(result.max_total_num_tokens - by_hand) <= 832
    assert result.max_total_num_tokens > 70_000_000  # what --max-total-tokens 4096 caps


@pytest.mark.parametrize("version", VERSIONS)
def test_real_pool_failure_is_predicted_from_its_flags(version):
    """--mem-fraction-static 0.005 holds back almost everything: weights exceed the rest."""
    flags, events = recorded(version, "pool_init_oom.log")
    calibration = calibrate(events)
    result = plan(model_config("large"), 24 * GIB, 1, flags, version, calibration)
    assert result.verdict == "pool_init_oom"
    assert result.what_ate_the_budget == "static_headroom"
    assert result.max_total_num_tokens < 0
    fix = result.suggestions[0]
    assert "mem-fraction-static" in fix.set and fix.plan.max_total_num_tokens >= 2048
    # 0.5.9 logs its own profiled value: negative too. It is 2466 tokens (0.05 GiB) lower
    # than ours, more than the 0.01 GiB rounding: on a CPU, SGLang measures P at init from
    # host memory, which model imports shrink before "Load weight begin" prints it.
    text = (DATA / f"sglang-{version}-cpu" / "pool_init_oom.log").read_text()
    profiled = re.search(r"larger than the profiled value (-?\d+)", text)
    if profiled:
        assert int(profiled.group(1)) < 0


# --------------------------------------------------------------------------- cells by hand

DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "hidden_size": 7168,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "vocab_size": 129280,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "first_k_dense_replace": 3,
    "num_nextn_predict_layers": 1,
    "max_position_embeddings": 163840,
}
LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
}


def cell(config: dict, **flags) -> int:
    model = read_model(config)
    return kv_cell_bytes(model, read_launch(flags, "0.5.9", model))


def test_mla_cell_is_one_latent_per_layer_replicated_across_tp():
    assert cell(DEEPSEEK_V3) == (512 + 64) * 61 * 2 == 70272
    assert cell(DEEPSEEK_V3, **{"tp-size": 8}) == 70272
    assert cell(DEEPSEEK_V3, **{"kv-cache-dtype": "fp8_e4m3"}) == 35136


def test_gqa_cell_shards_kv_heads_and_replicates_below_one_per_rank():
    assert cell(LLAMA3_8B) == 8 * (128 + 128) * 32 * 2 == 131072
    assert cell(LLAMA3_8B, **{"tp-size": 2}) == 65536
    assert cell(LLAMA3_8B, **{"tp-size": 8}) == 16384  # one KV head per rank
    assert cell(LLAMA3_8B, **{"tp-size": 16}) == 16384  # 8 heads on 16 ranks: replicated
    assert cell(LLAMA3_8B, **{"kv-cache-dtype": "fp8_e5m2"}) == 65536


def test_hybrid_cell_counts_only_full_attention_layers():
    assert cell(QWEN36, **{"tp-size": 2}) == 2 * (256 + 256) * 16 * 2 == 32768
    listed = {**QWEN36["text_config"], "layer_types": ["linear_attention"] * 3 + ["full_attention"]}
    listed["layer_types"] = listed["layer_types"] * 16
    del listed["full_attention_interval"]
    assert cell({**QWEN36, "text_config": listed}, **{"tp-size": 2}) == 32768


def test_linear_attention_state_per_request():
    model = read_model(QWEN36)

    def state(**flags) -> int:
        return state_bytes_per_request(model, read_launch(flags, "0.5.9", model))

    # 48 linear layers x (conv 10240/2 x 3 x bf16 + SSM 24 x 128 x 128 x fp32)
    assert state(**{"tp-size": 2}) == 48 * (5120 * 3 * 2 + 24 * 128 * 128 * 4) == 76972032
    assert state(**{"tp-size": 2, "mamba-ssm-dtype": "bfloat16"}) == 48 * (30720 + 786432)
    assert state(**{"tp-size": 4}) == 48 * (2560 * 3 * 2 + 12 * 128 * 128 * 4)


def test_nested_text_config_reads_like_a_flat_one():
    flat = {**QWEN36, **QWEN36["text_config"]}
    del flat["text_config"]
    for version in VERSIONS:
        nested = plan(QWEN36, A6000, 2, INCIDENT, version)
        plain = plan(flat, A6000, 2, INCIDENT, version)
        assert nested.max_total_num_tokens == plain.max_total_num_tokens
        assert nested.budget == plain.budget


def test_default_fraction_when_the_flag_is_absent():
    """§4.8 for an A6000 at TP=2 with NEXTN (0.5.9): reserve 512 + 4096 x 1.5 + 32 x 2 +
    2/8 x 1024 + 2048 = 9024 MiB of 48 670 MiB, then the ViT factor. SGLang reads the
    ViT's num_hidden_layers (24 when absent; this config calls it "depth")."""
    flags = {k: v for k, v in INCIDENT.items() if k != "mem-fraction-static"}
    result = plan(QWEN36, A6000, 2, flags, "0.5.9")
    total = A6000 / 2**20
    vit = 0.95 * (1 - 0.1 * (24 * 1152**2 / (24 * 1024**2) - 1))
    assert result.inputs["mem_fraction_static"] == pytest.approx(
        round((total - 9024) / total, 3) * vit
    )


def test_prefix_and_aliases_of_flags_are_resolved():
    model = read_model(LLAMA3_8B)
    launch = read_launch(
        {"--speculative-algo": "nextn", "tensor-parallel-size": "2", "max-running": "8"},
        "0.5.9",
        model,
    )
    assert (launch.speculative, launch.tp, launch.max_running_requests) == ("EAGLE", 2, 8)
    # auto_choose_speculative_params: (steps, topk, draft tokens) = (5, 4, 8) for Llama
    assert (launch.steps, launch.topk, launch.draft_tokens) == (5, 4, 8)


def test_impossible_inputs_raise_a_clear_plan_error():
    with pytest.raises(PlanError, match="num_hidden_layers"):
        plan({"hidden_size": 64, "num_attention_heads": 4}, GIB, 1, {})
    with pytest.raises(PlanError, match="GPUs"):
        plan(LLAMA3_8B, 80 * GIB, 1, {"tp-size": 2})
    with pytest.raises(PlanError, match="mem-fraction-static"):
        plan(LLAMA3_8B, 80 * GIB, 1, {"mem-fraction-static": 1.5})
    with pytest.raises(PlanError, match="needs a number"):
        plan(LLAMA3_8B, 80 * GIB, 1, {"max-running-requests": "many"})
    with pytest.raises(PlanError, match=r"0\.5\.10"):
        plan(LLAMA3_8B, 80 * GIB, 1, {}, "0.5.10")


# --------------------------------------------------------------------------- random inputs


@st.composite
def models(draw) -> dict:
    heads = draw(st.sampled_from([1, 2, 4, 8, 16, 32, 64]))
    head_dim = draw(st.sampled_from([32, 64, 128, 256]))
    config = {
        "architectures": [draw(st.sampled_from(["LlamaForCausalLM", "Qwen2ForCausalLM"]))],
        "hidden_size": heads * head_dim,
        "num_hidden_layers": draw(st.integers(1, 64)),
        "num_attention_heads": heads,
        "num_key_value_heads": draw(st.sampled_from([h for h in (1, 2, 4, 8) if heads % h == 0])),
        "intermediate_size": draw(st.integers(1, 50_000)),
        "vocab_size": draw(st.integers(1, 160_000)),
        "max_position_embeddings": draw(st.integers(2048, 1 << 18)),
    }
    kind = draw(st.sampled_from(["dense", "mla", "hybrid"]))
    if kind == "mla":
        config |= {
            "architectures": ["DeepseekV3ForCausalLM"],
            "kv_lora_rank": draw(st.sampled_from([256, 512])),
            "qk_rope_head_dim": 64,
            "qk_nope_head_dim": 128,
            "v_head_dim": 128,
        }
    elif kind == "hybrid":
        config |= {
            "architectures": ["Qwen3NextForCausalLM"],
            "full_attention_interval": draw(st.integers(1, 8)),
            "linear_num_key_heads": draw(st.sampled_from([1, 2, 4, 16])),
            "linear_num_value_heads": draw(st.sampled_from([8, 16, 32, 48])),
            "linear_key_head_dim": 128,
            "linear_value_head_dim": 128,
            "num_nextn_predict_layers": draw(st.integers(0, 2)),
        }
        if draw(st.booleans()):
            config = {"architectures": ["Qwen3_5ForConditionalGeneration"], "text_config": config}
    return config


@st.composite
def launches(draw) -> dict:
    flags: dict[str, object] = {"tp-size": draw(st.sampled_from([1, 2, 4, 8]))}
    optional = {
        "mem-fraction-static": st.floats(0.01, 1.0),
        "max-running-requests": st.integers(1, 512),
        "context-length": st.integers(1, 1 << 16),
        "max-total-tokens": st.integers(1, 1 << 22),
        "page-size": st.sampled_from([1, 16, 64]),
        "kv-cache-dtype": st.sampled_from(["auto", "fp8_e4m3", "bf16", "fp4_e2m1"]),
        "mamba-full-memory-ratio": st.floats(0.05, 4.0),
        "max-mamba-cache-size": st.integers(1, 400),
        "mamba-ssm-dtype": st.sampled_from(["float32", "bfloat16"]),
        "disable-radix-cache": st.booleans(),
        "speculative-algorithm": st.sampled_from(["NEXTN", "EAGLE", "NGRAM"]),
        "speculative-num-steps": st.integers(1, 6),
        "speculative-eagle-topk": st.integers(1, 4),
        "speculative-num-draft-tokens": st.integers(1, 16),
        "pp-size": st.sampled_from([1, 2]),
        "enable-dp-attention": st.booleans(),
        "dp-size": st.sampled_from([1, 2]),
        "disable-cuda-graph": st.booleans(),
    }
    for name, values in optional.items():
        if draw(st.booleans()):
            flags[name] = draw(values)
    return flags


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    config=models(),
    flags=launches(),
    gib=st.floats(4, 200),
    gpus=st.integers(1, 8),
    version=st.sampled_from(VERSIONS),
    calibrated=st.booleans(),
)
def test_random_inputs_plan_or_refuse_clearly_and_suggestions_fit(
    config, flags, gib, gpus, version, calibrated
):
    calibration = None
    if calibrated:
        free = round(gib * 0.97 * GIB)
        calibration = Calibration(free_before_weights=free, free_after_weights=free // 2)
    try:
        # Mostly enough GPUs for --tp-size: the refusal is tested on its own.
        world = int(flags["tp-size"]) * int(flags.get("pp-size", 1)) * int(flags.get("dp-size", 1))
        gpus = max(gpus, world) if gpus > 1 else gpus
        result = plan(config, round(gib * GIB), gpus, flags, version, calibration)
    except PlanError as error:
        assert str(error)
        return
    json.dumps(result.to_json())
    assert result.verdict in {"fits", "pool_init_oom", "cuda_graph_oom", "invalid_argument",
                              "mamba_cache_exhausted"}  # fmt: skip
    for suggestion in result.suggestions:
        assert suggestion.plan.fits
        target = suggestion.plan.inputs["context_length"]
        cap = {**flags, **suggestion.set}.get("max-total-tokens")
        assert suggestion.plan.max_total_num_tokens >= min(target, cap or target)


# --------------------------------------------------------------------------- the CLI


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "exporter.cli", "plan", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def config_path(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN36))
    return path


SGLANG_FLAGS = [
    "--mem-fraction-static", "0.85", "--context-length", "32768", "--speculative-algo", "NEXTN",
    "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "4", "--tp-size=2",
]  # fmt: skip


def test_cli_json(config_path):
    incident = str(GOLDEN / "sglang-0.5.9-pool-init-oom-incident.log")
    done = cli("--json", "--model-config", str(config_path), "--gpu-memory-gib", "47.53",
               "--gpus", "2", "--calibrate-from", incident, "--", *SGLANG_FLAGS)  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data.keys() >= {
        "verdict",
        "budget",
        "max_total_num_tokens",
        "mamba_cache_slots",
        "max_running_requests",
        "headroom_bytes",
        "what_ate_the_budget",
        "suggestions",
    }
    assert data["verdict"] == "pool_init_oom"
    assert data["max_total_num_tokens"] == -96128
    assert data["budget"][0] == {
        "name": "free_before_weights",
        "bytes": round(46.86 * GIB),
        "explanation": "free GPU memory per rank before the weights load (the log)",
    }
    assert data["suggestions"][0]["set"] == {"max-running-requests": 32}
    assert data["calibration"]["weights"] == round(25.56 * GIB)


def test_cli_table(config_path):
    done = cli("--model-config", str(config_path.parent), "--gpu-memory-gib", "47.53",
               "--gpus", "2", "--", *SGLANG_FLAGS)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("SGLang 0.5.9: pool_init_oom  (estimated")
    assert re.search(r"speculative_reservation\s+13\.76 GiB", done.stdout)
    assert "what ate the budget:   speculative_reservation" in done.stdout
    assert "1. --max-running-requests 32: fits" in done.stdout


def test_cli_bad_inputs_exit_1_with_a_message(config_path, tmp_path):
    missing = cli("--model-config", str(tmp_path / "nope.json"), "--gpu-memory-gib", "24")
    assert missing.returncode == 1
    assert "cannot read" in missing.stderr and "nope.json" in missing.stderr
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    assert cli("--model-config", str(broken), "--gpu-memory-gib", "24").returncode == 1
    bad = cli("--model-config", str(config_path), "--gpu-memory-gib", "lots")
    assert (bad.returncode, "--gpu-memory-gib needs a number" in bad.stderr) == (1, True)
    flag = cli("--model-config", str(config_path), "--gpu-memory-gib", "24", "--",
               "--mem-fraction-static", "high")  # fmt: skip
    assert flag.returncode == 1 and "--mem-fraction-static needs a number" in flag.stderr
    log = cli("--model-config", str(config_path), "--gpu-memory-gib", "24",
              "--calibrate-from", str(tmp_path / "none.log"))  # fmt: skip
    assert log.returncode == 1 and "none.log" in log.stderr
