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

import functools
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
    # Read in an exception's message only: in a log line the same words are more often
    # advice ("set --cuda-graph-max-bs to a smaller value") than the failure.
    exceptions_only: bool = False


def _family(
    name: str,
    failure_class: C,
    pattern: str,
    out_of_memory: bool = False,
    specific: bool = False,
    exceptions_only: bool = False,
) -> Family:
    compiled = re.compile(pattern, re.IGNORECASE)
    return Family(
        name, failure_class, compiled, out_of_memory, specific or out_of_memory, exceptions_only
    )


# A GPU too old or of another kind for what was asked, in the words of whoever refused it.
_GPU_CAPABILITY = (
    r"(?:compute capability|\bsm_?\d{2,3}a?\b|Ampere|Hopper|Blackwell|Turing|Volta|\bgfx\d+)"
    r".*(?:not supported|only supports?|requires?|unsupported|or newer)"
    r"|(?:not supported|only supports?|requires?|unsupported) .*(?:compute capability"
    r"|\bsm_?\d{2,3}a?\b|Ampere|Hopper|Blackwell|\bgfx\d+)"
)
FAMILIES: tuple[Family, ...] = (
    # Sizing: the numbers do not fit, before anything was allocated.
    _family(
        "memory_budget",
        C.POOL_INIT_OOM,
        r"not enough (?:\w+ )?memory (?:available|for|to|left)"
        r"|(?:requesting|requires?|need(?:s|ed)?) ~?\S+ ?[GMK]i?B,? but only"
        r"|leaves? no (?:\w+ )?(?:memory|room|space) for|cannot fit (?:one|a single|even one)\b",
        specific=True,
    ),
    _family(
        "linear_attention_state",
        C.MAMBA_CACHE_EXHAUSTED,
        r"(?:not enough|no) (?:space|slots?|memory|room) (?:\w+ )*?for mamba"
        r"|mamba\w* (?:cache|pool|state)\w* (?:is )?(?:too small|full|exhausted)"
        r"|(?:can ?not|cannot|failed to|unable to) alloc\w* (?:\w+ )?mamba"
        r"|increase --(?:mamba-full-memory-ratio|max-mamba-cache-size)",
        specific=True,
    ),
    # Every allocator's words for "no memory": PyTorch, CUDA and its libraries, HIP, XPU,
    # NPU, XLA, the C++ runtime, torch_memory_saver.
    _family(
        "allocation_failed",
        C.RUNTIME_OOM,
        r"out of (?:device |host |gpu )?memory|\bOOM\b|_ALLOC_FAILED|(?:memory )?allocation failed"
        r"|failed to allocate|can(?:no|')t allocate|failed to (?:cuda )?[cm]alloc"
        r"|insufficient (?:\w+ )?memory|cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY"
        r"|hipErrorOutOfMemory|OUT_OF_DEVICE_MEMORY|RESOURCE_EXHAUSTED|std::bad_alloc"
        r"|memory exhausted|cuMemCreate failed|cudaMalloc failed"
        r"|DefaultCPUAllocator: not enough memory",  # the CPU backend's allocator
        out_of_memory=True,
    ),
    _family(
        "token_slots",
        C.KV_POOL_EXHAUSTED,
        r"no space left for|token_to_kv_pool\w*\.available_size\(\)|kv cache pool is full"
        r"|no free (?:kv |token )?slots?",
        specific=True,
    ),
    _family(
        "port_taken",
        C.PORT_IN_USE,
        r"address already in use|port \S+ is (?:already )?(?:in use|occupied|taken|not available)"
        r"|(?:failed to|could not|cannot|unable to) bind(?: to)? (?:the )?port",
        specific=True,
    ),
    _family(
        "missing_package",
        C.DEPENDENCY_ERROR,
        r"no module named|pip install|is not installed|please install|cannot import name"
        r"|undefined symbol|version mismatch|requires? [\w.-]+ ?(?:>=|==|<=|>|<) ?v?\d+\.\d+"
        r"|GLIBC\w*_[\d.]+' not found|(?:compiled|built) against (?:a )?(?:different|incompatible)"
        r"|ABI (?:mismatch|incompat)|(?:package|library|module) [`'\"]?[\w.-]+[`'\"]? is required"
        r"|not found in your environment|requires? (?:a )?newer version of"
        # (not Python's "partially initialized module": a circular import, most often the
        # operator's own script named after the package it imports)
        r"|(?<!partially initialized )module '[\w.]+' has no attribute"
        r"|compiled with (?:different|an incompatible)"
        r"|operator [\w:]+ does not exist|binary incompatib|compiled using NumPy \d"
        r"|cannot be run in NumPy \d"
        # a compiled extension that did not load: torch.ops has none of its operators
        r"|'_OpNamespace' '[\w.]+' object has no attribute",
        specific=True,
    ),
    # Kernels: a JIT or ahead-of-time build, a GPU architecture without kernels, a launch.
    _family(
        "compilation",
        C.KERNEL_ERROR,
        r"compil(?:e|ation|ing)\b.*(?:fail|error)|fail\w* to (?:compile|build|jit)|ptxas"
        r"|nvcc|\bninja\b|\bJIT\b|no kernel image|MLIR|cutlass|triton|error building extension"
        r"|collect2|ld returned|cannot find -l|NVRTC|unsupported gpu architecture"
        r"|sm_\d+a? is not supported|InductorError|tilelang"
        # a prebuilt kernel with no binary for this GPU (a cubin, CUDA's driver API)
        r"|NO_BINARY_FOR_GPU|failed to load cubin"
        # torch.compile's own failures (Dynamo tracing, the backend compiler)
        r"|torch\._dynamo\.exc\.|BackendCompilerFailed"
        r"|too many resources requested for launch|fatal error: [\w/.]+\.(?:h|hpp|cuh): No such",
    ),
    _family(
        "peers_and_transport",
        C.DISTRIBUTED_INIT,
        r"nccl|gloo|c10d|rendezvous|process group|bootstrap|mooncake|nixl|rdma|ibverbs|ibv_\w+"
        r"|\bUCX\b|nvshmem"
        r"|hccl|rccl|oneccl|transfer (?:engine|task)|failed to complete transfers"
        r"|(?<![a-z])all_?reduce"  # not an operator's name (aclnnMatmulAllReduce)
        r"|\bbarrier\b|dist(?:ributed)? init|kv ?transfer|(?:prefill|decode) (?:instance|server)"
        r" failed|handshake",
    ),
    _family(
        "device_fault",
        C.CUDA_ERROR,
        r"cuda (?:error|failure)|cudaError|hip error|hipError|device-side|illegal (?:memory|"
        # CUDA's "an illegal instruction was encountered"; not the shell's SIGILL report
        r"instruction was)|\bXid\b|ECC error|driver (?:error|version)|unspecified launch failure"
        r"|fallen off the bus|GPU is lost|ACL error|aclrt\w+ failed|ACL (?:\w+ ){1,2}failed"
        r"|\bE[EZ]9999\b|NPU error|driver .{0,30}too old|update your GPU driver"
        # CUDA that cannot start on GPUs that are there (error 100 is no GPU at all: other)
        r"|unexpected error from cudaGetDeviceCount(?!.*\bError 100\b)"
        r"|CUDA driver initialization failed|\bcuInit\b.{0,40}fail"
        # Intel's Level Zero (XPU): a GPU the driver reset under the process
        r"|\b(?:UR|ZE)_RESULT_ERROR_DEVICE_LOST\b|level_zero backend failed",
    ),
    _family(
        "model_unsupported",
        C.UNSUPPORTED_MODEL,
        r"(?:architecture|model(?: type)?)s? \S+ (?:is |are )?not (?:yet )?supported"
        r"|unsupported (?:[\w-]+ )?(?:model|architecture)|does not recognize this architecture"
        r"|no (?:model|implementation) (?:class )?(?:found |registered )?for"
        r" (?:architecture|model)|processor registered (?:in \w+ )?for (?:architecture|model)"
        r"|unimplemented model type|does not support (?:the )?model (?:architecture|type)"
        # SGLang's registry, when the module that holds an architecture would not import
        r"|architectures? \[[^\]]*\] failed to be inspected",
        specific=True,
    ),
    _family(
        "model_files",
        C.MODEL_LOAD_ERROR,
        r"(?:config|checkpoint|weights?|tokenizer|safetensors|model)\S* (?:file )?(?:is )?"
        r"(?:not found|missing|does not exist)|no such file or directory: \S*(?:\.json|\.bin"
        r"|\.safetensors|model)|size mismatch for|shape mismatch|unexpected keys?\b|missing keys?"
        # an adapter's weights against the buffers the base model gives them
        r"|(?:buffer|weight) shape .{0,80}(?:does not|doesn't) match (?:the )?"
        r"(?:buffer|weight) shape"
        r"|HeaderTooLarge|incomplete (?:download|checkpoint)"
        r"|no model weights found|not all (?:parameters|weights) (?:were )?loaded|gguf config",
    ),
    # A checkpoint whose config or tensors do not hold what the model needs.
    _family(
        "model_config",
        C.MODEL_LOAD_ERROR,
        r"(?:not found|missing|cannot find|can't find)\b.{0,40}\b(?:in|from) (?:the )?"
        r"(?:model'?s? )?(?:quantization )?config|config(?:\.json)? (?:error|is missing)"
        r"|missing (?:\w+ ){0,2}config|hf_quant_config|checkpoint (?:key|has no)"
        r"|(?:rope_\w+|head_dim) not found|\w*config\.json\b|has shape .{0,60}expected"
        r"|\b(?:weights?|checkpoint|parameters?|tensors?)\b.{0,40}\b(?:not found|missing|must "
        r"declare|coverage|do not correspond)",
    ),
    # A flag or a backend the operator chose that this GPU cannot run: the choice rejected.
    _family(
        "flag_needs_other_gpu",
        C.INVALID_ARGUMENT,
        rf"^(?=.*(?:--[a-z][\w-]+|\bbackend\b)).*(?:{_GPU_CAPABILITY})",
    ),
    # A kernel that exists only for other GPUs.
    _family("gpu_capability", C.KERNEL_ERROR, _GPU_CAPABILITY),
    _family(
        "model_download",
        C.MODEL_LOAD_ERROR,
        r"huggingface\.co|snapshot_download|HF_HUB_OFFLINE|\b40[13] Client Error|gated repo"
        r"|while downloading using `hf_transfer`"
        r"|repository not found|does not exist or is not currently imported"
        # transformers' words for a path that is neither a folder nor a repo id
        r"|Incorrect path_or_model_id|is not a (?:local folder|valid model identifier)",
    ),
    # The system refusing a model's own file (a read-only mount under the hub's lock file, a
    # weights shard it cannot write or read): loading the model failed.
    _family(
        "model_file_refused",
        C.MODEL_LOAD_ERROR,
        r"\[Errno \d+\] [^:]+: '[^']*(?:\.safetensors|\.gguf|/huggingface/(?:hub|download)/)",
    ),
    _family(
        "api_mismatch",
        C.DEPENDENCY_ERROR,
        r"got an unexpected keyword argument|takes \d+ positional arguments? but \d+ (?:were|was)"
        r" given|missing \d+ required positional argument",
    ),
    # A setting (a flag, an SGLANG_ variable) rejected in so many words: what it must be, what
    # it requires, what it cannot be combined with. After the topic families: the advice under
    # a failed graph capture ("set --cuda-graph-max-bs to a smaller value") is no rejection.
    _family(
        "setting_rejected",
        C.INVALID_ARGUMENT,
        # Environment variables are upper case: a path such as /tmp/sglang_mm/ is no setting.
        r"(?:^|[\s`'\"(=\[])--[a-z][\w-]+|(?-i:\bSGLANG_[A-Z0-9_]+)",
        exceptions_only=True,
    ),
    # Parallel sizes that do not fit the model's shapes.
    _family(
        "parallel_sizes",
        C.INVALID_ARGUMENT,
        r"(?:(?:tensor|pipeline|expert|data|attention|context) parallel size"
        r"|\b(?:tp|ep|dp|pp|moe_ep|attn_tp|attn_dp)_size\b|world[ _]size)\b.{0,60}"
        r"\b(?:greater than|larger than|exceeds|divisible|aligned|must be|multiple of)"
        r"|too large tensor parallel size|tensor_parallel"
        r"|divisible by (?:the )?(?:attn(?:ention)? )?(?:tp|ep|dp|pp|world)\b"
        r"|divisible by (?:the )?(?:tp|ep|dp|pp|attn_tp)(?:_size| size)",
    ),
    _family(
        "rejected_combination",
        C.INVALID_ARGUMENT,
        r"(?:is|are) not supported (?:with|when|together)|cannot be (?:used|enabled|combined)"
        r" (?:with|together|when)|is incompatible with|mutually exclusive"
        r"|--[\w-]+ (?:must|should|requires?|is required|cannot|only)|please (?:set|use|specify"
        r"|disable|enable) --|invalid value for|custom code which must be executed"
        r"|trust_remote_code=True",
    ),
    _family(
        "timed_out",
        C.HANG_TIMEOUT,
        r"timed? ?out|timeout|deadlock|stuck|no response|not responding|health check failed"
        r"|exceeded its progress deadline"  # a Deployment's rollout that never became ready
        r"|not ready after (?:waiting )?\S+ seconds",
    ),
)

