"""What the memory planner needs from the machine and the disk, found one way for the
daemon's pre-flight, its automatic remedies and the ``plan`` command: the model's
``config.json`` (a local directory or the Hugging Face cache; nothing is downloaded), the
memory of the devices SGLang's ranks will use, and a calibration from the log of an earlier
attempt of the same model on the same devices.

Every failure is a PlanInputError naming what could not be read: the caller decides
whether that blocks anything (the daemon never lets it block a launch).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil
import pynvml

from exporter.diagnosis.planner import Calibration, PlanError, PlanInputs, calibrate
from exporter.logs.events import Event, EventKind
from exporter.logs.reader import read_log
from exporter.sglang.flags import normalize_flags

NUMA_NODES = Path("/sys/devices/system/node/has_cpu")
# The startup lines a calibration reads (server_args, weights, pools; 0.5.9's draft load
# after the graphs) fit well within this; a log's serving part is not read at all.
CALIBRATION_HEAD_BYTES = 2 << 20


class PlanInputError(PlanError):
    """An input of the plan (model config, device memory) that cannot be had."""


@dataclass(frozen=True)
class DeviceMemory:
    per_rank_bytes: int  # the smallest device among those the ranks use: SGLang sizes by it
    devices: int  # devices available to the launch
    source: str  # where the number came from, for the record


# --- the model's config ---------------------------------------------------------------------


def read_model_config(model_path: str, env: Mapping[str, str] | None = None) -> dict:
    """``--model-path``'s config.json: a local directory (or the file itself), else a hub id
    looked up in the Hugging Face cache the way the hub library lays it out."""
    if not model_path:
        raise PlanInputError("no --model-path to read the model's config from")
    local = Path(model_path).expanduser()
    if local.is_dir():
        return _read_json(local / "config.json")
    hub_id = model_path.count("/") == 1 and not model_path.startswith(("/", ".", "~"))
    if hub_id and not local.exists():
        return _read_json(_hub_cached_config(model_path, env or os.environ))
    return _read_json(local)


def _hub_cached_config(repo_id: str, env: Mapping[str, str]) -> Path:
    """<cache>/models--org--name/snapshots/<revision>/config.json, the revision refs/main
    names (else the newest snapshot)."""
    cache = _hub_cache(env) / ("models--" + repo_id.replace("/", "--"))
    snapshots = cache / "snapshots"
    revision = _read_text(cache / "refs" / "main")
    if revision and (snapshots / revision / "config.json").is_file():
        return snapshots / revision / "config.json"
    candidates = sorted(
        (path for path in snapshots.glob("*/config.json") if path.is_file()),
        key=lambda path: path.stat().st_mtime,
    )
    if not candidates:
        raise PlanInputError(
            f"--model-path {repo_id}: not a local directory and not in the Hugging Face "
            f"cache {cache.parent} (nothing is downloaded)"
        )
    return candidates[-1]


def _hub_cache(env: Mapping[str, str]) -> Path:
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def _read_json(path: Path) -> dict:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise PlanInputError(f"cannot read {path}: {error.strerror or error}") from None
    except ValueError as error:
        raise PlanInputError(f"{path} is not JSON: {error}") from None
    if not isinstance(config, dict):
        raise PlanInputError(f"{path} is not a JSON object")
    return config


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


# --- device memory ------------------------------------------------------------------------


def nvml_usable_memory() -> list[int]:
    """Each GPU's usable memory, by NVML index: total less what the driver reserves, which
    is what CUDA reports. PlanInputError when NVML cannot answer."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        raise PlanInputError(f"NVML: {error}") from None
    try:
        sizes = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            try:
                info = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
                sizes.append(info.total - info.reserved)
            except pynvml.NVMLError:  # an older driver: only the v1 call
                sizes.append(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
        return sizes
    except pynvml.NVMLError as error:
        raise PlanInputError(f"NVML: {error}") from None
    finally:
        pynvml.nvmlShutdown()


def host_memory_as_sglang_sees_it() -> int:
    """SGLang's CPU engine sizes its pools from the host's available memory per NUMA node
    (get_available_gpu_memory, device "cpu")."""
    return int(psutil.virtual_memory().available / _numa_nodes())


def _numa_nodes() -> int:
    """Nodes with CPUs, from the kernel's range list ("0", "0-1", "0,2-3")."""
    text = _read_text(NUMA_NODES) or "0"
    count = 0
    for part in text.split(","):
        low, _, high = part.partition("-")
        if low.isdigit():
            count += int(high) - int(low) + 1 if high.isdigit() else 1
    return max(count, 1)


def rank_devices(flags: Mapping[str, object], env: Mapping[str, str]) -> list[int]:
    """The NVML indices of this node's TP x PP ranks: SGLang gives local rank i the GPU
    base_gpu_id + i x gpu_id_step, counted among CUDA_VISIBLE_DEVICES when that is set."""
    tp, pp = _int(flags.get("tp-size"), 1), _int(flags.get("pp-size"), 1)
    nodes = max(_int(flags.get("nnodes"), 1), 1)
    base, step = _int(flags.get("base-gpu-id"), 0), _int(flags.get("gpu-id-step"), 1)
    local = [base + i * step for i in range(max(tp * pp // nodes, 1))]
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return local
    physical = [int(word) for word in visible.split(",") if word.strip().isdigit()]
    return [physical[i] if i < len(physical) else i for i in local]


def device_memory(
    flags: Mapping[str, object],
    env: Mapping[str, str],
    gpus: Callable[[], Sequence[int]] = nvml_usable_memory,
) -> DeviceMemory:
    """Memory per rank for a launch with these SGLang flags: the host's on the CPU engine,
    else the smallest of the GPUs its TP ranks use (NVML)."""
    if str(flags.get("device", "cuda")) == "cpu":
        ranks = _int(flags.get("tp-size"), 1) * _int(flags.get("pp-size"), 1)
        return DeviceMemory(host_memory_as_sglang_sees_it(), ranks, "host memory (CPU engine)")
    sizes = list(gpus())
    if not sizes:
        raise PlanInputError("NVML reports no GPU")
    wanted = rank_devices(flags, env)
    missing = [index for index in wanted if index >= len(sizes)]
    if missing:
        raise PlanInputError(
            f"the ranks need GPU {', '.join(map(str, missing))}; NVML reports {len(sizes)}"
        )
    used = ", ".join(map(str, wanted))
    return DeviceMemory(min(sizes[i] for i in wanted), len(sizes), f"NVML, GPU {used}")


def _int(value: object, default: int) -> int:
    if isinstance(value, bool):
        return default
    try:
        return int(str(value)) if value is not None else default
    except ValueError:
        return default


# --- calibration --------------------------------------------------------------------------


def same_setup(events: Sequence[Event], flags: Mapping[str, object]) -> bool:
    """Did the attempt whose log these are run this model on these devices? Its server_args
    line says (model path, device, TP size): another fraction or ladder step is fine, the
    memory it measured before the pools is the same."""
    args = next((e for e in events if e.kind is EventKind.SERVER_ARGS), None)
    if args is None:
        return False
    logged = (args.get("model_path"), args.get("device"), args.get("tp_size"))
    wanted = (
        str(flags.get("model-path", "")),
        str(flags.get("device", "cuda")),
        _int(flags.get("tp-size"), 1),
    )
    return logged == wanted


def calibration_from(
    events: Sequence[Event], flags: Mapping[str, object], version: str
) -> Calibration | None:
    """A calibration from an earlier attempt's events when it measured the same setup and
    got as far as weighing its weights; None otherwise."""
    if not same_setup(events, flags):
        return None
    calibration = calibrate(events, version)
    if calibration.free_before_weights is None and calibration.free_after_weights is None:
        return None
    return calibration


def calibration_from_log(
    path: str | Path | None, flags: Mapping[str, object], version: str
) -> Calibration | None:
    """The calibration an earlier attempt's log offers for these flags, from its head (the
    startup lines); None when there is no such log or it measured another setup."""
    if not path:
        return None
    try:
        with open(path, "rb") as handle:
            text = handle.read(CALIBRATION_HEAD_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None
    return calibration_from(read_log(text, version)[1], normalize_flags(flags), version)


def gather(
    flags: Mapping[str, object],
    env: Mapping[str, str],
    previous_log: str | Path | None,
    version: str,
    gpus: Callable[[], Sequence[int]] = nvml_usable_memory,
) -> PlanInputs:
    """Everything a pre-flight plans from, or PlanInputError naming what is missing."""
    names = normalize_flags(flags)
    config = read_model_config(str(names.get("model-path", "")), env)
    memory = device_memory(names, env, gpus)
    calibration = calibration_from_log(previous_log, names, version)
    return PlanInputs(config, memory.per_rank_bytes, memory.devices, memory.source, calibration)
