"""A Hugging Face ``config.json`` read into the shape SGLang's sizing needs: layers, heads,
the linear-attention state, the context length and the parameter counts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from exporter.diagnosis.planner.types import PlanError

SSM_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class GatedDeltaNet:
    key_heads: int
    value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int


@dataclass(frozen=True)
class Model:
    """What the sizing needs from a Hugging Face ``config.json``."""

    architecture: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    v_head_dim: int
    mla: tuple[int, int] | None  # (kv_lora_rank, qk_rope_head_dim)
    kv_layers: tuple[int, ...]  # the layers that hold KV (hybrid: full attention only)
    gdn: GatedDeltaNet | None
    ssm_dtype: str | None  # the config's mamba_ssm_dtype
    context_length: int
    vocab_hidden: int  # vocab_size x hidden_size: one embedding table
    embedding_params: int
    layer_params: int  # everything else of the target, vision tower included
    draft_layers: int  # MTP / NextN layers the checkpoint carries
    draft_layer_params: int  # one draft's layers and its input projection
    multimodal: bool
    vit_shape: tuple[int, int] | None  # (layers, hidden) as the default fraction reads them
    linear_bytes: float | None  # quantized weights: bytes per linear parameter


def read_model(config: Mapping[str, Any]) -> Model:
    """The model as SGLang sees it; the nested ``text_config`` of VLM checkpoints wins."""
    if not isinstance(config, Mapping):
        raise PlanError("the model config is not a JSON object")
    text = {**config, **(config.get("text_config") or {})}
    architectures = config.get("architectures") or text.get("architectures") or ["unknown"]
    hidden = _config_int(text, "hidden_size", "d_model", "n_embd")
    layers = _config_int(text, "num_hidden_layers", "n_layer", "num_layers")
    heads = _config_int(text, "num_attention_heads", "n_head")
    if text.get("multi_query"):
        kv_heads = 1
    else:
        kv_heads = _config_int(text, "num_key_value_heads", "num_kv_heads", default=heads)
    head_dim = _config_int(text, "head_dim", default=hidden // heads)
    mla = None
    if text.get("kv_lora_rank"):
        mla = (_config_int(text, "kv_lora_rank"), _config_int(text, "qk_rope_head_dim"))
    v_head_dim = _config_int(text, "v_head_dim", default=head_dim)
    gdn, kv_layers = _linear_attention(text, layers, str(architectures[0]))
    vision = config.get("vision_config")
    draft_layers = _config_int(
        text, "num_nextn_predict_layers", "mtp_num_hidden_layers", default=0, minimum=0
    )
    embedding, layer_params, draft_layer = _parameters(
        text, hidden, layers, heads, kv_heads, head_dim, kv_layers, gdn, vision
    )
    ssm = text.get("mamba_ssm_dtype")
    return Model(
        architecture=str(architectures[0]),
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=v_head_dim,
        mla=mla,
        kv_layers=kv_layers,
        gdn=gdn,
        ssm_dtype=ssm if ssm in SSM_DTYPE_BYTES else None,
        context_length=_context_length(text),
        vocab_hidden=_config_int(text, "vocab_size", default=32000) * hidden,
        embedding_params=embedding,
        layer_params=layer_params,
        draft_layers=draft_layers,
        draft_layer_params=draft_layer,
        multimodal=isinstance(vision, Mapping),
        vit_shape=_vit_shape(vision),
        linear_bytes=_quantized_bytes(config.get("quantization_config")),
    )


def _linear_attention(
    text: Mapping[str, Any], layers: int, architecture: str
) -> tuple[GatedDeltaNet | None, tuple[int, ...]]:
    """The Gated DeltaNet state, if any, and the layers that keep a KV cache."""
    if any(key in text for key in ("mamba_num_heads", "hybrid_override_pattern", "mamba_d_ssm")):
        raise PlanError(
            f"{architecture}: only Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5) "
            "is modelled, not this architecture's state"
        )
    gdn = None
    kv_layers = tuple(range(layers))
    if "linear_num_value_heads" in text:
        gdn = GatedDeltaNet(
            key_heads=_config_int(text, "linear_num_key_heads"),
            value_heads=_config_int(text, "linear_num_value_heads"),
            key_head_dim=_config_int(text, "linear_key_head_dim"),
            value_head_dim=_config_int(text, "linear_value_head_dim"),
            conv_kernel=_config_int(text, "linear_conv_kernel_dim", default=4),
        )
        kv_layers = _full_attention_layers(text, layers)
        if len(kv_layers) == layers:  # no linear layer: an ordinary model
            gdn = None
    if not kv_layers:
        raise PlanError(f"{architecture}: no full-attention layer holds a KV cache")
    return gdn, kv_layers


def _vit_shape(vision: object) -> tuple[int, int] | None:
    # SGLang reads num_hidden_layers and falls back to 24, even where the vision config
    # calls it "depth" (server_args.py:5493).
    if not isinstance(vision, Mapping):
        return None
    return int(vision.get("num_hidden_layers", 24)), int(vision.get("hidden_size", 1024))


def _config_int(
    config: Mapping[str, Any], *keys: str, default: int | None = None, minimum: int = 1
) -> int:
    for key in keys:
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
            raise PlanError(f"model config: {key} = {value!r} is not a whole number")
        if value < minimum:
            raise PlanError(f"model config: {key} = {value} is below {minimum}")
        return int(value)
    if default is None:
        raise PlanError(f"model config: no {' / '.join(keys)}")
    return default


def _full_attention_layers(text: Mapping[str, Any], layers: int) -> tuple[int, ...]:
    """Qwen3-Next / Qwen3.5: layer l is full attention iff (l + 1) % interval == 0, unless
    the config lists ``layer_types`` (configs/qwen3_next.py:255-280)."""
    types = text.get("layer_types") or text.get("layers_block_type")
    if isinstance(types, list):
        if len(types) != layers:
            raise PlanError(f"model config: {len(types)} layer_types for {layers} layers")
        return tuple(i for i, kind in enumerate(types) if kind in ("full_attention", "attention"))
    interval = _config_int(text, "full_attention_interval", default=4)
    return tuple(layer for layer in range(layers) if (layer + 1) % interval == 0)


def _context_length(text: Mapping[str, Any]) -> int:
    """hf_transformers_utils.get_context_length: the first length key, times a RoPE factor
    unless the scaling names its original length or is llama3's."""
    scaling = text.get("rope_scaling")
    factor = 1.0
    if (
        isinstance(scaling, Mapping)
        and "original_max_position_embeddings" not in scaling
        and scaling.get("rope_type") != "llama3"
    ):
        factor = float(scaling.get("factor") or 1)
    for key in (
        "max_sequence_length",
        "seq_length",
        "max_seq_len",
        "model_max_length",
        "max_position_embeddings",
    ):
        value = text.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return max(1, int(factor * value))
    return 2048


