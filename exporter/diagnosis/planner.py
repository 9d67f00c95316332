"""SGLang's memory-pool arithmetic for 0.5.9 and 0.5.23: will a launch fit, what ate the
budget, and the cheapest flag changes that make it fit. Pure: no I/O, no clock.

It follows the sizing code step by step (shared/reference/sglang-internals.md §4; 0.5.9
``model_runner_kv_cache_mixin.py``, 0.5.23 ``mem_cache/kv_cache_configurator.py``), in the
same float GiB arithmetic, so that with the free-memory numbers of a real attempt's log
(``calibrate``) the token count is SGLang's own, up to the log's 0.01 GiB rounding. Without a
log the free memory comes from the GPU size and the weights from the config: an estimate.

Per GPU rank, the budget is spent in this order:

    P  free before weights         (after the CUDA context and NCCL)
    W  weights                     (0.5.23: target and draft)
    R  static headroom             (1 - mem_fraction_static) * P, kept for graphs/activations
       multimodal reservation      (0.5.23)
       speculative reservation     intermediate recurrent state per (request, draft token)
       mamba state                 one recurrent state per slot
       KV cache                    what is left, in whole tokens
and out of R, unbudgeted: the request table, 0.5.9's padding slots and its whole draft model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from exporter.diagnosis.classify import detect_version
from exporter.diagnosis.taxonomy import FailureClass
from exporter.logs.events import Event, EventKind

GIB = 1 << 30
MIB = 1 << 20
VERSIONS = ("0.5.9", "0.5.23")
FITS = "fits"
DEFAULT_MAX_FRACTION = 0.95

# Free memory lost before weights load, when no log says: the CUDA context, and NCCL's
# buffers with more than one rank. 0.67 GiB is the reference's figure for 2x RTX A6000
# (47.53 GiB total, 46.86 free before weights, §4.10).
CUDA_CONTEXT_BYTES = GIB // 2
NCCL_BYTES = round(0.17 * GIB)
# What SGLang reads as "GB" is rounded to 0.01 GiB in the log: each calibrated value is
# known to within half of that.
LOG_ROUNDING_BYTES = round(0.005 * GIB)

_SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
# 0.5.9 disables the radix cache for these with speculative decoding and no_buffer
# (server_args.py:1759-1763), which pins one state slot per running request.
_RADIX_OFF_WITH_SPEC = (
    "Qwen3NextForCausalLM",
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration",
)
_MAX_RUNNING_LADDER = (64, 48, 32, 24, 16, 12, 8, 6, 4, 3, 2, 1)

# Every flag read here, with its argparse aliases; argparse also takes any unique prefix.
_FLAG_NAMES: dict[str, str] = {
    name: name
    for name in (
        "mem-fraction-static",
        "context-length",
        "max-running-requests",
        "max-total-tokens",
        "max-prefill-tokens",
        "chunked-prefill-size",
        "page-size",
        "tp-size",
        "pp-size",
        "dp-size",
        "enable-dp-attention",
        "kv-cache-dtype",
        "dtype",
        "quantization",
        "device",
        "speculative-algorithm",
        "speculative-num-steps",
        "speculative-eagle-topk",
        "speculative-num-draft-tokens",
        "speculative-draft-model-path",
        "model-path",
        "speculative-ngram-max-match-window-size",
        "mamba-full-memory-ratio",
        "max-mamba-cache-size",
        "mamba-ssm-dtype",
        "mamba-scheduler-strategy",
        "mamba-radix-cache-strategy",
        "disable-radix-cache",
        "disable-overlap-schedule",
        "disable-cuda-graph",
        "cuda-graph-max-bs",
        "cuda-graph-max-bs-decode",
        "language-only",
        "mm-feature-transport",
    )
} | {
    "tensor-parallel-size": "tp-size",
    "pipeline-parallel-size": "pp-size",
    "data-parallel-size": "dp-size",
    "speculative-draft-model": "speculative-draft-model-path",
}
_SSM_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


class PlanError(ValueError):
    """The inputs describe no launch SGLang could attempt (a config without layers, more
    GPUs than given, a fraction outside (0, 1], ...)."""


@dataclass(frozen=True)
class Calibration:
    """Numbers one real attempt's log holds, per GPU rank (MIN over ranks, as SGLang)."""

    free_before_weights: int | None = None  # P, "Load weight begin. avail mem="
    free_after_weights: int | None = None  # A, after the target's "Load weight end"
    weights: int | None = None  # target weights, "mem usage="
    draft_weights: int | None = None  # a later "Load weight end": the draft model
    mem_fraction_static: float | None = None  # as resolved, from server_args
    max_running_requests: int | None = None
    kv_tokens: int | None = None  # "KV Cache is allocated. #tokens:"
    mamba_slots: int | None = None  # "Mamba Cache is allocated. max_mamba_cache_size:"
    free_after_pools: int | None = None  # "Memory pool end. avail mem="
    version: str | None = None

    def to_json(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


# The first of each per rank, and its field: what the pools came to.
_OBSERVED = {
    EventKind.KV_CACHE_ALLOCATED: "tokens",
    EventKind.MAMBA_CACHE_ALLOCATED: "slots",
    EventKind.MEMORY_POOL_END: "avail_bytes",
}


def calibrate(events: Iterable[Event], version: str | None = None) -> Calibration:
    """The memory numbers of one attempt's log (``read_log(text)[1]``).

    Per rank the first weight load is the target's; a second one is the draft's (0.5.23
    loads it before the pools, 0.5.9 after them). SGLang sizes with the MIN over ranks.
    """
    events = list(events)
    begin: dict[int, int] = {}
    after: dict[int, int] = {}
    weights: dict[int, int] = {}
    draft: dict[int, int] = {}
    observed: dict[EventKind, dict[int, int]] = {kind: {} for kind in _OBSERVED}
    fraction = running = None
    for event in events:
        rank = event.tp_rank or 0
        kind = event.kind
        if kind is EventKind.SERVER_ARGS and fraction is None:
            fraction = _optional(event.get("mem_fraction_static"), float)
            running = _optional(event.get("max_running_requests"), int)
        elif kind is EventKind.WEIGHT_LOAD_BEGIN:
            begin.setdefault(rank, int(event.get("avail_bytes")))
        elif kind is EventKind.WEIGHT_LOAD_END and rank not in after:
            after[rank] = int(event.get("avail_bytes"))
            weights[rank] = int(event.get("usage_bytes"))
        elif kind is EventKind.WEIGHT_LOAD_END:
            draft.setdefault(rank, int(event.get("usage_bytes")))
        elif kind in observed:
            observed[kind].setdefault(rank, int(event.get(_OBSERVED[kind])))
    return Calibration(
        free_before_weights=min(begin.values(), default=None),
        free_after_weights=min(after.values(), default=None),
        weights=max(weights.values(), default=None),
        draft_weights=max(draft.values(), default=None),
        mem_fraction_static=fraction,
        max_running_requests=running,
        kv_tokens=min(observed[EventKind.KV_CACHE_ALLOCATED].values(), default=None),
        mamba_slots=min(observed[EventKind.MAMBA_CACHE_ALLOCATED].values(), default=None),
        free_after_pools=min(observed[EventKind.MEMORY_POOL_END].values(), default=None),
        version=version or detect_version([], events),
    )


def _optional(value: object, cast: type) -> Any:
    return None if value is None else cast(value)


@dataclass(frozen=True)
class BudgetStep:
    name: str
    bytes: int
    explanation: str

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "bytes": self.bytes, "explanation": self.explanation}