# An error record by its opening: a level, a glog "E" line, a program's "name: error:".
_ERROR_OPENING = re.compile(
    # glog's error records; Ascend's error manager (CANN), its module and code first
    r"(?:ERROR|CRITICAL|FATAL)\b|E\d{4} \d\d:\d\d:\d\d|E[A-Z]\d{4}: |what\(\):"
    r"|(?:Error|error|Fatal|fatal)"
    r"(?:\[[\w-]+\])?: |[\w.-]+: (?:[Ee]rror|[Ff]atal)\b|panic: "
    r"|(?:Segmentation fault|Bus error|Illegal instruction|Aborted|Floating point exception)\b"
    # systemd's verdict on a unit ("sglang.service: Failed with result 'exit-code'."); not
    # 'signal', which a stop the unit did not exit 0 from reads too
    r"|[\w@.-]+\.service: Failed (?:with result '(?!signal')|at step )"
)
# ...or anywhere in the line; each alternative carries a literal, checked first.
_ERROR_INSIDE_LITERALS = (
    "ERROR",
    "CRITICAL",
    "Fatal Python error",
    "Traceback (most recent",
    "terminate called",
    "Segfault",
    "*** SIG",
    "panicked at ",
    "level",
)
_ERROR_INSIDE = re.compile(
    r"\b(?:ERROR|CRITICAL)\s*[:\]|-]|Fatal Python error|Traceback \(most recent call last\)"
    r"|terminate called after throwing|Segfault encountered|\*\*\* SIG\w+ received|panicked at "
    r"|\"level\": ?\"(?:error|fatal|critical)\"|\blevel=(?:error|fatal)\b"
)
_TEARDOWN_LITERALS = (
    "sigquit",
    "SIGQUIT",
    "scheduler is dead",
    "xit code",
    "hit an exception",
    "kill_process_tree",
    "unexpectedly failed",
)
# Lines that say something failed, in the plain words of a log record.
_FAILURE_WORDS = re.compile(
    r"\b(?:failed|failure|could not|unable to|error|not found)\b", re.IGNORECASE
)
# ...but not these: warnings, advice, fallbacks, one request's fate, progress bars.
_NOT_A_FAILURE = re.compile(
    r"\b(?:warn(?:ing)?|deprecat\w*|retrying|fall(?:ing)? ?back|skipp\w*|no errors?|errors?=0"
    r"|abort(?:ed)? request|request is disconnected|to avoid|beware|please note|consider"
    r"|you (?:may|might|can|need to)|NCCL INFO|sub-?optimal)\b|%\|",  # NCCL_DEBUG=INFO's: info
    re.IGNORECASE,
)
# SGLang's teardown. Not its kill_process_tree with include_parent=False: that is
# Engine.shutdown() and launch_server's finally, which every exit passes, clean ones too.
TEARDOWN = re.compile(
    r"Received sigquit from a child|SIGQUIT received|scheduler is dead|exit code:? (?!0\b)-?\d+"
    r"|Scheduler hit an exception|hit an exception"
    r"|kill_process_tree called(?!.*include_parent=False)|Child process unexpectedly failed"
)


