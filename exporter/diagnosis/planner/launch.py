"""SGLang's flags read into a Launch, as its ServerArgs resolves the ones the sizing reads."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from exporter.diagnosis.planner.calibration import optional
from exporter.diagnosis.planner.cells import KV_DTYPES
from exporter.diagnosis.planner.model import SSM_DTYPE_BYTES, Model
from exporter.diagnosis.planner.sizing import Sizer
from exporter.diagnosis.planner.types import PlanError
from exporter.diagnosis.planner.versions import sizer_for
from exporter.sglang.flags import normalize_flags

SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")


@dataclass(frozen=True)
class Launch:
    """SGLang's flags as its ServerArgs resolves the ones the sizing reads."""

    sizer: Sizer  # the SGLang version's side of every rule that differs
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
    def version(self) -> str:
        return self.sizer.version

    @property
    def attn_tp(self) -> int:
        return max(1, self.tp // self.dp) if self.dp_attention else self.tp

    @property
    def attn_dp(self) -> int:
        return self.dp if self.dp_attention else 1


def read_launch(flags: Mapping[str, object], version: str, model: Model) -> Launch:
    flags = normalize_flags(flags)
    sizer = sizer_for(version)
    speculative = _speculative_algorithm(flags)
    steps, topk, draft_tokens = _speculative_shape(flags, speculative, model)
    fraction = _number(flags, "mem-fraction-static", float)
    if fraction is not None and not 0 < fraction <= 1:
        raise PlanError(f"--mem-fraction-static {fraction} is outside (0, 1]")
    ratio = _number(flags, "mamba-full-memory-ratio", float)
    if ratio is not None and ratio <= 0:
        raise PlanError(f"--mamba-full-memory-ratio {ratio} must be positive")
    kv_dtype = str(flags.get("kv-cache-dtype", "auto")).lower()
    if kv_dtype not in KV_DTYPES:
        raise PlanError(f"--kv-cache-dtype {kv_dtype} is not one of {', '.join(KV_DTYPES)}")
    ssm = flags.get("mamba-ssm-dtype")
    if ssm is not None and ssm not in SSM_DTYPE_BYTES:
        raise PlanError(f"--mamba-ssm-dtype {ssm} is not one of {', '.join(SSM_DTYPE_BYTES)}")
    return Launch(
        sizer=sizer,
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
        quantization=optional(flags.get("quantization"), str),
        device=str(flags.get("device", "cuda")),
        speculative=speculative,
        steps=steps,
        topk=topk,
        draft_tokens=draft_tokens,
        draft_model_path=optional(flags.get("speculative-draft-model-path"), str),
        model_path=optional(flags.get("model-path"), str),
        mamba_ratio=0.9 if ratio is None else ratio,
        max_mamba_cache_size=_number(flags, "max-mamba-cache-size", int, minimum=1),
        mamba_ssm_dtype=optional(ssm, str),
        mamba_strategy=str(flags.get(sizer.mamba_strategy_flag, "auto")),
        disable_radix_cache=bool(flags.get("disable-radix-cache")),
        disable_overlap=bool(flags.get("disable-overlap-schedule")),
        disable_cuda_graph=bool(flags.get("disable-cuda-graph")),
        chunked_prefill_size=_number(flags, "chunked-prefill-size", int, minimum=-1),
        max_prefill_tokens=_number(flags, "max-prefill-tokens", int, 16384, minimum=1),
        cuda_graph_max_bs=_number(flags, sizer.cuda_graph_max_bs_flag, int, minimum=1),
        language_only=bool(flags.get("language-only")),
        mm_feature_transport=optional(flags.get("mm-feature-transport"), str),
    )


def _speculative_algorithm(flags: Mapping[str, object]) -> str | None:
    speculative = flags.get("speculative-algorithm")
    if speculative is None:
        return None
    speculative = str(speculative).upper()
    if speculative not in SPEC_ALGORITHMS:
        raise PlanError(
            f"--speculative-algorithm {speculative} is not modelled "
            f"({', '.join(SPEC_ALGORITHMS)} are)"
        )
    return "EAGLE" if speculative == "NEXTN" else speculative


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
