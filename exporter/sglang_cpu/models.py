"""Tiny model directories that the real SGLang serves on a CPU: a config, a tokenizer and
real safetensors weights in several shards, written here from seeded random values (nothing is
downloaded). With the default load format SGLang loads them shard by shard and prints its real
"Loading safetensors checkpoint shards: k/n" progress; `--load-format dummy` ignores them.
The "large" size has about 300 MB of weights, enough to exceed a tiny `--mem-fraction-static`
budget (a real pool-init OOM).
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

# Shards per size: several, so a load shows progress between them.
SHARDS = {"tiny": 2, "large": 4}
INDEX_FILE = "model.safetensors.index.json"

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


# Runs in the SGLang venv (torch, safetensors, transformers live there). The names and shapes
# are transformers' own Qwen2 (built on the meta device: no memory); each shard is written to a
# temporary name and renamed, the index last, so a reader never sees half a checkpoint.
_WEIGHTS_SCRIPT = """
import json, os, sys, torch
from safetensors.torch import save_file
from transformers import Qwen2Config, Qwen2ForCausalLM

dest, shards, config = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
config = Qwen2Config(**config)
with torch.device("meta"):
    shapes = {n: t.shape for n, t in Qwen2ForCausalLM(config).state_dict().items()}
if config.tie_word_embeddings:
    shapes.pop("lm_head.weight", None)
layers = config.num_hidden_layers

def shard_of(name):
    if ".layers." in name:
        return int(name.split(".layers.")[1].split(".")[0]) * shards // layers
    return 0 if "embed_tokens" in name else shards - 1

generator = torch.Generator().manual_seed(0)
files = [f"model-{k + 1:05d}-of-{shards:05d}.safetensors" for k in range(shards)]
weight_map, total = {}, 0
for k, file in enumerate(files):
    tensors = {}
    for name, shape in shapes.items():
        if shard_of(name) != k:
            continue
        if name.endswith("norm.weight"):
            tensor = torch.ones(shape, dtype=torch.bfloat16)
        else:
            tensor = (torch.randn(shape, generator=generator) * 0.02).to(torch.bfloat16)
        tensors[name] = tensor
        weight_map[name] = file
        total += tensor.numel() * tensor.element_size()
    save_file(tensors, os.path.join(dest, file + ".tmp"), metadata={"format": "pt"})
    os.replace(os.path.join(dest, file + ".tmp"), os.path.join(dest, file))
index = {"metadata": {"total_size": total}, "weight_map": weight_map}
with open(os.path.join(dest, "index.tmp"), "w") as handle:
    json.dump(index, handle, indent=2)
os.replace(os.path.join(dest, "index.tmp"), os.path.join(dest, sys.argv[4]))
"""


def write_tiny_model(dest: Path, runtime: SGLangRuntime, size: str = "tiny") -> Path:
    """Write a Qwen2 model directory (config, tokenizer, weight shards) into `dest`; skip
    what is already complete."""
    config = model_config(size)
    config_path = dest / "config.json"
    if _is_complete(dest, config):
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    if not (dest / "tokenizer.json").exists():
        _build_tokenizer(dest, runtime)
    if not _has_weights(dest):
        _write_weights(dest, runtime, config, SHARDS[size])
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
    if not (config_path.exists() and (dest / "tokenizer.json").exists() and _has_weights(dest)):
        return False
    return json.loads(config_path.read_text()) == config


def weight_files(dest: Path) -> list[Path]:
    """The shard files the checkpoint's index names, in order."""
    index = json.loads((dest / INDEX_FILE).read_text())
    return [dest / name for name in sorted(set(index["weight_map"].values()))]


def _has_weights(dest: Path) -> bool:
    try:
        return all(path.is_file() for path in weight_files(dest))
    except (OSError, ValueError, KeyError):
        return False


def _write_weights(dest: Path, runtime: SGLangRuntime, config: dict, shards: int) -> None:
    command = [
        str(runtime.python),
        "-c",
        _WEIGHTS_SCRIPT,
        str(dest),
        str(shards),
        json.dumps(config),
        INDEX_FILE,
    ]
    run_step("write weight shards", command)


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