# A command a wrapper quotes whole as it reports the command's end ("Command '[...]' returned
# non-zero exit status 1"): the flags in it are the operator's, not a setting rejected.
_QUOTED_COMMAND = re.compile(r"\bCommand '.*?'(?= returned non-zero exit status| timed out after)")


# The same line is asked about by several layers (its wording, the exception it raised, a
# collective's error above it): cached, since each family is a case-blind search of the line.
@functools.lru_cache(maxsize=4096)
def family_of(text: str, in_exception: bool = True) -> Family | None:
    if "Command '" in text:
        text = _QUOTED_COMMAND.sub("Command", text)
    for family in FAMILIES:
        if (in_exception or not family.exceptions_only) and family.pattern.search(text):
            return family
    return None


def reports_error(message: str) -> bool:
    """The line is an error by its form: an exception, an error record, a fatal banner,
    SGLang's teardown. A log with one of these failed, whatever else it says."""
    if EXCEPTION_LINE.match(message) or _ERROR_OPENING.match(message):
        return True
    if any(lit in message for lit in _ERROR_INSIDE_LITERALS) and _ERROR_INSIDE.search(message):
        return True
    return any(lit in message for lit in _TEARDOWN_LITERALS) and bool(TEARDOWN.search(message))


def says_failed(message: str) -> bool:
    """The line is an error by its form, or says in plain words that something failed
    (SGLang's own error records carry no level: "... library not found. Please install it")."""
    if reports_error(message):
        return True
    return _FAILURE_WORDS.search(message) is not None and not _NOT_A_FAILURE.search(message)
