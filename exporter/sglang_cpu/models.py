"""Tiny model directories that the real SGLang can serve on a CPU with `--load-format dummy`.

Only a config and a tokenizer are written: dummy weights need no weight files, so a "model" costs
a few kilobytes on disk. The "large" size has about 300 MB of weights once SGLang allocates them,
which is enough to exceed a tiny `--mem-fraction-static` budget (a real pool-init OOM).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from exporter.sglang_cpu.install import SGLangRuntime, run_step

VOCAB_SIZE = 512
# The trained tokenizer stays below the model's vocabulary, as real checkpoints pad theirs.
TOKENIZER_VOCAB_SIZE = 384
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

# Per-size shape; "large" is 10 layers of about 15.7 M parameters: ~315 MB in bfloat16.
_SHAPES: dict[str, dict[str, int]] = {
    "tiny": {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
    },
    "large": {
        "hidden_size": 1024,
        "num_hidden_layers": 10,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "intermediate_size": 4096,
    },
}

_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Runs in the SGLang venv: `tokenizers` and `transformers` live there, not in ours.
_TOKENIZER_SCRIPT = """
import json, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

dest, vocab_size, chat_template = sys.argv[1], int(sys.argv[2]), sys.argv[4]
specials = json.loads(sys.argv[3])
sentences = [
    "The quick brown fox jumps over the lazy dog.",
    "SGLang serves large language models with a radix cache.",
    "A supervisor watches the server, reads its log and restarts it.",
    "Hello, how are you today? I am fine, thank you.",
    "Memory pools hold the key and value cache of every request.",
] * 20
tokenizer = Tokenizer(models.BPE())
tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tokenizer.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(
    vocab_size=vocab_size,
    special_tokens=specials,
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    show_progress=False,
)
tokenizer.train_from_iterator(sentences, trainer)
fast = PreTrainedTokenizerFast(
    tokenizer_object=tokenizer,
    eos_token=specials[0],
    pad_token=specials[0],
    additional_special_tokens=specials[1:],
)
fast.chat_template = chat_template
fast.save_pretrained(dest)
"""


def write_tiny_model(dest: Path, runtime: SGLangRuntime, size: str = "tiny") -> Path:
    """Write a Qwen2 model directory (config + tokenizer) into `dest`; skip it if complete."""
    config = model_config(size)
    config_path = dest / "config.json"
    if _is_complete(dest, config):
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    _build_tokenizer(dest, runtime)
    # config.json is written last: its presence marks a complete directory.
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    return dest


def model_config(size: str) -> dict[str, Any]:
    """The Hugging Face config of a small Qwen2ForCausalLM of the given size."""
    if size not in _SHAPES:
        raise ValueError(f"unknown model size {size!r}; expected one of {sorted(_SHAPES)}")
    shape = _SHAPES[size]
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        **shape,
        "vocab_size": VOCAB_SIZE,
        "max_position_embeddings": 2048,
        "max_window_layers": shape["num_hidden_layers"],
        "use_sliding_window": False,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "torch_dtype": "bfloat16",
        "tie_word_embeddings": True,
        "bos_token_id": 0,
        "eos_token_id": 0,
        "use_cache": True,
    }


def _is_complete(dest: Path, config: dict[str, Any]) -> bool:
    config_path = dest / "config.json"
    if not (config_path.exists() and (dest / "tokenizer.json").exists()):
        return False
    return json.loads(config_path.read_text()) == config


def _build_tokenizer(dest: Path, runtime: SGLangRuntime) -> None:
    command = [
        str(runtime.python),
        "-c",
        _TOKENIZER_SCRIPT,
        str(dest),
        str(TOKENIZER_VOCAB_SIZE),
        json.dumps(SPECIAL_TOKENS),
        _CHAT_TEMPLATE,
    ]
    run_step("build tokenizer", command)
