"""Bytes per KV cell, per request's recurrent state and per rank's weights, as SGLang
counts them (get_cell_size_per_token, mamba_cache_per_req, the weight loader)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from exporter.diagnosis.planner.model import SSM_DTYPE_BYTES, Model
from exporter.diagnosis.planner.types import PlanError

if TYPE_CHECKING:
    from exporter.diagnosis.planner.launch import Launch

KV_DTYPES = {
    "auto": None,
    "bf16": 2,
    "bfloat16": 2,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "mxfp8": 1,
    "fp4_e2m1": 0,
    "nvfp4": 0,
    "fp4_mx_block16": 0,
}


def kv_cell_bytes(model: Model, launch: Launch, layers: int | None = None) -> int:
    """KV bytes per token on one rank (get_cell_size_per_token, §4.2): MLA keeps one
    latent (kv_lora_rank + qk_rope_head_dim) per layer, replicated across TP; MHA/GQA
    keeps K and V for max(1, kv_heads // tp) heads. fp4 packs two values a byte plus
    one scale per 16."""
    layers = _kv_layers_per_rank(model, launch) if layers is None else layers
    size = KV_DTYPES[launch.kv_cache_dtype]
    fp4 = size == 0
    if size is None:
        size = 4 if launch.float32 else 2
    size = max(size, 1)
    if model.mla is not None:
        width = model.mla[0] + model.mla[1]
        cell = width * layers * size
        return cell // 2 + width // 16 * layers * size if fp4 else cell
    heads = max(1, model.kv_heads // launch.attn_tp)
    cell = heads * (model.head_dim + model.v_head_dim) * layers * size
    return cell // 2 + heads * model.head_dim * layers * 2 * size // 16 if fp4 else cell


def pool_cell_bytes(model: Model, launch: Launch) -> int:
    """The cell SGLang divides the KV budget by: some versions charge an EAGLE/MTP draft's
    KV layers in the target's cell, others size the draft's pool apart (``Sizer``)."""
    cell = kv_cell_bytes(model, launch)
    charged = launch.sizer.draft_kv_in_target_cell
    if charged and launch.speculative in ("EAGLE", "EAGLE3", "STANDALONE"):
        cell += int(cell * draft_kv_layers(model, launch) / _kv_layers_per_rank(model, launch))
    return cell


def _kv_layers_per_rank(model: Model, launch: Launch) -> int:
    """KV layers of the busiest pipeline stage (SGLang MIN-reduces tokens over stages)."""
    if launch.pp == 1:
        return len(model.kv_layers)
    base, extra = divmod(model.layers, launch.pp)
    kv = set(model.kv_layers)
    start, most = 0, 0
    for stage in range(launch.pp):
        size = base + (1 if stage >= launch.pp - extra else 0)
        most = max(most, sum(1 for layer in range(start, start + size) if layer in kv))
        start += size
    return most


def state_bytes_per_request(model: Model, launch: Launch) -> int:
    """One request slot's recurrent state on one rank, all linear layers (mamba_cache_per_req,
    §4.3): conv (bf16) + SSM (float32 unless --mamba-ssm-dtype or the config say)."""
    gdn = model.gdn
    if gdn is None:
        return 0
    tp = launch.attn_tp
    groups = gdn.key_heads + (tp - gdn.key_heads if gdn.key_heads % tp else 0)
    conv_dim = gdn.value_head_dim * gdn.value_heads + 2 * groups * gdn.key_head_dim
    if conv_dim % tp or gdn.value_heads % tp:
        raise PlanError(
            f"--tp-size {tp} does not divide the linear-attention heads "
            f"({gdn.value_heads} value heads, conv width {conv_dim})"
        )
    conv = conv_dim // tp * (gdn.conv_kernel - 1) * 2
    ssm = gdn.value_heads // tp * gdn.value_head_dim * gdn.key_head_dim * ssm_bytes(model, launch)
    return (conv + ssm) * (model.layers - len(model.kv_layers))


def ssm_bytes(model: Model, launch: Launch) -> int:
    return SSM_DTYPE_BYTES[launch.mamba_ssm_dtype or model.ssm_dtype or "float32"]


def weight_bytes(model: Model, launch: Launch) -> int:
    """The target's weights per rank: parameters x bytes / (tp x pp)."""
    dtype = 4 if launch.float32 else 2
    linear = _linear_bytes(model, launch, dtype)
    total = model.embedding_params * dtype + model.layer_params * linear
    return round(total / (launch.tp * launch.pp))


def _linear_bytes(model: Model, launch: Launch, dtype: int) -> float:
    if launch.quantization:
        return 1.0 if "fp8" in launch.quantization else 0.5
    return model.linear_bytes or dtype


def draft_weight_bytes(model: Model, launch: Launch) -> int | None:
    """An MTP/NextN draft's weights per rank; None when the draft is another model whose
    config is not at hand. Where the draft first builds its own embedding and LM head and
    frees them only after its pool is sized (0.5.9, §4.7.5), that peak counts."""
    if launch.speculative in (None, "NGRAM"):
        return 0
    separate = launch.draft_model_path not in (None, launch.model_path)
    if separate or not model.draft_layers or launch.speculative == "STANDALONE":
        return None
    dtype = 4 if launch.float32 else 2
    total = model.draft_layers * model.draft_layer_params * _linear_bytes(model, launch, dtype)
    if launch.sizer.draft_builds_own_embedding:
        total += 2 * model.vocab_hidden * dtype
    return round(total / launch.tp)


def draft_kv_layers(model: Model, launch: Launch) -> int:
    """Layers of the draft's KV: the MTP layers (1 for Qwen3.5, forced by model_config.py),
    else one EAGLE layer; NGRAM has no draft model."""
    if launch.speculative in (None, "NGRAM"):
        return 0
    return max(1, model.draft_layers)