def _quantized_bytes(quantization: object) -> float | None:
    if not isinstance(quantization, Mapping):
        return None
    bits = quantization.get("bits") or quantization.get("weight_bits")
    if isinstance(bits, int) and bits > 0:
        return bits / 8
    method = str(quantization.get("quant_method", "")).lower()
    if "fp8" in method:
        return 1.0
    if method in ("awq", "gptq", "mxfp4", "bitsandbytes"):
        return 0.5
    return None


def _parameters(
    text: Mapping[str, Any],
    hidden: int,
    layers: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    kv_layers: Sequence[int],
    gdn: GatedDeltaNet | None,
    vision: object,
) -> tuple[int, int, int]:
    """(embedding, other, one draft layer) parameter counts of the whole model. Norms and
    biases are left out: they are a few hundred thousand of billions."""
    vocab = _config_int(text, "vocab_size", default=32000)
    embedding = vocab * hidden * (1 if text.get("tie_word_embeddings") else 2)
    if text.get("kv_lora_rank"):
        nope = _config_int(text, "qk_nope_head_dim")
        rope = _config_int(text, "qk_rope_head_dim")
        v_dim = _config_int(text, "v_head_dim")
        lora = _config_int(text, "kv_lora_rank")
        q_lora = text.get("q_lora_rank")
        query = (
            hidden * q_lora + q_lora * heads * (nope + rope)
            if isinstance(q_lora, int) and q_lora > 0
            else hidden * heads * (nope + rope)
        )
        attention = query + hidden * (lora + rope) + lora * heads * (nope + v_dim)
        attention += heads * v_dim * hidden
    else:
        gate = 2 if text.get("attn_output_gate") else 1
        attention = hidden * (heads * head_dim * gate + 2 * kv_heads * head_dim)
        attention += heads * head_dim * hidden
    linear = 0
    if gdn is not None:
        keys = gdn.key_heads * gdn.key_head_dim
        values = gdn.value_heads * gdn.value_head_dim
        linear = hidden * (2 * keys + 2 * values + 2 * gdn.value_heads) + values * hidden
        linear += (2 * keys + values) * gdn.conv_kernel
    dense_mlp = 3 * hidden * _config_int(text, "intermediate_size", default=4 * hidden)
    experts = text.get("num_experts") or text.get("n_routed_experts") or 0
    moe_mlp = dense_mlp
    dense_layers = set(range(layers))
    if isinstance(experts, int) and experts > 0:
        expert = 3 * hidden * _config_int(text, "moe_intermediate_size", default=hidden)
        shared = 3 * hidden * _config_int(text, "shared_expert_intermediate_size", default=1)
        if text.get("n_shared_experts"):
            shared = int(text["n_shared_experts"]) * expert
        moe_mlp = experts * expert + shared + hidden * experts
        first_dense = _config_int(text, "first_k_dense_replace", default=0, minimum=0)
        mlp_only = set(text.get("mlp_only_layers") or ())
        dense_layers = {i for i in range(layers) if i < first_dense or i in mlp_only}
    kv = set(kv_layers)
    total = sum(
        (attention if i in kv else linear) + (dense_mlp if i in dense_layers else moe_mlp)
        for i in range(layers)
    )
    draft_layer = attention + moe_mlp + 2 * hidden * hidden  # plus the eh_proj/fc input
    return embedding, total + _vision_parameters(vision, hidden), draft_layer


def _vision_parameters(vision: object, text_hidden: int) -> int:
    """A ViT with a patch-merger into the language model (Qwen-VL style)."""
    if not isinstance(vision, Mapping):
        return 0
    hidden = int(vision.get("hidden_size", 1024))
    depth = int(vision.get("depth") or vision.get("num_hidden_layers") or 24)
    mlp = int(vision.get("intermediate_size", 4 * hidden))
    merged = hidden * int(vision.get("spatial_merge_size", 2)) ** 2
    out = int(vision.get("out_hidden_size", text_hidden))
    mergers = 1 + len(vision.get("deepstack_visual_indexes") or ())
    patch = 3 * 2 * int(vision.get("patch_size", 16)) ** 2 * hidden
    return (
        patch + depth * (4 * hidden * hidden + 2 * hidden * mlp) + mergers * merged * (merged + out)
    )