@dataclass(frozen=True)
class Suggestion:
    """A flag change (``set`` adds or overrides, ``remove`` drops, as a config profile)
    and what the planner predicts for it."""

    change: str  # as typed on SGLang's command line
    set: dict[str, object]
    remove: tuple[str, ...]
    plan: Plan

    def to_json(self) -> dict[str, object]:
        return {
            "change": self.change,
            "set": self.set,
            "remove": list(self.remove),
            "verdict": self.plan.verdict,
            "max_total_num_tokens": self.plan.max_total_num_tokens,
            "mamba_cache_slots": self.plan.mamba_cache_slots,
            "max_running_requests": self.plan.max_running_requests,
            "headroom_bytes": self.plan.headroom_bytes,
        }


@dataclass(frozen=True)
class Plan:
    verdict: str  # FITS, or the FailureClass value SGLang would end in
    version: str
    budget: list[BudgetStep]
    max_total_num_tokens: int  # as SGLang computes it: <= 0 when the pool cannot be sized
    mamba_cache_slots: int | None
    max_running_requests: int
    headroom_bytes: int  # left in the static headroom for CUDA graphs and activations
    what_ate_the_budget: str | None  # the largest reservation before the KV cache
    suggestions: list[Suggestion] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    inputs: dict[str, object] = field(default_factory=dict)  # what the arithmetic used

    @property
    def fits(self) -> bool:
        return self.verdict == FITS

    def to_json(self) -> dict[str, object]:
        return {
            "verdict": self.verdict,
            "sglang_version": self.version,
            "budget": [step.to_json() for step in self.budget],
            "max_total_num_tokens": self.max_total_num_tokens,
            "mamba_cache_slots": self.mamba_cache_slots,
            "max_running_requests": self.max_running_requests,
            "headroom_bytes": self.headroom_bytes,
            "what_ate_the_budget": self.what_ate_the_budget,
            "suggestions": [s.to_json() for s in self.suggestions],
            "notes": self.notes,
            "inputs": self.inputs,
        }


# --------------------------------------------------------------------------- the model


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
    if any(key in text for key in ("mamba_num_heads", "hybrid_override_pattern", "mamba_d_ssm")):
        raise PlanError(
            f"{architectures[0]}: only Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5) "
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
        raise PlanError(f"{architectures[0]}: no full-attention layer holds a KV cache")
    vision = config.get("vision_config")
    context = _context_length(text)
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
        ssm_dtype=ssm if ssm in _SSM_DTYPE_BYTES else None,
        context_length=context,
        vocab_hidden=_config_int(text, "vocab_size", default=32000) * hidden,
        embedding_params=embedding,
        layer_params=layer_params,
        draft_layers=draft_layers,
        draft_layer_params=draft_layer,
        multimodal=isinstance(vision, Mapping),
        vit_shape=(
            # SGLang reads num_hidden_layers and falls back to 24, even where the vision
            # config calls it "depth" (server_args.py:5493).
            (int(vision.get("num_hidden_layers", 24)), int(vision.get("hidden_size", 1024)))
            if isinstance(vision, Mapping)
            else None
        ),
        linear_bytes=_quantized_bytes(config.get("quantization_config")),
    )


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


# --------------------------------------------------------------------------- the flags


