"""SGLang flag names as argparse resolves them: aliases and unique prefixes."""

from __future__ import annotations

from collections.abc import Mapping

from exporter.diagnosis.planner.versions import SIZERS

# Every flag read here, with its argparse aliases; argparse also takes any unique prefix.
# The flags whose name depends on the version come from every version's sizer.
FLAG_NAMES: dict[str, str] = {
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
        "disable-radix-cache",
        "disable-overlap-schedule",
        "disable-cuda-graph",
        "language-only",
        "mm-feature-transport",
        *(name for sizer in SIZERS.values() for name in sizer.flag_names),
    )
} | {
    "tensor-parallel-size": "tp-size",
    "pipeline-parallel-size": "pp-size",
    "data-parallel-size": "dp-size",
    "speculative-draft-model": "speculative-draft-model-path",
}


def normalize_flags(flags: Mapping[str, object]) -> dict[str, object]:
    """Flag names without ``--``, aliases and unique prefixes resolved the way argparse
    does (``speculative-algo`` is ``speculative-algorithm``); ``false`` drops a flag;
    names this planner does not read are kept as given."""
    normalized: dict[str, object] = {}
    for raw, value in flags.items():
        name = str(raw).lstrip("-").split("=", 1)[0]
        if name not in FLAG_NAMES:
            targets = {target for option, target in FLAG_NAMES.items() if option.startswith(name)}
            name = targets.pop() if len(targets) == 1 and name else name
        name = FLAG_NAMES.get(name, name)
        if value is False or value is None:
            normalized.pop(name, None)
        else:
            normalized[name] = value
    return normalized
