"""The third layer: families of wording, for error lines no signature knows.

Each family is the vocabulary a layer under SGLang (PyTorch, NCCL, Mooncake, a compiler,
transformers, an allocator) uses for one kind of failure, in any sentence. They are asked
in order, the first that matches names the class: more specific families come first (an
"out of memory" inside a NCCL message is memory; a timeout inside a rendezvous is
distributed).

``reports_error`` and ``says_failed`` tell which lines are errors at all: an exception, an
ERROR record, a glog ``E`` line, a fatal banner, SGLang's own teardown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from exporter.diagnosis.taxonomy import FailureClass as C
from exporter.logs.tracebacks import EXCEPTION_LINE


@dataclass(frozen=True)
class Family:
    name: str
    failure_class: C
    pattern: re.Pattern[str]
    out_of_memory: bool = False  # the class depends on where it happened (classify.py)
    # Says what happened whatever code raised it: outranks the raising package (an
    # "out of memory" raised in a model loader is still memory).
    specific: bool = False


def _family(
    name: str, failure_class: C, pattern: str, out_of_memory: bool = False, specific: bool = False
) -> Family:
    compiled = re.compile(pattern, re.IGNORECASE)
    return Family(name, failure_class, compiled, out_of_memory, specific or out_of_memory)


FAMILIES: tuple[Family, ...] = (
    # Sizing: the numbers do not fit, before anything was allocated.
    _family(
        "memory_budget",
        C.POOL_INIT_OOM,
        r"not enough (?:\w+ )?memory (?:available|for|to)|(?:requesting|requires?|need(?:s|ed)?)"
        r" [\d.]+ ?[GMK]i?B,? but only",
        specific=True,
    ),
    _family(
        "linear_attention_state",
        C.MAMBA_CACHE_EXHAUSTED,
        r"mamba\w* (?:cache|pool|state)|(?:alloc|space)\w* (?:for )?mamba",
        specific=True,
    ),
    _family(
        "allocation_failed",
        C.RUNTIME_OOM,
        r"out of memory|\bOOM\b|_ALLOC_FAILED|(?:memory )?allocation failed|failed to allocate"
        r"|can(?:no|')t allocate|failed to (?:cuda )?[cm]alloc|insufficient (?:\w+ )?memory"
        r"|cudaErrorMemoryAllocation",
        out_of_memory=True,
    ),
    _family(
        "token_slots",
        C.KV_POOL_EXHAUSTED,
        r"no space left for|token_to_kv_pool\w*\.available_size\(\)|kv cache pool is full",
        specific=True,
    ),
    _family(
        "port_taken",
        C.PORT_IN_USE,
        r"address already in use|port \S+ is (?:already )?(?:in use|occupied|taken)",
        specific=True,
    ),
    _family(
        "missing_package",
        C.DEPENDENCY_ERROR,
        r"no module named|pip install|is not installed|please install|cannot import name"
        r"|undefined symbol|version mismatch|requires? \S+ ?[><=]=",
        specific=True,
    ),
    _family(
        "compilation",
        C.KERNEL_ERROR,
        r"compil(?:e|ation|ing)\b.*(?:fail|error)|fail\w* to (?:compile|build|jit)|ptxas"
        r"|nvcc|\bninja\b|\bJIT\b|no kernel image|MLIR|cutlass|triton",
    ),
    _family(
        "peers_and_transport",
        C.DISTRIBUTED_INIT,
        r"nccl|gloo|c10d|rendezvous|process group|bootstrap|mooncake|nixl|rdma|ibverbs|nvshmem"
        r"|transfer (?:engine|task)|failed to complete transfers|all_?reduce|\bbarrier\b"
        r"|dist(?:ributed)? init",
    ),
    _family(
        "device_fault",
        C.CUDA_ERROR,
        r"cuda (?:error|failure)|cudaError|hip error|device-side|illegal (?:memory|instruction)"
        r"|\bXid\b|ECC error|driver (?:error|version)",
    ),
    _family(
        "model_unsupported",
        C.UNSUPPORTED_MODEL,
        r"(?:architecture|model(?: type)?)s? \S+ (?:is |are )?not (?:yet )?supported"
        r"|unsupported (?:model|architecture)",
    ),
    _family(
        "model_files",
        C.MODEL_LOAD_ERROR,
        r"(?:config|checkpoint|weights?|tokenizer|safetensors|model)\S* (?:file )?(?:is )?"
        r"(?:not found|missing|does not exist)|no such file or directory: \S*(?:\.json|\.bin"
        r"|\.safetensors|model)",
    ),
    _family(
        "rejected_combination",
        C.INVALID_ARGUMENT,
        r"(?:is|are) not supported (?:with|when|for|on)|cannot be used (?:with|together)"
        r"|only supports?|is incompatible with|--[\w-]+ (?:must|should|requires?)",
    ),
    _family(
        "timed_out",
        C.HANG_TIMEOUT,
        r"timed? ?out|timeout|deadlock|stuck|no response|not responding",
    ),
)

_ERROR_RECORD = re.compile(
    r"^(?:ERROR|CRITICAL|FATAL)\b|^E\d{4} \d\d:\d\d:\d\d|\b(?:ERROR|CRITICAL)\s*[:\]|-]"
    r"|^what\(\):|Fatal Python error|Traceback \(most recent call last\)"
)
# Lines that say something failed, in the plain words of a log record.
_FAILURE_WORDS = re.compile(r"\b(?:failed|failure|could not|unable to|error)\b", re.IGNORECASE)
# ...but not these: warnings, fallbacks, one request's fate, progress bars.
_NOT_A_FAILURE = re.compile(
    r"\b(?:warn(?:ing)?|deprecat\w*|retrying|fall(?:ing)? ?back|skipp\w*|no errors?|errors?=0"
    r"|abort(?:ed)? request|request is disconnected)\b|%\|",
    re.IGNORECASE,
)
TEARDOWN = re.compile(
    r"Received sigquit from a child|scheduler is dead|exit code:? -?\d+|Scheduler hit an exception"
    r"|hit an exception|kill_process_tree called|Child process unexpectedly failed"
)


def family_of(text: str) -> Family | None:
    for family in FAMILIES:
        if family.pattern.search(text):
            return family
    return None


def reports_error(message: str) -> bool:
    """The line is an error by its form: an exception, an error record, a fatal banner,
    SGLang's teardown. A log with one of these failed, whatever else it says."""
    return bool(
        EXCEPTION_LINE.match(message) or _ERROR_RECORD.search(message) or TEARDOWN.search(message)
    )


def says_failed(message: str) -> bool:
    """The line is an error by its form, or says in plain words that something failed."""
    if reports_error(message):
        return True
    return _FAILURE_WORDS.search(message) is not None and not _NOT_A_FAILURE.search(message)