@dataclass(frozen=True)
class Launch:
    """SGLang's flags as its ServerArgs resolves the ones the sizing reads."""

    version: str
    tp: int
    pp: int
    dp: int
    dp_attention: bool
    mem_fraction_static: float | None
    context_length: int | None
    max_running_requests: int | None  # as given
    max_total_tokens: int | None
    page_size: int
    kv_cache_dtype: str
    float32: bool
    quantization: str | None
    device: str
    speculative: str | None  # EAGLE (NEXTN's resolution), EAGLE3, STANDALONE, NGRAM
    steps: int
    topk: int
    draft_tokens: int  # D
    draft_model_path: str | None
    model_path: str | None
    mamba_ratio: float
    max_mamba_cache_size: int | None
    mamba_ssm_dtype: str | None
    mamba_strategy: str
    disable_radix_cache: bool
    disable_overlap: bool
    disable_cuda_graph: bool
    chunked_prefill_size: int | None
    max_prefill_tokens: int
    cuda_graph_max_bs: int | None
    language_only: bool
    mm_feature_transport: str | None

    @property
    def attn_tp(self) -> int:
        return max(1, self.tp // self.dp) if self.dp_attention else self.tp

    @property
    def attn_dp(self) -> int:
        return self.dp if self.dp_attention else 1


def normalize_flags(flags: Mapping[str, object]) -> dict[str, object]:
    """Flag names without ``--``, aliases and unique prefixes resolved the way argparse
    does (``speculative-algo`` is ``speculative-algorithm``); ``false`` drops a flag;
    names this planner does not read are kept as given."""
    normalized: dict[str, object] = {}
    for raw, value in flags.items():
        name = str(raw).lstrip("-").split("=", 1)[0]
        if name not in _FLAG_NAMES:
            targets = {target for option, target in _FLAG_NAMES.items() if option.startswith(name)}
            name = targets.pop() if len(targets) == 1 and name else name
        name = _FLAG_NAMES.get(name, name)
        if value is False or value is None:
            normalized.pop(name, None)
        else:
            normalized[name] = value
    return normalized


def read_launch(flags: Mapping[str, object], version: str, model: Model) -> Launch:
    flags = normalize_flags(flags)
    if version not in VERSIONS:
        raise PlanError(f"SGLang {version} is not modelled; use one of {', '.join(VERSIONS)}")
    speculative = flags.get("speculative-algorithm")
    if speculative is not None:
        speculative = str(speculative).upper()
        if speculative not in _SPEC_ALGORITHMS:
            raise PlanError(
                f"--speculative-algorithm {speculative} is not modelled "
                f"({', '.join(_SPEC_ALGORITHMS)} are)"
            )
        speculative = "EAGLE" if speculative == "NEXTN" else speculative
    steps, topk, draft_tokens = _speculative_shape(flags, speculative, model)
    fraction = _number(flags, "mem-fraction-static", float)
    if fraction is not None and not 0 < fraction <= 1:
        raise PlanError(f"--mem-fraction-static {fraction} is outside (0, 1]")
    ratio = _number(flags, "mamba-full-memory-ratio", float)
    if ratio is not None and ratio <= 0:
        raise PlanError(f"--mamba-full-memory-ratio {ratio} must be positive")
    strategy_flag = (
        "mamba-scheduler-strategy" if version == "0.5.9" else "mamba-radix-cache-strategy"
    )
    kv_dtype = str(flags.get("kv-cache-dtype", "auto")).lower()
    if kv_dtype not in _KV_DTYPES:
        raise PlanError(f"--kv-cache-dtype {kv_dtype} is not one of {', '.join(_KV_DTYPES)}")
    ssm = flags.get("mamba-ssm-dtype")
    if ssm is not None and ssm not in _SSM_DTYPE_BYTES:
        raise PlanError(f"--mamba-ssm-dtype {ssm} is not one of {', '.join(_SSM_DTYPE_BYTES)}")
    return Launch(
        version=version,
        tp=_number(flags, "tp-size", int, 1, minimum=1),
        pp=_number(flags, "pp-size", int, 1, minimum=1),
        dp=_number(flags, "dp-size", int, 1, minimum=1),
        dp_attention=bool(flags.get("enable-dp-attention")),
        mem_fraction_static=fraction,
        context_length=_number(flags, "context-length", _tokens, minimum=1),
        max_running_requests=_number(flags, "max-running-requests", int, minimum=1),
        max_total_tokens=_number(flags, "max-total-tokens", _tokens, minimum=1),
        page_size=_number(flags, "page-size", int, 1, minimum=1),
        kv_cache_dtype=kv_dtype,
        float32=str(flags.get("dtype", "auto")) in ("float", "float32"),
        quantization=_optional(flags.get("quantization"), str),
        device=str(flags.get("device", "cuda")),
        speculative=speculative,
        steps=steps,
        topk=topk,
        draft_tokens=draft_tokens,
        draft_model_path=_optional(flags.get("speculative-draft-model-path"), str),
        model_path=_optional(flags.get("model-path"), str),
        mamba_ratio=0.9 if ratio is None else ratio,
        max_mamba_cache_size=_number(flags, "max-mamba-cache-size", int, minimum=1),
        mamba_ssm_dtype=_optional(ssm, str),
        mamba_strategy=str(flags.get(strategy_flag, "auto")),
        disable_radix_cache=bool(flags.get("disable-radix-cache")),
        disable_overlap=bool(flags.get("disable-overlap-schedule")),
        disable_cuda_graph=bool(flags.get("disable-cuda-graph")),
        chunked_prefill_size=_number(flags, "chunked-prefill-size", int, minimum=-1),
        max_prefill_tokens=_number(flags, "max-prefill-tokens", int, 16384, minimum=1),
        cuda_graph_max_bs=_number(
            flags,
            "cuda-graph-max-bs" if version == "0.5.9" else "cuda-graph-max-bs-decode",
            int,
            minimum=1,
        ),
        language_only=bool(flags.get("language-only")),
        mm_feature_transport=_optional(flags.get("mm-feature-transport"), str),
    )


def _speculative_shape(
    flags: Mapping[str, object], speculative: str | None, model: Model
) -> tuple[int, int, int]:
    """(steps, topk, draft tokens D). auto_choose_speculative_params gives (3, 1, 4), or
    (5, 4, 8) for Llama; topk 1 forces D = steps + 1; NGRAM drafts its match window."""
    if speculative is None:
        return 0, 1, 0
    if speculative == "NGRAM":
        window = _number(flags, "speculative-ngram-max-match-window-size", int, 12, minimum=1)
        return 0, 1, _number(flags, "speculative-num-draft-tokens", int, window, minimum=1)
    default = (5, 4, 8) if model.architecture == "LlamaForCausalLM" else (3, 1, 4)
    steps = _number(flags, "speculative-num-steps", int, default[0], minimum=1)
    topk = _number(flags, "speculative-eagle-topk", int, default[1], minimum=1)
    tokens = _number(flags, "speculative-num-draft-tokens", int, default[2], minimum=1)
    return steps, topk, steps + 1 if topk == 1 else tokens


def _number(
    flags: Mapping[str, object],
    name: str,
    cast: Any,
    default: Any = None,
    minimum: float | None = None,
) -> Any:
    value = flags.get(name)
    if value is None:
        return default
    try:
        if isinstance(value, (bool, list, tuple)):
            raise ValueError
        number = cast(value)
        if cast is int and isinstance(value, float) and value != int(value):
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        raise PlanError(f"--{name} needs a number, got {value!r}") from None
    if isinstance(number, float) and not math.isfinite(number):
        raise PlanError(f"--{name} needs a finite number, got {value!r}")
    if minimum is not None and number < minimum:
        raise PlanError(f"--{name} {number} is below {minimum}")
    return number


def _tokens(value: object) -> int:
    """A token count; 0.5.23 also takes SI/IEC suffixes (32k, 32Ki)."""
    text, scale = str(value).strip(), 1
    for suffix, factor in (("Ki", 1 << 10), ("Mi", 1 << 20), ("k", 1000), ("M", 10**6)):
        if text.endswith(suffix):
            text, scale = text[: -len(suffix)], factor
            break
    number = float(text) * scale
    if number != int(number):
        raise ValueError(text)
    return int(number)


# --------------------------------------------------------------------------- sizes


_KV_DTYPES = {
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
    size = _KV_DTYPES[launch.kv_cache_dtype]
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
    """The cell SGLang divides the KV budget by: 0.5.23 charges an EAGLE/MTP draft's KV
    layers in the target's cell (pool_configurator.py:257-315); 0.5.9 sizes the draft's
    pool apart, out of the headroom."""
    cell = kv_cell_bytes(model, launch)
    if launch.version == "0.5.23" and launch.speculative in ("EAGLE", "EAGLE3", "STANDALONE"):
        cell += int(cell * _draft_kv_layers(model, launch) / _kv_layers_per_rank(model, launch))
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
    ssm = gdn.value_heads // tp * gdn.value_head_dim * gdn.key_head_dim * _ssm_bytes(model, launch)
    return (conv + ssm) * (model.layers - len(model.kv_layers))


def _ssm_bytes(model: Model, launch: Launch) -> int:
    return _SSM_DTYPE_BYTES[launch.mamba_ssm_dtype or model.ssm_dtype or "float32"]


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
    config is not at hand. 0.5.9's Qwen3.5/DeepSeek MTP first builds its own embedding and
    LM head and frees them only after its pool is sized (§4.7.5): that peak counts."""
    if launch.speculative in (None, "NGRAM"):
        return 0
    separate = launch.draft_model_path not in (None, launch.model_path)
    if separate or not model.draft_layers or launch.speculative == "STANDALONE":
        return None
    dtype = 4 if launch.float32 else 2
    total = model.draft_layers * model.draft_layer_params * _linear_bytes(model, launch, dtype)
    if launch.version == "0.5.9":
        total += 2 * model.vocab_hidden * dtype
    return round(total / launch.tp)


def _draft_kv_layers(model: Model, launch: Launch) -> int:
    """Layers of the draft's KV: the MTP layers (1 for Qwen3.5, forced by model_config.py),
    else one EAGLE layer; NGRAM has no draft model."""
    if launch.speculative in (None, "NGRAM"):
        return 0
    return max(1, model.draft_layers)


def default_mem_fraction(model: Model, launch: Launch, gpu_memory_bytes: int) -> float:
    """SGLang's --mem-fraction-static when the flag is absent (§4.8): the GPU size less a
    reserve for activations, CUDA graphs and parallelism, then scaled down for a ViT."""
    total = gpu_memory_bytes / MIB
    reserved = _reserve_mib(model, launch, total, activations=True)
    if total > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    if launch.version == "0.5.9" and launch.speculative is not None:
        reserved += {"STANDALONE": 6 * 1024, "NGRAM": 0}.get(launch.speculative, 2 * 1024)
    fraction = round((total - reserved) / total, 3)
    if model.vit_shape is not None and not launch.language_only:
        layers, hidden = model.vit_shape
        complexity = layers * hidden**2 / (24 * 1024**2)
        fraction *= 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (complexity - 1.0)))
    return fraction


def _gpu_defaults(launch: Launch, total_mib: float) -> tuple[int, int]:
    """(chunked prefill size, decode CUDA-graph max batch size) by GPU size (§4.8)."""
    small_tp = launch.tp < 4
    if total_mib < 20 * 1024:
        chunked, max_bs = 2048, 8
    elif total_mib < 35 * 1024:
        old = launch.version == "0.5.9"
        chunked = 2048 if old else 4096
        max_bs = (24 if old else 48) if small_tp else (80 if old else 160)
    elif total_mib < 60 * 1024:
        chunked, max_bs = 4096, 32 if small_tp else 160
    elif total_mib < 160 * 1024:
        chunked, max_bs = 8192, 256 if small_tp else 512
    else:
        chunked, max_bs = 16384, 512
    if launch.chunked_prefill_size is not None:
        chunked = launch.chunked_prefill_size
    if launch.cuda_graph_max_bs is not None:
        max_bs = launch.cuda_graph_max_bs
    elif launch.version == "0.5.23" and launch.max_running_requests is not None:
        max_bs = min(max_bs, launch.max_running_requests)
    return chunked, max_bs


def _reserve_mib(model: Model, launch: Launch, total_mib: float, activations: bool) -> float:
    """SGLang's reserve for what the static fraction leaves out; without the activation
    term it is the part that is not a prefill chunk's transient working set."""
    chunked, max_bs = _gpu_defaults(launch, total_mib)
    reserved = 512 + launch.tp * launch.pp / 8 * 1024
    if activations:
        reserved += max(chunked if chunked > 0 else launch.max_prefill_tokens, 2048) * 1.5
    if launch.device == "cpu":
        return reserved
    if launch.dp_attention:
        reserved += max_bs * launch.dp * (4.5 if max_bs > 300 else 3)
    # 0.5.9's default reserves graph memory even with graphs disabled; the graphs do not.
    if launch.disable_cuda_graph and (launch.version == "0.5.23" or not activations):
        return reserved
    reserved += max_bs * 2
    if launch.version == "0.5.23":
        if model.mla is not None:
            reserved += 1.5 * 1024
        else:
            prefill_max = chunked if chunked > 0 else launch.max_prefill_tokens
            if launch.max_total_tokens is not None:
                prefill_max = min(prefill_max, launch.max_total_tokens)
            reserved += len(_prefill_graph_sizes(prefill_max)) * 8
    return reserved


def _prefill_graph_sizes(max_bs: int) -> list[int]:
    """0.5.23's prefill CUDA-graph token buckets (cuda_graph_hook.py:480-497)."""
    sizes = [
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1025, 64),
        *range(1280, 4097, 256),
        *range(4608, max_bs + 1, 512),
    ]
    return [size for size in sizes if size <= max_bs]


# --------------------------------------------------------------------------- the pools


@dataclass
class _Sizing:
    """One run of SGLang's sizing; reservations in SGLang's own float GiB."""

    verdict: str = FITS
    tokens: int = 0
    slots: int | None = None
    max_num_reqs: int = 0
    running: int = 0
    spec_reserve: float = 0.0
    mamba: float = 0.0
    multimodal: float = 0.0
    kv_budget: float = 0.0  # GiB SGLang turned into tokens
    capped: int | None = None  # 0.5.23: max_running_requests capped by the state cache
    failure: str = ""


def _mamba_ratio(launch: Launch, radix_off: bool) -> int:
    """State slots per running request (§4.4 step 5, §4.5 step 4)."""
    if radix_off:
        return 1
    if launch.version == "0.5.9":
        if launch.mamba_strategy == "extra_buffer":
            return 3 + (1 if launch.speculative else 2)
        return 3
    strategy = launch.mamba_strategy
    overlap = not launch.disable_overlap
    if strategy == "auto":
        strategy = "extra_buffer" if overlap or launch.page_size > 1 else "no_buffer"
    if strategy == "no_buffer":
        return 3
    return 3 + (2 if overlap and strategy == "extra_buffer" else 1)


def _radix_off(model: Model, launch: Launch) -> bool:
    if launch.disable_radix_cache:
        return True
    return (
        launch.version == "0.5.9"
        and model.gdn is not None
        and launch.speculative is not None
        and launch.mamba_strategy != "extra_buffer"
        and model.architecture in _RADIX_OFF_WITH_SPEC
    )


def _size_0_5_9(
    model: Model, launch: Launch, free: float, after: float, fraction: float, n: int | None
) -> _Sizing:
    """ModelRunner.init_memory_pool → profile_max_num_token, handle_max_mamba_cache."""
    sizing = _Sizing()
    cell = pool_cell_bytes(model, launch)
    state = state_bytes_per_request(model, launch)
    rest = after - free * (1 - fraction)
    radix_off = _radix_off(model, launch)
    if model.gdn is not None:
        if launch.speculative is not None and n is not None:
            sizing.spec_reserve = state * (n // launch.attn_dp) * launch.draft_tokens / GIB
            rest -= sizing.spec_reserve
        if launch.max_mamba_cache_size is not None:
            slots = launch.max_mamba_cache_size // launch.attn_dp
        elif radix_off and n is not None:
            slots = n // launch.attn_dp
        else:
            raw = rest * launch.mamba_ratio / (1 + launch.mamba_ratio)
            slots = int((raw * GIB) // state)
        sizing.slots = slots
        sizing.mamba = slots * state / GIB
        rest -= sizing.mamba
    sizing.kv_budget = rest
    profiled = int(rest * GIB) // cell
    context = launch.context_length or model.context_length
    reqs = n if n is not None else min(max(int(profiled / context * 512), 2048), 4096)
    if sizing.slots is not None:
        reqs = min(reqs, sizing.slots // _mamba_ratio(launch, radix_off))
    tokens = profiled if launch.max_total_tokens is None else min(profiled, launch.max_total_tokens)
    tokens = tokens // launch.page_size * launch.page_size
    sizing.tokens, sizing.max_num_reqs = tokens, reqs
    sizing.running = max(0, min(tokens // 2 if n is None else n // launch.attn_dp, reqs))
    if tokens <= 0:
        sizing.verdict = FailureClass.POOL_INIT_OOM.value
        sizing.failure = (
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
        )
    elif sizing.running <= 0:
        # The pool starts, but no request can ever get a state slot.
        sizing.verdict = FailureClass.MAMBA_CACHE_EXHAUSTED.value
        sizing.failure = "no running request can get a linear-attention state slot"
    return sizing


def _size_0_5_23(
    model: Model, launch: Launch, free: float, after: float, fraction: float, n: int | None
) -> _Sizing:
    """KVCacheConfigurator._profile_available_bytes → _handle_max_mamba_cache,
    then resolve_max_num_reqs (kv_cache_configurator.py:2990-3409)."""
    sizing = _Sizing()
    cell = pool_cell_bytes(model, launch)
    state = state_bytes_per_request(model, launch)
    if model.multimodal and not launch.language_only:
        megabytes = 100 + (1024 if launch.mm_feature_transport in ("cuda_ipc", "cuda_vmm") else 0)
        sizing.multimodal = megabytes / 1024
    rest = after - free * (1 - fraction) - sizing.multimodal
    radix_off = _radix_off(model, launch)
    ratio = _mamba_ratio(launch, radix_off)
    spec = launch.speculative is not None and n is not None
    draft = launch.draft_tokens
    if model.gdn is not None:
        requests = max(1, (n or 1) // launch.attn_dp)
        if launch.max_mamba_cache_size is not None:
            slots = launch.max_mamba_cache_size // launch.attn_dp
            if spec:
                sizing.spec_reserve = state * (min(requests, slots // ratio) + 1) * draft / GIB
        elif radix_off and n is not None:
            slots = requests
            if spec:
                sizing.spec_reserve = state * (slots + 1) * draft / GIB
        else:
            budget = rest * launch.mamba_ratio / (1 + launch.mamba_ratio) * GIB
            if spec:
                slots = int((budget - state * (1 + draft)) // (state * (1 + draft / ratio)))
                capped = min(requests, slots // ratio)
                sizing.spec_reserve = state * (capped + 1) * draft / GIB
            else:
                slots = int((budget - state) // state)
        rest -= sizing.spec_reserve
        sizing.slots = slots
        if slots <= 0:
            sizing.verdict = FailureClass.POOL_INIT_OOM.value
            sizing.failure = (
                "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) "
                "state cache."
            )
            sizing.kv_budget = rest
            return sizing
        sizing.mamba = (slots + 1) * state / GIB
        rest -= sizing.mamba
    sizing.kv_budget = rest
    if rest <= 0:
        sizing.verdict = FailureClass.POOL_INIT_OOM.value
        sizing.failure = (
            "ValueError: Loaded weights leave no GPU memory for the KV cache under "
            f"--mem-fraction-static={fraction}."
        )
        sizing.tokens = int(rest * GIB) // cell
        return sizing
    tokens = int(rest * GIB) // cell
    tokens = tokens // launch.page_size * launch.page_size
    if launch.max_total_tokens is not None:
        tokens = min(tokens, launch.max_total_tokens) // launch.page_size * launch.page_size
    context = launch.context_length or model.context_length
    if n is not None:
        reqs = min(max(1, n // launch.attn_dp), tokens // 2)
    else:
        reqs = min(max(min(int(tokens / context * 512), 4096), 2048), tokens // 2)
    if sizing.slots is not None and sizing.slots // ratio < reqs:
        reqs = sizing.slots // ratio
        sizing.capped = reqs
    sizing.tokens, sizing.max_num_reqs, sizing.running = tokens, reqs, max(0, reqs)
    if reqs <= 0:
        sizing.verdict = FailureClass.POOL_INIT_OOM.value
        sizing.failure = (
            "RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve "
            "any requests."
        )
    elif tokens <= 0:
        sizing.verdict = FailureClass.POOL_INIT_OOM.value
        sizing.failure = (
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
        )
    return sizing


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class _Memory:
    """Free memory and weights per rank, and where each number came from."""

    free: int  # P
    after: int  # A, target weights only
    weights: int
    draft: int | None  # the draft's weights (0.5.9: its peak), None when unknown
    free_source: str  # "the log" or "estimated"
    weights_source: str
    draft_source: str


def _memory(
    model: Model,
    launch: Launch,
    gpu_memory_bytes: int,
    calibration: Calibration | None,
) -> _Memory:
    cal = calibration or Calibration()
    free, after, weights = cal.free_before_weights, cal.free_after_weights, cal.weights
    logged = "the log" if free is not None or after is not None else "estimated"
    if weights is None and free is not None and after is not None:
        weights = free - after
    weights_source = "estimated" if weights is None else "the log"
    if weights is None:
        weights = weight_bytes(model, launch)
    if free is None and after is not None:
        free = after + weights
    if free is None:
        overhead = 0 if launch.device == "cpu" else CUDA_CONTEXT_BYTES
        if launch.device != "cpu" and launch.tp * launch.pp > 1:
            overhead += NCCL_BYTES
        free = gpu_memory_bytes - overhead
    if after is None:
        after = free - weights
    # A draft load in a log of the same version says what the draft takes; 0.5.9 logs its
    # peak (own embedding and LM head), 0.5.23 its shared-weights size.
    draft, draft_source = draft_weight_bytes(model, launch), "estimated"
    if cal.draft_weights is not None and cal.version in (None, launch.version) and draft != 0:
        draft, draft_source = cal.draft_weights, "the log"
    return _Memory(free, after, weights, draft, logged, weights_source, draft_source)


def plan(
    model_config: Mapping[str, Any],
    gpu_memory_bytes: int,
    gpus: int = 1,
    flags: Mapping[str, object] | None = None,
    version: str = "0.5.9",
    calibration: Calibration | None = None,
    max_fraction: float = DEFAULT_MAX_FRACTION,
) -> Plan:
    """Predict what SGLang ``version`` does with these flags on ``gpus`` GPUs of
    ``gpu_memory_bytes`` each, and the cheapest flag changes that make it fit."""
    if not isinstance(gpu_memory_bytes, int) or gpu_memory_bytes <= 0:
        raise PlanError(f"GPU memory must be a positive number of bytes, got {gpu_memory_bytes!r}")
    if not isinstance(gpus, int) or gpus < 1:
        raise PlanError(f"the GPU count must be at least 1, got {gpus!r}")
    if not 0 < max_fraction <= 1:
        raise PlanError(f"the maximum fraction {max_fraction} is outside (0, 1]")
    model = read_model(model_config)
    flags = normalize_flags(flags or {})
    base = _plan(model, flags, gpu_memory_bytes, gpus, version, calibration)
    if base.verdict == FailureClass.INVALID_ARGUMENT.value or _acceptable(base, flags, model):
        return base
    suggestions = list(
        _suggestions(model, flags, base, gpu_memory_bytes, gpus, calibration, max_fraction)
    )
    return replace(base, suggestions=suggestions)


def _plan(
    model: Model,
    flags: Mapping[str, object],
    gpu_memory_bytes: int,
    gpus: int,
    version: str,
    calibration: Calibration | None,
) -> Plan:
    launch = read_launch(flags, version, model)
    _check_parallelism(model, launch, gpus)
    memory = _memory(model, launch, gpu_memory_bytes, calibration)
    notes: list[str] = []
    fraction, fraction_source = _fraction(model, launch, gpu_memory_bytes, calibration)
    n = launch.max_running_requests
    if n is None and launch.speculative is not None:
        n = 48  # ServerArgs resets it for speculative decoding (server_args.py:2362-2366)
        notes.append(
            "speculative decoding set max_running_requests to 48: it sizes the "
            "reservations even if 48 requests never come"
        )
    after = memory.after
    if version == "0.5.23" and launch.speculative not in (None, "NGRAM"):
        after -= memory.draft or 0  # 0.5.23 loads the draft before sizing
    size = _size_0_5_9 if version == "0.5.9" else _size_0_5_23
    sizing = size(model, launch, memory.free / GIB, after / GIB, fraction, n)
    context = launch.context_length or model.context_length
    if launch.context_length and launch.context_length > model.context_length:
        sizing.verdict = FailureClass.INVALID_ARGUMENT.value
        sizing.failure = (
            f"ValueError: --context-length {launch.context_length} is greater than the "
            f"derived context_length ({model.context_length})"
        )
    cell = pool_cell_bytes(model, launch)
    state = state_bytes_per_request(model, launch)
    budget = _budget(model, launch, memory, fraction, fraction_source, sizing, n, after)
    steps, headroom = _headroom(model, launch, memory, fraction, sizing, cell, state, n, context)
    if sizing.verdict == FITS:
        budget += steps
        need = round(_reserve_mib(model, launch, gpu_memory_bytes / MIB, activations=False) * MIB)
        if headroom < need:
            sizing.verdict = FailureClass.CUDA_GRAPH_OOM.value
            sizing.failure = (
                f"{_gib(headroom)} left for CUDA graphs and activations, below the "
                f"{_gib(need)} they need: an out-of-memory error after the pools"
            )
    notes += _notes(model, launch, sizing, n, context, memory)
    return Plan(
        verdict=sizing.verdict,
        version=version,
        budget=budget,
        max_total_num_tokens=sizing.tokens,
        mamba_cache_slots=sizing.slots,
        max_running_requests=sizing.running,
        headroom_bytes=headroom,
        what_ate_the_budget=_what_ate(budget),
        notes=notes,
        inputs={
            "calibrated": memory.free_source == "the log",
            "mem_fraction_static": fraction,
            "context_length": context,
            "kv_cell_bytes": cell,
            "state_bytes_per_request": state,
            "max_running_requests": n,
            "speculative_num_draft_tokens": launch.draft_tokens or None,
            "tp_size": launch.tp,
        },
    )


def _check_parallelism(model: Model, launch: Launch, gpus: int) -> None:
    world = launch.tp * launch.pp * (1 if launch.dp_attention else launch.dp)
    if world > gpus:
        raise PlanError(f"the flags need {world} GPUs (tp x pp x dp), {gpus} given")
    if model.heads % launch.attn_tp:
        raise PlanError(f"--tp-size {launch.tp} does not divide the {model.heads} attention heads")
    if launch.pp > model.layers:
        raise PlanError(f"--pp-size {launch.pp} exceeds the {model.layers} layers")


def _fraction(
    model: Model, launch: Launch, gpu_memory_bytes: int, calibration: Calibration | None
) -> tuple[float, str]:
    if launch.mem_fraction_static is not None:
        return launch.mem_fraction_static, "the command line"
    if calibration is not None and calibration.mem_fraction_static is not None:
        return calibration.mem_fraction_static, "the log's resolved value"
    return default_mem_fraction(model, launch, gpu_memory_bytes), "SGLang's default for this GPU"


def _budget(
    model: Model,
    launch: Launch,
    memory: _Memory,
    fraction: float,
    fraction_source: str,
    sizing: _Sizing,
    n: int | None,
    after: float,
) -> list[BudgetStep]:
    state = state_bytes_per_request(model, launch)
    cell = pool_cell_bytes(model, launch)
    static = round(memory.free * (1 - fraction))
    steps = [
        BudgetStep(
            "free_before_weights",
            memory.free,
            f"free GPU memory per rank before the weights load ({memory.free_source})",
        ),
        BudgetStep(
            "weights",
            memory.weights,
            f"{model.architecture} weights per rank at tp={launch.tp} ({memory.weights_source})",
        ),
    ]
    if launch.version == "0.5.23" and launch.speculative not in (None, "NGRAM"):
        steps.append(
            BudgetStep(
                "draft_weights",
                round(memory.after - after),
                f"the draft model's weights, loaded before sizing ({memory.draft_source})",
            )
        )
    steps.append(
        BudgetStep(
            "static_headroom",
            static,
            f"(1 - {fraction:g}) x {_gib(memory.free)} kept free for activations, CUDA graphs"
            + (" and the draft model" if launch.version == "0.5.9" and launch.speculative else "")
            + f" (--mem-fraction-static {fraction:g}: {fraction_source})",
        )
    )
    if sizing.multimodal:
        steps.append(
            BudgetStep(
                "multimodal_reservation",
                round(sizing.multimodal * GIB),
                "reserved for the multimodal embedding cache and feature transport (0.5.23)",
            )
        )
    if sizing.spec_reserve:
        requests = round(sizing.spec_reserve * GIB / (state * launch.draft_tokens))
        steps.append(
            BudgetStep(
                "speculative_reservation",
                round(sizing.spec_reserve * GIB),
                f"intermediate recurrent state for {requests} request slots x "
                f"{launch.draft_tokens} draft tokens x {_mib(state)} per request, "
                "reserved before any KV cache",
            )
        )
    if sizing.slots is not None:
        padded = sizing.slots + (1 if launch.version == "0.5.23" and sizing.slots > 0 else 0)
        steps.append(
            BudgetStep(
                "mamba_state",
                round(sizing.mamba * GIB),
                f"{padded} state slots x {_mib(state)}: {_slots_reason(model, launch, n)}",
            )
        )
    kv_bytes = round(sizing.kv_budget * GIB)
    if sizing.verdict == FailureClass.POOL_INIT_OOM.value or sizing.tokens <= 0:
        explanation = f"left for the KV cache: nothing, short by {_gib(-kv_bytes)}"
        if kv_bytes > 0:
            explanation = f"left for the KV cache: {_gib(kv_bytes)}, not enough to serve"
    else:
        explanation = f"{sizing.tokens} tokens x {cell} B per token"
        kv_bytes = (sizing.tokens + launch.page_size) * cell
    steps.append(BudgetStep("kv_cache", kv_bytes, explanation))
    return steps


def _slots_reason(model: Model, launch: Launch, n: int | None) -> str:
    if launch.max_mamba_cache_size is not None:
        return "as --max-mamba-cache-size asks"
    if _radix_off(model, launch) and n is not None:
        if launch.disable_radix_cache:
            return "one per running request, the radix cache being disabled"
        return (
            "one per running request: 0.5.9 disables the radix cache for this model with "
            "speculative decoding, so --mamba-full-memory-ratio is ignored"
        )
    return f"--mamba-full-memory-ratio {launch.mamba_ratio:g} of the state-to-KV split"


def _headroom(
    model: Model,
    launch: Launch,
    memory: _Memory,
    fraction: float,
    sizing: _Sizing,
    cell: int,
    state: int,
    n: int | None,
    context: int,
) -> tuple[list[BudgetStep], int]:
    """What comes out of the static headroom without being budgeted, and what is left."""
    headroom = round(memory.free * (1 - fraction))
    steps: list[BudgetStep] = []
    if sizing.verdict != FITS:
        return steps, headroom
    profiled_bytes = round(sizing.kv_budget * GIB)
    unused = profiled_bytes - sizing.tokens * cell
    if launch.max_total_tokens is not None and unused > cell * launch.page_size:
        steps.append(
            BudgetStep(
                "unused_by_cap",
                unused,
                f"left free by --max-total-tokens {launch.max_total_tokens}: more headroom",
            )
        )
        headroom += unused
    draft = launch.draft_tokens if launch.speculative else 0
    table = sizing.max_num_reqs * (context + 4 + draft) * 4
    steps.append(
        BudgetStep(
            "request_table",
            table,
            f"{sizing.max_num_reqs} request slots x {context + 4 + draft} int32 token indices",
        )
    )
    headroom -= table
    if launch.version == "0.5.9":
        headroom -= _headroom_0_5_9(model, launch, memory, sizing, state, n, steps)
    steps.append(BudgetStep("headroom", headroom, "left for CUDA graphs, activations and sampling"))
    return steps, headroom


def _headroom_0_5_9(
    model: Model,
    launch: Launch,
    memory: _Memory,
    sizing: _Sizing,
    state: int,
    n: int | None,
    steps: list[BudgetStep],
) -> int:
    """0.5.9 allocates slot 0 of every state buffer beyond its budget, and loads the
    whole draft model (weights, KV pool) only after the target's CUDA graphs."""
    spent = 0
    if model.gdn is not None:
        pad = state
        if launch.speculative and n is not None:
            # intermediate buffers hold (max_num_reqs + 1) x D states; N x D were budgeted
            pad += state * launch.draft_tokens * (sizing.max_num_reqs + 1 - n // launch.attn_dp)
        steps.append(
            BudgetStep("mamba_padding", pad, "state slots allocated beyond the budget (slot 0)")
        )
        spent += pad
    if launch.speculative in (None, "NGRAM"):
        return spent
    if memory.draft is not None:
        steps.append(
            BudgetStep(
                "draft_weights",
                memory.draft,
                f"the draft model at its load peak, after the graphs ({memory.draft_source})",
            )
        )
        spent += memory.draft
    draft_cell = kv_cell_bytes(model, launch, layers=_draft_kv_layers(model, launch))
    draft_kv = (sizing.tokens + launch.page_size) * draft_cell
    steps.append(
        BudgetStep(
            "draft_kv",
            draft_kv,
            f"the draft's own KV pool: {sizing.tokens} tokens x {draft_cell} B",
        )
    )
    return spent + draft_kv


def _notes(
    model: Model, launch: Launch, sizing: _Sizing, n: int | None, context: int, memory: _Memory
) -> list[str]:
    notes = []
    if sizing.failure:
        notes.append(f"SGLang {launch.version} would fail: {sizing.failure}")
    if _radix_off(model, launch) and not launch.disable_radix_cache and model.gdn is not None:
        notes.append(
            f"0.5.9 disables the radix cache for {model.architecture} with speculative "
            "decoding: one state slot per running request, --mamba-full-memory-ratio ignored"
        )
    if sizing.capped is not None:
        notes.append(
            f"max_running_requests is capped to {sizing.capped} by the mamba state cache "
            f"({sizing.slots} slots, {_mamba_ratio(launch, _radix_off(model, launch))} "
            "per request)"
        )
    if sizing.verdict == FITS and 0 < sizing.tokens < context:
        notes.append(
            f"the KV pool ({sizing.tokens} tokens) is smaller than the context length "
            f"{context}: longer requests will be rejected"
        )
    if launch.speculative not in (None, "NGRAM") and memory.draft is None:
        notes.append("the draft model's size is unknown (no config for it): calibrate from a log")
    if memory.free_source == "estimated":
        notes.append("free memory and weights are estimated from the GPU size and the config")
    return notes


def _what_ate(budget: Sequence[BudgetStep]) -> str | None:
    reservations = [
        step
        for step in budget
        if step.name
        in ("static_headroom", "multimodal_reservation", "speculative_reservation", "mamba_state")
    ]
    return max(reservations, key=lambda step: step.bytes).name if reservations else None


# --------------------------------------------------------------------------- suggestions


def _target_tokens(flags: Mapping[str, object], model: Model, version: str) -> int:
    """A suggestion must hold one request of the full context (or the --max-total-tokens
    cap, if lower): below that SGLang starts but rejects long requests."""
    launch = read_launch(flags, version, model)
    target = launch.context_length or model.context_length
    return min(target, launch.max_total_tokens) if launch.max_total_tokens else target


def _acceptable(candidate: Plan, flags: Mapping[str, object], model: Model) -> bool:
    return candidate.fits and candidate.max_total_num_tokens >= _target_tokens(
        flags, model, candidate.version
    )


Patch = tuple[dict[str, object], tuple[str, ...]]


def _rungs(model: Model, flags: Mapping[str, object], base: Plan) -> Iterator[list[Patch]]:
    """The ladder below the fraction, least loss of serving capacity first (§4.10): fewer
    running requests, fewer draft steps, a bfloat16 SSM state, no speculative decoding;
    each rung's changes mildest first."""
    launch = read_launch(flags, base.version, model)
    if launch.speculative is not None or model.gdn is not None:
        current = base.inputs["max_running_requests"] or math.inf
        yield [({"max-running-requests": n}, ()) for n in _MAX_RUNNING_LADDER if n < current]
    if launch.speculative not in (None, "NGRAM") and launch.topk == 1:
        yield [
            ({"speculative-num-steps": s, "speculative-num-draft-tokens": s + 1}, ())
            for s in range(launch.steps - 1, 0, -1)
        ]
    if model.gdn is not None and _ssm_bytes(model, launch) > 2:
        yield [({"mamba-ssm-dtype": "bfloat16"}, ())]
    if launch.speculative is not None:
        yield [({}, tuple(name for name in flags if name.startswith("speculative-")))]


def _fraction_patches(base: Plan, max_fraction: float) -> list[Patch]:
    """--mem-fraction-static in steps of 0.01, nearest first: up to the ceiling for a pool
    that does not fit, down when the headroom is what is short."""
    fraction = float(base.inputs["mem_fraction_static"])
    cents = round(fraction * 100)
    if base.verdict == FailureClass.CUDA_GRAPH_OOM.value:
        values = [c / 100 for c in range(cents - 1, 9, -1)]
    else:
        values = [c / 100 for c in range(cents + 1, int(max_fraction * 100 + 1e-9) + 1)]
    return [({"mem-fraction-static": value}, ()) for value in values if value != fraction]


def _suggestions(
    model: Model,
    flags: Mapping[str, object],
    base: Plan,
    gpu_memory_bytes: int,
    gpus: int,
    calibration: Calibration | None,
    max_fraction: float,
) -> Iterator[Suggestion]:
    """The first acceptable change of every rung, the fraction last (first when the
    headroom is short: lowering it is that failure's remedy). When no single change is
    enough, one combination: the rungs at their strongest, then the fraction."""

    def first_acceptable(flag_sets: Iterable[dict[str, object]]) -> Suggestion | None:
        for patched in flag_sets:
            try:
                candidate = _plan(model, patched, gpu_memory_bytes, gpus, base.version, calibration)
            except PlanError:
                continue
            if _acceptable(candidate, patched, model):
                return _suggestion(flags, patched, candidate)
        return None

    rungs = list(_rungs(model, flags, base))
    fractions = _fraction_patches(base, max_fraction)
    if base.verdict == FailureClass.CUDA_GRAPH_OOM.value:
        rungs.insert(0, fractions)
    else:
        rungs.append(fractions)
    singles = [first_acceptable(_apply(flags, patch) for patch in patches) for patches in rungs]
    found = [suggestion for suggestion in singles if suggestion is not None]
    if found:
        yield from found
        return
    ladder = [*_rungs(model, flags, base), fractions]
    accumulated = dict(flags)
    for patches in ladder:
        combined = first_acceptable(_apply(accumulated, patch) for patch in patches)
        if combined is not None:
            yield _relaxed(combined, ladder, flags, first_acceptable)
            return
        if patches and patches is not fractions:
            accumulated = _apply(accumulated, patches[-1])


def _relaxed(
    found: Suggestion,
    ladder: Sequence[list[Patch]],
    original: Mapping[str, object],
    first_acceptable: Callable[[Iterable[dict[str, object]]], Suggestion | None],
) -> Suggestion:
    """Undo what a combination does not need: each rung back to the original flags, else
    to its mildest change that still fits (N=1 is moot once speculation is dropped)."""
    current = found
    for patches in ladder:
        touched = {name for changes, removed in patches for name in (*changes, *removed)}
        flags = {**original, **current.set}
        flags = {k: v for k, v in flags.items() if k not in current.remove}
        undone = {k: v for k, v in flags.items() if k not in touched} | {
            k: original[k] for k in touched if k in original
        }
        milder = first_acceptable([undone, *(_apply(undone, patch) for patch in patches)])
        if milder is not None:
            current = milder
    return current


def _apply(flags: Mapping[str, object], patch: Patch) -> dict[str, object]:
    changes, removed = patch
    return {k: v for k, v in flags.items() if k not in removed} | changes


def _suggestion(original: Mapping[str, object], patched: dict, candidate: Plan) -> Suggestion:
    changed = {k: v for k, v in patched.items() if original.get(k) != v}
    removed = tuple(k for k in original if k not in patched)
    words = [f"--{k} {v}" for k, v in changed.items()]
    if removed:
        words.append("remove " + " ".join(f"--{k}" for k in removed))
    return Suggestion(" ".join(words), changed, removed, candidate)


def _gib(amount: float) -> str:
    return f"{amount / GIB:.2f} GiB"


def _mib(amount: float) -> str:
    return f"{amount / MIB:.2f} MiB"
