"""The classification rules, as data.

A signature is a decisive shape of line. The classifier finds every line that matches a
signature, lets the highest priority decide the class, and takes the earliest line of that
signature as the root cause. Priorities encode two things at once: which kind of evidence
outranks which (a cause outranks its consequences: the warmup failure that follows a port
collision, the "device busy" that follows an illegal memory access), and which wording is
the most specific for the same failure (PyTorch's "CUDA out of memory. Tried to allocate"
outranks the "CUDA error: out of memory" another thread raised first).

Some failures need context to name: an out-of-memory error is a weights, pool, CUDA-graph
or runtime OOM depending on where it happened, and a native crash inside NCCL is a
distributed failure. Such signatures carry a ``resolve`` step instead of a fixed class.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from exporter.diagnosis.taxonomy import FailureClass as C
from exporter.diagnosis.taxonomy import Phase
from exporter.logs.literals import KILLED_TRANSLATED, KILLED_TRANSLATED_WORDS, any_of


class Resolve(enum.Enum):
    FIXED = "fixed"
    OUT_OF_MEMORY = "out_of_memory"  # by frames, wrapper and lifecycle: see classify.py
    NATIVE_CRASH = "native_crash"  # NCCL frames in the backtrace make it distributed
    # A collective that may have failed because an allocation did (NCCL's "Failed to CUDA
    # calloc"): memory becomes the runner-up.
    COLLECTIVE = "collective"
    # A collective that timed out: a hang once serving, the group never formed before.
    COLLECTIVE_TIMEOUT = "collective_timeout"
    # A C++ exception's message: its words name the class, else it is the crash it ends in.
    NATIVE_MESSAGE = "native_message"
    # JSON that does not parse: a flag's value (one line) when the log passes one, else a file.
    JSON_SOURCE = "json_source"


@dataclass(frozen=True)
class Signature:
    name: str
    failure_class: C
    literals: tuple[str, ...]  # cheap prefilter: one of them must be in the line
    regex: re.Pattern[str]
    priority: int
    resolve: Resolve = Resolve.FIXED
    phase: Phase | None = None  # where this line can only come from, when the log shows no steps

    def matches(self, text: str) -> bool:
        return any(lit in text for lit in self.literals) and self.regex.search(text) is not None


def sig(
    name: str,
    failure_class: C,
    literals: str | tuple[str, ...],
    regex: str,
    priority: int,
    resolve: Resolve = Resolve.FIXED,
    phase: Phase | None = None,
) -> Signature:
    if isinstance(literals, str):
        literals = (literals,)
    return Signature(name, failure_class, literals, re.compile(regex), priority, resolve, phase)


OOM = Resolve.OUT_OF_MEMORY
# CUDA's errors for a kernel launched wrong (its grid, its resources, no code for the GPU).
_LAUNCH_ERRORS = (
    "too many blocks|invalid configuration argument|too many resources requested"
    "|no kernel image|invalid device function"
)
# An exit status of 128 + a fatal signal's number: ABRT, BUS, FPE, KILL, SEGV.
_SIGNAL_EXIT = r"13[4-79]\b"
# A CANN coded line whose reason is memory ("EL0004: Failed to allocate memory.").
_CANN_MEMORY = (
    r".*(?i:out of memory|failed to (?:m?alloc|allocate)|alloc\w* (?:\w+ )?memory (?:\w+ )?fail)"
)
# The AI Core (or its vector core) faulting as it ran a kernel: CANN's words for the device's
# execution failing, not the operator's check.
_AI_CORE_FAULT = r".*(?i:ai ?core (?:error|exception|execution)|aivec error|vector core exec)"
# Below this priority a signature names a condition or a consequence; a Python exception of
# its own (judged by its frames and wording) says more about the cause.
DECISIVE = 50
# Tiers: 100 specific cause, 90 specific but sometimes secondary, 80 generic family,
# 60 crash without a Python cause, 40 non-fatal condition, 20 consequence only.
SIGNATURES: tuple[Signature, ...] = (
    # --- memory pools sized at startup
    sig(
        "not_enough_memory",
        C.POOL_INIT_OOM,
        "memory. Please try to increase --mem-fraction-static",
        r"Not enought? memory\. Please try to increase --mem-fraction-static",
        100,
    ),
    sig(
        "weights_leave_no_memory",
        C.POOL_INIT_OOM,
        "Loaded weights leave no GPU memory",
        r"Loaded weights leave no GPU memory",
        100,
    ),
    sig(
        "hybrid_state_no_memory",
        C.POOL_INIT_OOM,
        "Not enough GPU memory for hybrid",
        r"Not enough GPU memory for hybrid",
        100,
    ),
    sig(
        "pool_too_small",
        C.POOL_INIT_OOM,
        ("Memory pool size is too small", "max_running_request is zero"),
        r"Memory pool size is too small|max_running_request is zero",
        95,
    ),
    # --- linear-attention (mamba) state
    sig(
        "mamba_no_space",
        C.MAMBA_CACHE_EXHAUSTED,
        # 0.5.21+ says the second when the state slots sized at startup hold no request
        # (kv_cache_configurator.resolve_max_num_reqs), as the planner's 0.5.23 sizer does.
        ("Not enough space for mamba", "state cache is too small to serve"),
        r"Not enough space for mamba|state cache is too small to serve any requests",
        100,
    ),
    sig(
        # The radix cache finding no free state slot for a request's forked or loaded-back
        # state (mamba_radix_cache, the unified cache's mamba component; 0.5.16+).
        "mamba_no_slot",
        C.MAMBA_CACHE_EXHAUSTED,
        ("alloc mamba",),
        r"(?<![\"'])Can ?not alloc mamba",  # not the assert's source line, quoting it
        90,
    ),
    # --- KV pool exhausted while serving
    sig(
        "prefill_decode_oom",
        C.KV_POOL_EXHAUSTED,
        (
            "ut of memory. Try to lower",
            "runs out of memory",
            "smaller number for `--max-running-requests`",
            "Out of memory even after retracting",
            "ut of memory. This should never happen",
        ),
        # The token pool: "Prefill/Decode out of memory. Try to lower your batch size", and
        # the allocator's own "Out of memory. Try to lower your batch size." (alloc_token_slots).
        # The request slots: "alloc_req_slots runs out of memory. Please set a smaller number
        # for `--max-running-requests`" (0.4.6+), plain "Out of memory. Please set ..." before.
        r"(?:Prefill|Decode) out of memory\. Try to lower|Out of memory\. Try to lower your batch"
        r"|alloc_req_slots runs out of memory"
        r"|Please set a smaller number for `--max-running-requests`"
        r"|Out of memory even after retracting"
        # 0.1.x: the decode step could not place a batch even after retracting
        r"|Decode out of memory\. This should never happen",
        100,
        phase=Phase.RUNTIME,
    ),
    sig(
        "retraction",
        C.KV_POOL_EXHAUSTED,
        "#retracted_reqs",
        # 0.1.x wrote "decode out of memory happened" in lower case
        r"KV cache pool is full\. Retract requests|[Dd]ecode out of memory happened",
        40,
        phase=Phase.RUNTIME,
    ),
    # --- device memory (class resolved by where it happened)
    sig(
        "graph_capture_oom",
        C.CUDA_GRAPH_OOM,
        ("graph failed", "Graph failed"),
        r"(?i)capture .*graph failed: .*(?:out of memory|OutOfMemory)",
        # Below torch_oom: the wrapper repeats the inner OOM, which is the root cause line.
        87,
    ),
    sig(
        "torch_oom",
        C.RUNTIME_OOM,
        ("out of memory. Tried to allocate", "OutOfMemoryError"),
        # Not Ray's OutOfMemoryError: its memory monitor killed a worker for host memory;
        # nor ECS's reason for a container its memory limit stopped.
        r"(?:CUDA|HIP|XPU|NPU) out of memory\. Tried to allocate"
        r"|(?<!ray\.exceptions\.)OutOfMemoryError(?!: Container killed due to memory usage)",
        88,
        OOM,
    ),
    sig(
        "kernel_reported_oom",
        C.RUNTIME_OOM,
        ("failed with error out of memory", "cudaErrorMemoryAllocation"),
        r"failed with error (?:code )?out of memory|cudaErrorMemoryAllocation",
        86,
        OOM,
    ),
    sig(
        # Ascend's error manager (CANN) saying the device is out of memory, by its code
        # ("EL0004: [PID: N] ... Failed to allocate memory."); see the module codes below
        "cann_out_of_memory",
        C.RUNTIME_OOM,
        ("memory", "Memory"),
        rf"(?:^|detail:)E[A-Z]\d{{4}}: {_CANN_MEMORY}",
        86,
        OOM,
    ),
    sig(
        "cuda_error_oom",
        C.RUNTIME_OOM,
        (
            "rror: out of memory",
            "CPUAllocator: can't allocate memory",
            "_ALLOC_FAILED",
            " 2 (out of memory)",
        ),
        # CUDA's error 2 by number and name, as CUDA checks print it (torch_memory_saver's
        # "cudaError error: 2 (out of memory)", a CUresult's "error: 2 (out of memory)").
        r"(?:CUDA|HIP) [Ee]rror: out of memory|DefaultCPUAllocator: can't allocate memory"
        r"|CUBLAS_STATUS_ALLOC_FAILED|\berror:? 2 \(out of memory\)",
        84,
        OOM,
    ),
    # --- ports
    sig(
        "address_in_use",
        C.PORT_IN_USE,
        (
            "ddress already in use",
            "EADDRINUSE",
            "rrno 98",
            "rrno: 98",
            "failed to listen on any",
            "failed to bind to",
            "code: -98",
            "port is already allocated",
        ),
        # ... but not an address this host does not have (errno 99, EADDRNOTAVAIL): no port
        # is taken, the address is wrong
        r"^(?!.*(?:EADDRNOTAVAIL|errno: 99\b|code: -99\b|[Cc]annot assign requested address))"
        r".*(?:(?i:address already in use)|EADDRINUSE|\[Errno 98\]|errno: 98\b"
        r"|failed to listen on any local network|socket has failed to bind to|code: -98\b"
        r"|port is already allocated)",  # docker publishing a host port another holds
        100,
    ),
    sig(
        "dp_port_in_use",
        C.PORT_IN_USE,
        ("Port is already in use", "is not available in"),
        r"Port is already in use|at \d+ is not available in \d+ seconds",
        100,
    ),
    # --- arguments and configuration
    sig(
        "argparse",
        C.INVALID_ARGUMENT,
        ": error: ",
        r"^[\w./-]+(?: serve)?: error: (?:unrecognized arguments|argument |ambiguous option"
        r"|the following arguments are required|invalid choice|one of the arguments)",
        100,
    ),
    sig(
        # getopt's own rejection, a C program's (an init wrapper such as dumb-init or tini
        # given the server's flags as its own)
        "getopt",
        C.INVALID_ARGUMENT,
        ("unrecognized option '", "invalid option -- "),
        r"^[\w./-]+: (?:unrecognized option '--?[\w-]+'|invalid option -- '?\w'?)",
        90,
    ),
    sig(
        # The in-process Engine (sgl.Engine(**kwargs)) takes its options as keywords of
        # ServerArgs: one it does not have (vLLM's gpu_memory_utilization) is an unknown flag.
        "server_args_keyword",
        C.INVALID_ARGUMENT,
        "ServerArgs.__init__() ",
        r"ServerArgs\.__init__\(\) (?:got an unexpected keyword argument|missing \d+ required)",
        100,
    ),
    sig(
        "context_length",
        C.INVALID_ARGUMENT,
        "is greater than the derived context_length",
        r"is greater than the derived context_length",
        100,
    ),
    sig(
        "tp_partition",
        C.INVALID_ARGUMENT,
        "is not divisible by",
        r"(?:partition|size|heads|num_\w+|dim\w*|experts?|weights?|tp_size|block_[nk])"
        r"\s*(?:=\s*\d+\s*)?"
        r"is not divisible by",
        95,
    ),
    sig(
        "parallel_layout",
        C.INVALID_ARGUMENT,
        ("_size", "divisible"),
        r"% \(?(?:self\.)?(?:attn_|moe_)?(?:tp|tensor_parallel|dp|pp|ep|moe_ep|world)_size\)? == 0"
        r"|(?:tp|dp|pp|ep)_size must be divisible|must be divisible by (?:the )?number of nodes",
        95,
    ),
    sig(
        # A quantization this GPU cannot run (NVFP4 before Blackwell, W8A8-FP8 before Ada),
        # asked by a flag or by the checkpoint: a combination rejected at startup.
        "quantization_needs_newer_gpu",
        C.INVALID_ARGUMENT,
        "is not supported for the current GPU",
        r"The quantization method .+ is not supported for the current GPU",
        95,
    ),
    sig(
        "quantization_mismatch",
        C.INVALID_ARGUMENT,
        "does not match the quantization method",
        r"does not match the quantization method",
        100,
    ),
    sig(
        "rejected_value",
        C.INVALID_ARGUMENT,
        ("Unknown speculative algorithm", "is not supported with", "requires --", "must be"),
        r"Unknown speculative algorithm|^(?:ValueError|AssertionError|NotImplementedError): .*"
        r"(?:is not supported with|requires --|--[\w-]+ must be)",
        90,
    ),
    # --- the model
    sig(
        # An architecture SGLang lacks, run through its Transformers backend instead: when the
        # run then fails with no cause of its own above this (an attention the fallback cannot
        # run, a layer it lacks), SGLang cannot serve the model; a fallback that served is none
        "transformers_fallback",
        C.UNSUPPORTED_MODEL,
        "falling back to Transformers implementation",
        r"(?i:has no SGLang implementation), falling back to Transformers implementation",
        44,  # below any cause the run names (an exception's family, a signature's words)
    ),
    sig(
        "architecture_unsupported",
        C.UNSUPPORTED_MODEL,
        (
            "are not supported for now",
            "Unsupported architectures",
            "has model type",
            "is not a registered model",
            "Transformers implementation is not compatible",
        ),
        r"are not supported for now|Unsupported architectures?:|checkpoint you are trying to "
        r"load has model type|is not a registered model in the Transformers library"
        r"|Transformers implementation is not compatible",
        100,
    ),
    sig(
        # huggingface_hub warning, before a download, that the disk cannot hold the file: the
        # cause of the "No space left on device" that follows (no failure if the server serves)
        "download_disk_full",
        C.MODEL_LOAD_ERROR,
        "Not enough free disk space",
        r"Not enough free disk space to download the file",
        49,  # above the exception its download then raises
    ),
    sig(
        # --chat-template / --completion-template naming no built-in template and no file
        "template_rejected",
        C.INVALID_ARGUMENT,
        "template name or a valid",
        r"is not a built-in template name or a valid (?:chat |completion )?template file path",
        95,
    ),
    sig(
        "model_config_unreadable",
        C.MODEL_LOAD_ERROR,
        ("Can't load the configuration", "Can't load tokenizer", "Incorrect path_or_model_id"),
        r"Can't load (?:the configuration|tokenizer) (?:of|for) |Incorrect path_or_model_id: ",
        96,  # transformers' own summary, above the HFValidationError it wraps
    ),
    sig(
        "model_files",
        C.MODEL_LOAD_ERROR,
        (
            "Cannot find any model weights",
            "is not a local folder",
            "HFValidationError",
            "Repo id must",
            "Unrecognized configuration class",
            "does not appear to have a file",
            "Can't load tokenizer",
            "Can't load the configuration",
            "SafetensorError",
            "Error while deserializing header",
            "RepositoryNotFoundError",
            "GatedRepoError",
            "LocalEntryNotFoundError",
            "loaded_weight.shape",
            "Unrecognized model in",
        ),
        r"Cannot find any model weights|is not a local folder and is not a valid model"
        r"|HFValidationError|Repo id must|Unrecognized configuration class"
        r"|does not appear to have a file named|Can't load (?:tokenizer|the configuration)"
        r"|SafetensorError|Error while deserializing header|RepositoryNotFoundError"
        r"|GatedRepoError|LocalEntryNotFoundError|loaded_weight\.shape|Unrecognized model in",
        95,
    ),
    sig(
        # JSON that does not parse: a model's config file, or the flag that overrides it
        "json_unreadable",
        C.MODEL_LOAD_ERROR,
        "JSONDecodeError",
        r"JSONDecodeError",
        95,
        Resolve.JSON_SOURCE,
    ),
    sig(
        "missing_weight_key",
        C.MODEL_LOAD_ERROR,
        "KeyError: '",
        r"^KeyError: '[\w.]*(?:weight|bias|scale|proj|embed|lm_head|layers)[\w.]*'",
        90,
    ),
    # --- packages
    sig(
        "missing_package",
        C.DEPENDENCY_ERROR,
        (
            "ModuleNotFoundError",
            "ImportError",
            "No module named",
            "minimum required version",
            "which is less than the minimum",
            "cannot open shared object file",
        ),
        r"^(?:[\w.]+\.)?(?:ModuleNotFoundError|ImportError)\b|with minimum required version .* is "
        r"not installed|which is less than the minimum required version"
        r"|^OSError: .*cannot open shared object file"
        # ... and the interpreter's own word for `python -m sglang...` where it is not installed
        r"|^\S*python[\d.]*: No module named \S+",
        95,
    ),
    sig(
        "shared_library_missing",
        C.DEPENDENCY_ERROR,
        ("cannot open shared object file", "undefined symbol"),
        # (not NCCL looking for an optional plugin: "NCCL INFO NET/Plugin: ... libnccl-net.so")
        r"^(?!.* NCCL INFO ).*cannot open shared object file"
        r"|^(?:- )?ImportError: .*undefined symbol",
        96,
    ),
    sig(
        # systemd finding no program where the unit's ExecStart= points (status=203/EXEC): the
        # environment the unit runs was never installed there, or was removed; or the shell
        # finding no Python on the PATH it was given (cron's, a unit's), or a container's
        "unit_program_missing",
        C.DEPENDENCY_ERROR,
        ("Failed at step EXEC spawning", "not found"),
        r"Failed at step EXEC spawning \S+: No such file or directory"
        r"|^(?:\S*/)?(?:ba|da)?sh: (?:line )?\d+: (?:\S*/)?python[\d.]*: (?:command )?not found$"
        # ... or the container runtime finding no such program in the image for its command
        # (not a probe's "OCI runtime exec failed": that is the probe's program)
        r'|OCI runtime create failed: .*exec: "[^"]+": executable file not found in \$PATH',
        90,
    ),
    sig(
        "package_metadata",
        C.DEPENDENCY_ERROR,
        "PackageNotFoundError",
        r"PackageNotFoundError",
        85,
    ),
    # --- kernels (compile, JIT, launch) and device errors
    sig(
        "kernel_unavailable",
        C.KERNEL_ERROR,
        (
            "no kernel image is available",
            "Ninja is required",
            "out of resource: shared memory",
            "OutOfResources",
            "CompilationError",
            "nvcc fatal",
            "too many blocks in cooperative",
            "failed with error code",
            "Triton Error",
            "ninja: build stopped",
            "Failed to compile JIT",
        ),
        r"no kernel image is available|Ninja is required|out of resource: shared memory"
        r"|OutOfResources|CompilationError|nvcc fatal|too many blocks in cooperative launch"
        r"|^(?:RuntimeError: )?\w+ failed with error code (?!out of memory)"
        r"|Triton Error \[\w+\]: (?!out of memory)"
        # a JIT build that stopped, in ninja's words or in what called it
        r"|ninja: build stopped: subcommand failed|Failed to compile JIT\b",
        92,
    ),
    sig(
        "compiler_error",
        C.KERNEL_ERROR,
        ("error", "ptxas fatal", "nvcc fatal", "InvalidCxxCompiler", "fatal error: "),
        r"\.(?:h|hpp|cuh|cu|cpp|cc|c)(?:\(\d+\)|:\d+(?::\d+)?): (?:fatal |catastrophic )?error"
        # ... and ptxas's own error line, above the "ptxas fatal" that sums it up, and
        # torch.compile's build finding no C++ compiler at all
        r"|ptxas fatal|nvcc fatal|^ptxas \S+, line \d+; error\s*:|^(?:ptxas|nvcc) error +: "
        r"|InvalidCxxCompiler: No working C\+\+ compiler"
        # ... and a compiler's fatal error of its own, no source file to name (its output
        # unwritable, the compiler killed): "c++: fatal error: Killed signal terminated ..."
        r"|^(?:(?:c\+\+|g\+\+|gcc|cc|cc1plus|nvcc|clang\+*): )?fatal error: (?!\S+\.\w+: No such)",
        97,
    ),
    sig(
        # The toolchain a JIT build calls, missing: the linker a library, the shell the
        # compiler. As decisive as the build's failure around it: the earlier line is the root.
        "toolchain_missing",
        C.KERNEL_ERROR,
        ("cannot find -l", "not found"),
        r"\bld: cannot find -l\S+"
        r"|^/bin/(?:ba)?sh: (?:\d+: )?\S*/(?:nvcc|gcc|g\+\+|cc|c\+\+|ninja|hipcc): not found",
        92,
    ),
    sig(
        # A native library's (DeepEP's) own check, or a launch its kernel got wrong; the
        # device's faults in the same words (an illegal access, an NVLink error) are CUDA's.
        "native_library_check",
        C.KERNEL_ERROR,
        "Failed: ",
        r"^RuntimeError: Failed: (?:Assertion error \S+\.(?:cu|cuh|cpp):\d+"
        rf"|CUDA error \S+\.(?:cu|cuh|cpp):\d+ '(?:{_LAUNCH_ERRORS}))",
        95,
    ),
    sig(
        # FlashInfer's own check (its FLASHINFER_ERROR macro) failing inside a kernel's
        # dispatch: "Error in function 'BatchPrefill...' at .../flashinfer/attention/...cuh:N"
        "flashinfer_check",
        C.KERNEL_ERROR,
        ("Error in function '", "FlashInfer Internal Error"),
        # (or its own words alone, where a wrapper quotes them: "Capture cuda graph failed:
        # FlashInfer Internal Error: Invalid configuration ...")
        r"Error in function '\w+' at \S*flashinfer\S*:\d+|FlashInfer Internal Error",
        90,
    ),
    sig(
        "jit_toolchain",
        C.KERNEL_ERROR,
        "CalledProcessError",
        r"CalledProcessError: Command '\[?'?[^']*(?:gcc|g\+\+|nvcc|clang|ninja|cc)'",
        92,
    ),
    sig(
        "device_assert",
        C.CUDA_ERROR,
        ("Assertion failed: ", "device-side assert", "Assertion `", "Device-side assertion `"),
        # ... and HIP's, under ROCm ("Indexing.hip:1289: ...: Device-side assertion `...' failed.")
        r"^Assertion failed: \S+\.cu:\d+|device-side assert triggered"
        r"|\.(?:cu|hip):\d+: .*(?:Assertion|Device-side assertion) `",
        96,
    ),
    sig(
        "cuda_fault",
        C.CUDA_ERROR,
        (
            "illegal memory access",
            "illegal instruction",
            "misaligned address",
            "access fault by GPU",
            "HW Exception by GPU",
        ),
        # ROCm says "Memory access fault by GPU node-N" for the same fault
        r"illegal memory access|an illegal instruction was encountered|misaligned address"
        r"|Memory access fault by GPU|HW Exception by GPU node-\d+",
        95,
    ),
    sig(
        "cuda_error",
        C.CUDA_ERROR,
        ("CUDA error", "HIP error: ", "CUBLAS_STATUS_", "CUDA driver error", "cudaError"),
        r"(?:CUDA|HIP) error: (?!out of memory|CUBLAS_STATUS_ALLOC)|CUBLAS_STATUS_(?!ALLOC)"
        r"|CUDA driver error"
        # a native library's check, with its source file: "CUDA error deep_ep.cpp:587 '...'"
        r"|CUDA error \S+\.(?:cu|cuh|cpp):\d+ '(?!out of memory)"
        r"|cudaError(?!MemoryAllocation)",
        80,
    ),
    # Ascend's runtime (CANN) reports a failure by code, under torch_npu's "... error code is
    # N" or its "ERRnnnnn ... api failed" header, and says why on the coded line: the code's
    # letters name the module (EZ the operators, EI and EJ collective communication, HCCL and
    # HCCP). An operator's own check is a kernel error; the AI Core faulting while it ran is
    # the device's, as an illegal memory access is CUDA's, and its report opens with "EZ9999:
    # Inner Error!" before the line that says which: that one decides. A coded line that says
    # the device ran out of memory is an OOM (above).
    sig(
        "cann_operator_error",
        C.KERNEL_ERROR,
        "EZ",
        rf"detail:EZ\d{{4}}: |^EZ\d{{4}}: (?!Inner Error)(?!{_CANN_MEMORY})(?!{_AI_CORE_FAULT})",
        91,
    ),
    sig(
        "cann_collective_timeout",
        C.HANG_TIMEOUT,
        ("EI", "EJ"),
        rf"(?:^|detail:)E[IJ]\d{{4}}: (?!{_CANN_MEMORY}).*\btime[sd]? out\b",
        91,
        Resolve.COLLECTIVE_TIMEOUT,
    ),
    sig(
        "cann_collective_error",
        C.DISTRIBUTED_INIT,
        ("EI", "EJ"),
        rf"(?:^|detail:)E[IJ]\d{{4}}: (?!{_CANN_MEMORY})",
        90,
    ),
    sig(
        # The kernel driver's report of a GPU fault (dmesg, a journal that merges the
        # kernel's messages): an Xid, a GPU lost from the bus; the other vendors' drivers in
        # their words (amdgpu, Intel's xe and i915, Habana's). As decisive as the device error
        # it causes, so the earlier of the two is the root.
        "gpu_xid",
        C.CUDA_ERROR,
        ("NVRM: Xid", "fallen off the bus", "amdgpu", "[drm]", "habanalabs"),
        r"NVRM: Xid \(|GPU has fallen off the bus"
        r"|amdgpu: (?:ring \w+ timeout|\[gfxhub\] page fault|GPU reset begin)|amdgpu_job_timedout"
        r"|\b(?:xe|i915) \S+: \[drm\] (?:\w+: )?(?:Engine reset|GPU HANG)"
        r"|habanalabs \w+: Device critical error",
        80,
    ),
    sig(
        # The HIP runtime's fatal report, its error name first ("hipErrorNoBinaryForGpu:
        # Unable to find code object ..."): ROCm's twin of cudaError. Not its API trace
        # (AMD_LOG_LEVEL), where a poll's hipErrorNotReady is no failure.
        "hip_runtime_error",
        C.CUDA_ERROR,
        "hipError",
        r"^hipError(?!OutOfMemory|NotReady)[A-Z]\w+: ",
        80,
    ),
    sig(
        # ROCm's HSA runtime aborting a GPU queue on a device fault ("Queue 0x7f2a... aborting
        # with error : HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION"): the abort that follows is
        # its own
        "hsa_queue_abort",
        C.CUDA_ERROR,
        "aborting with error",
        r"\bQueue 0x[0-9a-f]+ aborting with error : HSA_STATUS_ERROR_(?!OUT_OF_RESOURCES)",
        80,
    ),
    sig(
        # The driver refusing what a newer CUDA built (Triton's bundled ptxas, a wheel for a
        # newer toolkit): the driver is too old, whichever kernel tripped over it first.
        "driver_older_than_build",
        C.CUDA_ERROR,
        ("unsupported toolchain", "driver version is insufficient"),
        r"the provided PTX was compiled with an unsupported toolchain"
        r"|CUDA driver version is insufficient for CUDA runtime version",
        93,  # above kernel_unavailable: it is the driver, not the kernel
    ),
    sig(
        # A driver upgraded under a running system: the kernel module and the user-space
        # library disagree until a reboot (NVML, CUDA and the kernel all say so)
        "driver_library_mismatch",
        C.CUDA_ERROR,
        ("version mismatch", "API mismatch"),
        r"Driver/library version mismatch|NVRM: API mismatch",
        93,
    ),
    sig(
        # torch's warning that its build has no kernels for this GPU (too new, too old): the
        # cause of the "no kernel image" that follows (no failure if the server serves)
        "torch_build_lacks_gpu",
        C.CUDA_ERROR,
        ("not compatible with the current PyTorch", "which is of cuda capability"),
        r"with CUDA capability sm_\d+ is not compatible with the current PyTorch installation"
        r"|Found GPU\d+ .+ which is of cuda capability \d+\.\d+\.",
        93,  # above kernel_unavailable: the build, not a kernel library, lacks the GPU
    ),
    sig(
        "device_busy",
        C.CUDA_ERROR,
        "busy or unavailable",
        r"is/are busy or unavailable",
        30,
    ),
    # --- distributed setup
    sig(
        "nccl_shared_memory",
        C.DISTRIBUTED_INIT,
        ("Error while creating shared memory segment", "/dev/shm"),
        r"Error while creating shared memory segment|failed to extend /dev/shm|/dev/shm.*"
        r"(?:No space left|too small|Bus error)",
        95,
    ),
    sig(
        # An RDMA transport (NCCL's IB, UCX, Mooncake, NIXL) registering or creating its
        # buffers against the locked-memory limit: "Cannot allocate memory" is ulimit -l,
        # not the GPU's or the host's memory.
        "rdma_locked_memory",
        C.DISTRIBUTED_INIT,
        ("ibv_", "register memory", "max locked memory", "RLIMIT_MEMLOCK"),
        r"(?:ibv_\w+|[Rr]egister memory)\b.*Cannot allocate memory|max locked memory"
        r"|RLIMIT_MEMLOCK",
        94,
    ),
    sig(
        # NVSHMEM (DeepEP's transport between nodes) failing to set up: its own lines, from
        # the node that failed; the other nodes' collectives then time out waiting for it.
        "nvshmem_setup",
        C.DISTRIBUTED_INIT,
        (
            "transport create connect failed",
            "NULL value mem registration",
            "nvshmem setup connections failed",
            "nvshmemi_common_init failed",
            "nvshmemx_init_attr status",
        ),
        r"transport create connect failed|NULL value mem registration"
        r"|nvshmem setup connections failed|nvshmemi_common_init failed"
        r"|nvshmemx_init_attr status \d",
        101,  # above the collective timeouts it leaves behind on the other nodes
    ),
    sig(
        "collective_setup",
        C.DISTRIBUTED_INIT,
        (
            "DistStoreError",
            "DistNetworkError",
            "DistBackendError",
            "NCCL error",
            "ncclSystemError",
            "ncclUnhandledCudaError",
            "ncclInternalError",
            "ncclInvalidUsage",
            "ncclRemoteError",
            "TCPStore",
            "client socket has timed out",
        ),
        # c10d's store client giving up is quoted whole where SGLang logs the group it could
        # not form ("Failed to initialize custom process group: The client socket has ...").
        r"DistStoreError|DistNetworkError|DistBackendError|NCCL error|nccl(?:System|UnhandledCuda"
        r"|Internal|RemoteError|InvalidUsage)|TCPStore|client socket has timed out after",
        90,
        Resolve.COLLECTIVE,
    ),
    sig(
        "nccl_warning",
        C.DISTRIBUTED_INIT,
        ("NCCL WARN", "[c10d]", "connectFullMesh", "Unable to find address"),
        # c10d (or Gloo) names the cause before the store times out: a peer it cannot reach,
        # or an address (--dist-init-addr) that does not resolve or is not this host's.
        # Not NCCL's advice on performance (ROCm's "NUMA auto balancing enabled ...").
        r"NCCL WARN (?!NUMA auto balancing)|\[c10d\].*(?:failed to connect|timed out|timeout"
        r"|Connection (?:reset|refused|closed)|network addresses of .* cannot be retrieved"
        r"|failed to bind to .*errno: 99\b)"
        r"|Gloo connectFullMesh failed|gloo/transport/tcp/device\.cc.*Unable to find address",
        93,
        Resolve.COLLECTIVE,
    ),
    sig(
        "peer_lost",
        C.DISTRIBUTED_INIT,
        ("Connection closed by peer", "Connection reset by peer", "other ranks that didn't finish"),
        r"gloo.*Connection (?:closed|reset) by peer|other ranks that didn't finish",
        50,
    ),
    # --- hangs
    sig(
        # The scheduler finding no node for the pod (no GPU free, a taint, no device plugin):
        # the server never ran; below anything the server itself says.
        "pod_unschedulable",
        C.OTHER,
        "FailedScheduling",
        r"\bFailedScheduling\b.*\bnodes are available",
        45,
    ),
    sig(
        # The kubelet failing to start the pod's container at all: no sandbox (a runtime
        # class the node lacks), a volume that does not mount, an image it cannot pull
        "pod_never_started",
        C.OTHER,
        (
            "pod sandbox",
            "MountVolume.SetUp failed",
            "ErrImagePull",
            "ImagePullBackOff",
            "Failed to pull image",
            "FailedAttachVolume",
            "CreateContainerConfigError",
            'Error: secret "',
            'Error: configmap "',
        ),
        r"Failed to create pod sandbox|MountVolume\.SetUp failed|\bErrImagePull\b"
        r'|\bFailed to pull image "[^"]+": '  # the kubelet's word of why, said first
        # ... or a volume the attach/detach controller cannot attach (a ReadWriteOnce claim
        # still held by a pod on another node)
        r"|\bImagePullBackOff\b|\bFailedAttachVolume\b"
        # ... or a container whose configuration names a secret or a config map not there
        r"|\bCreateContainerConfigError\b"
        r"|\bFailed\b.*\bError: (?:secret|configmap) \"[^\"]+\" not found",
        45,
    ),
    sig(
        # A postStart hook that failed (or outlived its budget): the kubelet kills the
        # container however the server was doing; below anything the server itself says.
        "post_start_hook_failed",
        C.KILLED_BY_SIGNAL,
        "FailedPostStartHook",
        r"\bFailedPostStartHook\b",
        40,
    ),
    sig(
        "liveness_probe_failed",
        C.HANG_TIMEOUT,
        ("Liveness probe failed", "failed liveness probe"),
        # The kubelet's events (kubectl describe): the server stopped answering /health and
        # was restarted for it. Below any exception: a crashed scheduler fails probes too.
        r"Liveness probe failed|failed liveness probe, will be restarted",
        40,
    ),
    sig(
        # ... or never answered it while starting. A slow start fails a few of these before
        # it succeeds; where a liveness probe failed too, that one restarted it.
        "startup_probe_failed",
        C.HANG_TIMEOUT,
        ("Startup probe failed", "failed startup probe"),
        r"Startup probe failed|failed startup probe, will be restarted",
        39,
    ),
    sig(
        "workers_never_healthy",
        C.HANG_TIMEOUT,
        "to become healthy",
        # A router or gateway that gave up waiting for its workers' /health at its start.
        r"[Tt]imeout \d+ ?s waiting for workers? .* to become healthy",
        90,
    ),
    sig(
        "watchdog",
        C.HANG_TIMEOUT,
        "atchdog timeout",
        r"[Ww]atchdog timeout \((?!limit )",  # not systemd's (process_killed_by)
        100,
        phase=Phase.RUNTIME,
    ),
    sig(
        # Python's faulthandler.dump_traceback_later going off ("Timeout (0:30:00)!", then
        # every thread's stack): the program a harness or a script armed it in did not finish
        # in time, its threads shown where they waited.
        "faulthandler_timeout",
        C.HANG_TIMEOUT,
        "Timeout (",
        r"^Timeout \(\d+:\d\d:\d\d(?:\.\d+)?\)!$",
        90,
    ),
    sig(
        # What only the watchdog prints before its timeout line (the stuck batch, then a
        # py-spy dump): a paste cut before that line still shows a hang.
        "watchdog_report",
        C.HANG_TIMEOUT,
        "Scheduler debug info:",
        r"^Scheduler debug info:",
        60,
    ),
    sig(
        "collective_timeout",
        C.HANG_TIMEOUT,
        "collective operation timeout",
        r"Watchdog caught collective operation timeout",
        100,
        Resolve.COLLECTIVE_TIMEOUT,
    ),
    sig(
        # The kernel's hung-task detector, or the NFS client waiting on its server: a
        # process stuck in the kernel (state D) on I/O that does not come back, printing
        # nothing of its own
        "host_io_stall",
        C.HANG_TIMEOUT,
        ("blocked for more than", "not responding"),
        r"INFO: task \S+ blocked for more than \d+ seconds|\bnfs: server \S+ not responding",
        60,
    ),
    sig(
        "health_check",
        C.HANG_TIMEOUT,
        ("Health check failed", "failed to become healthy"),
        r"Health check failed|failed to become healthy",
        35,
        phase=Phase.RUNTIME,
    ),
    # --- crashes without a Python exception of their own
    sig(
        "fatal_signal",
        C.KILLED_BY_SIGNAL,
        "Fatal Python error: ",
        r"Fatal Python error: (?:Segmentation fault|Bus error|Aborted|Floating point exception"
        r"|Illegal instruction)",
        60,
    ),
    sig(
        # What a C++ exception said before std::terminate aborted the process ("terminate
        # called after throwing an instance of ...", then "  what():  ..."): the crash's own
        # words, above the abort's banner
        "native_exception",
        C.KILLED_BY_SIGNAL,
        "what():",
        r"^\s*what\(\):\s",
        61,
        Resolve.NATIVE_MESSAGE,
    ),
    sig(
        # LLVM aborting inside a compiler that uses it (Triton's MLIR passes): the kernel's
        # build, whatever abort banner follows
        "llvm_error",
        C.KERNEL_ERROR,
        "LLVM ERROR: ",
        r"^LLVM ERROR: (?!out of memory)",
        92,
    ),
    sig(
        # glibc's allocator finding its heap corrupted, then aborting: native code's memory
        # bug, printed before the abort's banner
        "heap_corruption",
        C.KILLED_BY_SIGNAL,
        ("double free", "corrupted", "free(): ", "malloc(): "),
        r"^(?:double free or corruption|free\(\): (?:invalid|double free)|malloc\(\): "
        r"(?:corrupted|unaligned|invalid)|corrupted (?:size vs\. prev_size|double-linked list))",
        60,
    ),
    sig(
        # The kernel's report of a process it stopped for a bad access (dmesg, the journal):
        # "python3[118402]: segfault at 18 ip 00007f3c... sp 00007ffd... error 4 in loop.so"
        "kernel_segfault_report",
        C.KILLED_BY_SIGNAL,
        "segfault at ",
        # the process it names: Python's, SGLang's (by its title) or torch's threads; another
        # program's fault on the host (an exporter, a driver daemon) is not the server's
        r"\b(?:python[\d.]*|sglang::\w+|pt_\w+)\[\d+\]: segfault at [0-9a-f]+ ip [0-9a-f]+ sp "
        r"[0-9a-f]+ error \d+",
        60,
    ),
    sig(
        "native_signal",
        C.KILLED_BY_SIGNAL,
        "Caught signal",
        r"Caught signal \d+ \(",
        60,
        Resolve.NATIVE_CRASH,
    ),
    sig(
        # multiprocessing's spawn re-imports the main module: a script that starts an Engine
        # at its top level, with no `if __name__ == "__main__":`, starts it again in every
        # child. Its message starts on the line under "RuntimeError:".
        "spawn_without_main_guard",
        C.OTHER,
        "An attempt has been made to start a new process",
        r"An attempt has been made to start a new process before",
        70,
    ),
    sig(
        # A router in front of the server (sgl-router, the model gateway) giving up on its
        # health checks: the worker lives but does not answer.
        "gateway_health_check",
        C.HANG_TIMEOUT,
        ("Health check timeout", "marked unhealthy", "o healthy workers"),
        r"Health check timeout for worker|[Ww]orker \S+ marked unhealthy|[Nn]o healthy workers",
        50,
    ),
    sig(
        # A program saying it killed the server's process (a GPU reaper from cron, an
        # operator's script): who killed it, above SGLang noticing and the shell's "Killed".
        "process_killed_by",
        C.KILLED_BY_SIGNAL,
        ("killing pid", "killed pid", "SIGKILL pid", "SIGKILL to pid", " to process", " to all "),
        # ... and earlyoom's, the userspace OOM killer Fedora enables by default; a Procfile
        # runner's (honcho, foreman) stopping every process when one of them exits
        r"\b(?:[Kk]illing|[Kk]illed|SIGKILL(?:ed)?|SIGKILL to) pid[= ]?\d+"
        r"|sending SIG(?:KILL|TERM) to (?:process \d+|all processes)",
        57,
    ),
    sig(
        # systemd aborting a unit whose WatchdogSec= SGLang never answers (it sends no
        # WATCHDOG=1): the why of the kills systemd then logs (host_shutdown's words)
        "unit_watchdog",
        C.KILLED_BY_SIGNAL,
        "Watchdog timeout (limit",
        r"\.service: Watchdog timeout \(limit",
        66,
    ),
    sig(
        # SGLang's print of a dead scheduler's status under "scheduler is dead": -9 says the
        # SIGKILL that line does not
        "child_killed_status",
        C.KILLED_BY_SIGNAL,
        "Exit code: -9",
        r"^Exit code: -9$",
        56,
    ),
    sig(
        "scheduler_died",
        C.KILLED_BY_SIGNAL,
        ("scheduler died during initialization", "crashed with exit code", "scheduler is dead"),
        r"scheduler died during initialization \(exit code: -9\)|crashed with exit code -9"
        r"|scheduler is dead",
        55,  # a consequence when a "Fatal Python error" names the signal first
    ),
    sig(
        "killed",
        C.KILLED_BY_SIGNAL,
        (
            "Killed",
            *KILLED_TRANSLATED,
            "exit code: -9",
            "exit code -9",
            "core dumped",
            "exit code 13",
            "Exit Code:",
            "with code 13",
            "Exited (13",
            "an exit code 9.",
            "Negsignal.SIG",
            "code=dumped",
            "exitCode=13",
            "Pane is dead (signal",
            "exited on signal ",
            "srun: error: ",
            "code=killed, status=",
            "Alarm clock",
            "Hangup",
            "User defined signal",
        ),
        # ... and kubectl describe's "Exit Code:    137" of the container's last state, docker
        # compose's "sglang-1 exited with code 137", `docker ps`'s "Exited (137)", a wrapper
        # script's "exited with code 139": 128 + a fatal signal's number (ABRT, BUS, FPE,
        # KILL, SEGV), or the signal by name (Airflow's "return code Negsignal.SIGKILL"), or
        # systemd's word of a core dumped ("code=dumped, status=11/SEGV")
        rf"(?:^|\s)(?:Killed|{KILLED_TRANSLATED_WORDS})(?:\s|$)|exit code:? -9\b"
        # (not SIGILL's: the program's own code ran an instruction this CPU lacks, nothing
        # killed it)
        r"|(?:Segmentation fault|Bus error)\s+\(core dumped\)"
        rf"|exit code {_SIGNAL_EXIT}|^Exit Code:\s+{_SIGNAL_EXIT}$|exited with code {_SIGNAL_EXIT}"
        rf"|\bExited \({_SIGNAL_EXIT}\)|return code Negsignal\.SIG|code=dumped, status="
        rf"|\bexitCode={_SIGNAL_EXIT}"  # `docker events`' "container die <id> (exitCode=137, ..."
        # ... tmux's footer of a pane kept after its process died of a signal; srun's word of a
        # task that a signal ended (strsignal's name for it)
        r"|^Pane is dead \(signal \d+|code=killed, status=1/HUP\b"
        # ... a supervisor's "[server exited on signal 1]": any signal but a stop's SIGTERM
        r"|\bexited on signal (?!15\b|SIGTERM\b)(?:\d+|SIG[A-Z]+)\b"
        r"|: line \d+: +\d+ (?:Alarm clock|Hangup|User defined signal \d)\s"
        r"|^srun: error: \S+: tasks? [\d,-]+: (?:Killed|Terminated|Hangup|User defined signal \d)$"
        # SGLang's SIGCHLD handler prints the raw wait status: 9 is a child SIGKILLed
        r"|Child process unexpectedly failed with an exit code 9\.",
        25,
    ),
    sig(
        # Slurm's step daemon saying the cgroup's OOM killer took a task: host memory, and
        # why the step was cancelled when its CANCELLED line shows too.
        "batch_oom_kill",
        C.KILLED_BY_SIGNAL,
        ("oom_kill event", "TERM_MEMLIMIT"),
        # ... and LSF's, in the job's report
        r"Detected \d+ oom_kill events? in|^TERM_MEMLIMIT: job killed",
        66,
    ),
    sig(
        "job_cancelled",
        C.KILLED_BY_SIGNAL,
        (
            "CANCELLED AT",
            "DUE TO TIME LIMIT",
            "DUE TO PREEMPTION",
            "Evicted",
            "preempted",
            "Preempted",
            "was low on resource",
            "job killed: walltime",
            "DeadlineExceeded",
            "maximum execution time",
            "execution took longer than",
            "Too long with no output",
            "runner has received a shutdown signal",
            "TERM_RUNLIMIT",
            "timeout: sending signal",
            "Cancelling nested steps",
            "than the maximum time of",
            "higher priority waiting request",
            "qmaster enforced",
            "has been revoked",
            "exceeded running time limit",
            "second timeout, killing",
        ),
        # ... and the kubelet's eviction, in the pod's status message or its events; the time
        # limits of PBS and LSF, of a Kubernetes Job (activeDeadlineSeconds) and of CI runners
        # (GitHub's, GitLab's, CircleCI's no-output limit, Azure Pipelines'), a CI runner shut
        # down under its job or a newer run cancelling it (GitHub's concurrency group), a
        # script's own limit (coreutils' timeout --verbose), Jenkins' timeout step, Grid
        # Engine's limits as qacct reports them
        r"\*\*\* (?:JOB|STEP) \S+ .*CANCELLED AT|DUE TO (?:TIME LIMIT|PREEMPTION|NODE FAILURE)"
        r"|\bEvicted\b.*\b(?:[Pp]od|node)\b|\bPreempted by pod\b"
        # ... a pod or any workload a scheduler preempted, in its words or its event's reason
        r"|\b(?i:pod|job|workload|task|instance|vm|worker) (?:was |has been )?preempted\b"
        r"|\b(?:Warning|Normal)\s+(?:Preempted|Evicted)\s"
        r"|The node was low on resource|PBS: job killed: walltime \d+ exceeded limit"
        r"|\bDeadlineExceeded\b.*\bdeadline\b|has exceeded the maximum execution time"
        r"|Job failed: execution took longer than|Too long with no output \(exceeded"
        r"|The runner has received a shutdown signal"
        r"|^TERM_RUNLIMIT: job killed|^timeout: sending signal \w+ to command"
        r"|^Cancelling nested steps due to timeout|ran longer than the maximum time of \d+ minutes"
        r"|^Canceling since a higher priority waiting request for .* exists"
        r"|\bqmaster enforced h_rt\b"
        # ... and Kueue's preemption of a workload; an interactive allocation Slurm revoked
        r"|Preempted to accommodate a\b|Job allocation \d+ has been revoked"
        # ... and Nextflow's time directive; podman run --timeout
        r"|^Process exceeded running time limit\b|exceeded \d+ second timeout, killing",
        65,  # a batch system or the cluster stopped it: killed from outside
    ),
    sig(
        # A Python wrapper's own time limit on the server's command (subprocess.run(...,
        # timeout=)): the child is killed when it expires, however far it got (a child that
        # failed on its own would have ended the wait)
        "wrapper_timeout",
        C.KILLED_BY_SIGNAL,
        "TimeoutExpired: Command ",
        r"\bTimeoutExpired: Command .*\bsglang\b.* timed out after \d",
        50,  # above the exception's bare type
    ),
    sig(
        # Slurm's accounting (sacct): a job's state ended by the cluster, the exit code column
        # after it; below the job's own slurmstepd line, which names the moment
        "batch_job_state",
        C.KILLED_BY_SIGNAL,
        ("NODE_FAIL", "PREEMPTED", "TIMEOUT", "OUT_OF_ME"),
        r"\b(?:NODE_FAIL|PREEMPTED|TIMEOUT|OUT_OF_ME(?:\+|MORY))\s+\d+:\d+\b",
        60,
    ),
    sig(
        # A supervisor, a platform or the shell saying it stopped the server for a limit of
        # its own, in words no batch system above uses: a preemption or an outbid rental
        # (SkyPilot, Vast.ai), an account out of credit (RunPod), a memory limit it enforces
        # by restarting (PM2's --max-memory-restart, a watchdog's RSS over its limit), a time
        # limit (systemd's RuntimeMaxSec, a workflow step's deadline), a resource limit the
        # kernel enforces with a signal (the shell's "CPU time limit exceeded"), zsh's report
        # of a job killed, Docker Swarm's task that exited with 128 + a fatal signal
        "stopped_from_outside",
        C.KILLED_BY_SIGNAL,
        (
            "preempted",
            "outbid",
            "insufficient balance",
            "insufficient funds",
            "max-memory-restart",
            " > limit",
            "runtime time limit",
            "exceeded its deadline",
            "limit exceeded",
            "zsh: ",
            "non-zero exit (",
            "ime limit (",
            "exceeded timeout",
            "memory limit of",
            "Memory limit of",
            "Build timed out (after",
            "all available RAM",
            "timed out after",
            "AirflowTaskTimeout",
        ),
        r"\b(?:cluster|instance|node|pod|job|vm|task) (?:is |was |has been |got )?preempted\b"
        r"|\boutbid by\b|\binsufficient (?:balance|funds)\b"
        r"|exceeds? (?:the )?--max-memory-restart|\bRSS \d+ > limit \d+"
        r"|reached runtime time limit|\bexceeded its deadline\b"
        r"|(?:^|\s)(?:CPU time|File size) limit exceeded"
        r"|^zsh: (?:killed|segmentation fault|bus error|abort)\b"
        rf"|non-zero exit \({_SIGNAL_EXIT}\)"
        # ... and a platform's or a task queue's own limit, said as exceeded: Celery's hard time
        # limit, a Space's or a notebook's memory, AWS Batch's attempt duration, HTCondor's
        # cgroup memory limit
        r"|\b(?:[Hh]ard )?[Tt]ime limit \(\S+\) exceeded|^Memory limit exceeded\b"
        r"|\bduration exceeded timeout\b|\bgone over cgroup memory limit\b"
        # Cloud Run's and App Engine's memory limit
        r"|\bMemory limit of \d+ [MG]i?B exceeded with \d+ [MG]i?B used\b"
        # ... Jenkins' build-timeout plugin aborting the build that ran the server
        r"|^Build timed out \(after \d+ minutes\)\. Marking the build as (?:aborted|failed)\b"
        r"|\bsession crashed after using all available RAM\b"
        # ... and a workflow's time limit on its step (Metaflow's @timeout, Airflow's
        # execution_timeout): the orchestrator ends the step, however the server was doing
        r"|\b(?:[Ss]tep|[Ff]low run) timed out after \d|\bAirflowTaskTimeout\b",
        65,  # as a batch system's kill: from outside
    ),
    sig(
        # The host going down under the server (an unattended upgrade's reboot, a shutdown):
        # systemd stops everything and kills what does not stop in time.
        "host_shutdown",
        C.KILLED_BY_SIGNAL,
        (
            "The system will ",
            "with signal SIG",
            "imminent node shutdown",
            "reboot-required, ",
            "critical temperature reached",
        ),
        # ... and a login session's processes ended with it (its scope stopped at logout,
        # KillUserProcesses=yes): SIGTERM or SIGHUP first, SIGKILL for what outlives it
        r"The system will (?:reboot|power off|halt) now|Killing process \d+ \([^)]*\) with signal"
        r" SIG(?:KILL|TERM|HUP)"
        # ... and the kubelet's graceful node shutdown, in the pod's status
        r"|[Pp]od was terminated in response to imminent node shutdown"
        # ... and unattended-upgrades' own reboot after an update that needs one; the kernel
        # powering off a host too hot to run
        r"|Found /var/run/reboot-required, rebooting"
        r"|critical temperature reached,? shutting down",
        64,
    ),
    sig(
        # systemd giving up on a unit's start (TimeoutStartSec=, a slow first load) and
        # stopping it: killed from outside, not a hang of the server's own
        "unit_start_timeout",
        C.KILLED_BY_SIGNAL,
        "start operation timed out",
        r"\.service: start operation timed out\. Terminating\.",
        65,
    ),
    sig(
        # The host's kernel giving up (a soft lockup with softlockup_panic set, a BUG in a
        # driver): everything on it dies with it, the server with no word of its own
        "kernel_panic",
        C.KILLED_BY_SIGNAL,
        "Kernel panic - not syncing",
        r"Kernel panic - not syncing",
        64,
    ),
    sig(
        # systemd stopping the unit because a command of its own failed (ExecStartPre=,
        # ExecStartPost='s readiness check): SGLang is stopped from outside, mid-start
        "unit_control_process_failed",
        C.KILLED_BY_SIGNAL,
        "Control process exited, code=exited",
        r"\.service: Control process exited, code=exited, status=(?!0/)\d+",
        60,
    ),
    sig(
        # The container runtime's own events (`docker events`, podman's journal): the container
        # SIGKILLed (a stop's grace period over, a health check's kill)
        "container_killed",
        C.KILLED_BY_SIGNAL,
        ("container kill ", "using the force"),
        r"\bcontainer kill [0-9a-f]{6,64} \([^)]*\b(?:signal=9|health_on_failure=kill)\b"
        # ... and dockerd's own journal: SIGTERM's grace over, SIGKILL
        r"|Container failed to exit within \d+m?s of signal \d+ - using the force",
        62,
    ),
    sig(
        # A script or a cron job stopping the server's container or process (a deploy's
        # clean-up, a nightly `docker compose down`, tmux panes respawned with -k): the
        # machine's own stop, in its trace (`set -x`), cron's record or the script's source
        "scripted_stop",
        C.KILLED_BY_SIGNAL,
        ("+ docker", "CMD (", "tmux kill-", "tmux respawn-"),
        r"^\++ (?:sudo )?docker(?:-compose| compose)? (?:rm -f|kill|down|stop)\b"
        r"|(?:\bCRON\[\d+\]: |^)\([\w.-]+\) CMD \(.*\b(?:docker(?:-compose| compose)? (?:rm -f|kill"
        r"|down|stop)|systemctl (?:stop|restart|kill)|pkill|killall|kill -(?:9|KILL)|reboot"
        r"|tmux kill-(?:server|session))\b"
        r"|^tmux (?:kill-(?:server|session|pane)|respawn-(?:pane|window) -k)\b",
        63,  # above the runtime's SIGKILL that follows it: who stopped it
    ),
    sig(
        # The server frozen by the cgroup freezer (`docker pause`, `systemctl freeze`): it holds
        # its GPU and answers nothing until let go
        "frozen",
        C.HANG_TIMEOUT,
        ("container pause ", "Unit now frozen"),
        r"\bcontainer pause [0-9a-f]{6,64}\b|\.service: Unit now frozen\b",
        60,
    ),
    sig(
        # GitHub Actions' word for a job cancelled under its steps (by hand, a newer run, a
        # timeout): a kill from outside, whatever the step was doing
        "ci_operation_cancelled",
        C.KILLED_BY_SIGNAL,
        "The operation was canceled",
        r"^Error: The operation was canceled\.$",
        40,
    ),
    sig(
        # The NVIDIA container toolkit refusing to start the container: the driver too old for
        # the image's CUDA (a cuda>= requirement), or no driver at all (the host's, other)
        "container_toolkit_refused",
        C.CUDA_ERROR,
        "nvidia-container-cli: requirement error",
        r"nvidia-container-cli: requirement error: unsatisfied condition: cuda\s*>=",
        90,
    ),
    sig(
        # The shell's job control: the server suspended (a Ctrl-Z, a background job that read
        # the terminal) holds its GPU and port and answers nothing until `fg`
        "job_suspended",
        C.HANG_TIMEOUT,
        "Stopped",
        r"^\[\d+\][+-]?\s+Stopped\b",
        30,
    ),
    sig(
        # The ssh session the server ran in the foreground of dropping (a laptop asleep, a
        # network gone): the hangup ends the server with it. The client's words, or sshd's.
        "session_hangup",
        C.KILLED_BY_SIGNAL,
        ("Broken pipe", "closed by remote host", "client not responding", "auto-logout"),
        r"^(?:client_loop: send disconnect|packet_write_wait: Connection to \S+(?: port \d+)?"
        r"|Write failed): Broken pipe$|^Connection to \S+ closed by remote host\.?$"
        r"|\bTimeout, client not responding from\b"
        # ... or the shell's own idle limit (TMOUT) logging the session out under the server
        r"|(?:^|\$ )timed out waiting for input: auto-logout$",
        30,
    ),
    sig(
        "host_oom_killer",
        C.KILLED_BY_SIGNAL,
        (
            "Killed process",
            "OOMKilled",
            "killed due to memory pressure",
            "running low on memory",
            "by the OOM killer",
            "'oom-kill'",
            "container oom ",
            "Container killed due to memory usage",
            "OOM Killed",
        ),
        # (the kernel's, or its memory cgroup's: "Memory cgroup out of memory: Killed process";
        # `docker events`' "container oom <id>"; ECS's reason for a task's container, Nomad's
        # task event)
        r"(?i:out of memory): Killed process|\bOOMKilled\b"
        r"|killed due to memory pressure|was killed due to the node running low on memory"
        r"|has been killed by the OOM killer|Failed with result 'oom-kill'"
        r"|\bcontainer oom [0-9a-f]{12,64}\b|Container killed due to memory usage"
        r'|Exit Message: "OOM Killed"',
        # The kernel's OOM killer (as dmesg or systemd reports it), or Ray's memory monitor
        # (the raylet's "... Workers (tasks / actors) killed due to memory pressure (OOM)", the
        # driver's "Task was killed due to the node running low on memory"): host memory,
        # whatever the last Python words were.
        # Below scheduler_died, whose earlier line (SGLang noticing) is the root when both show.
        54,
    ),
    sig(
        "host_oom_killer_report",
        C.KILLED_BY_SIGNAL,
        ("oom-kill", "oom_reaper", "invoked oom-killer"),
        # What the kernel prints around the kill: the kill itself, when shown, is the root.
        r"oom-kill:|oom_reaper:|invoked oom-killer",
        53,
    ),
    sig(
        # torch's warning that CUDA could not start on GPUs that are there (802: the fabric
        # manager down on an NVSwitch host; 803, 804: a driver that does not fit the
        # toolkit): said at import, first; what fails later ("No accelerator is available")
        # follows from it. Error 100 is no GPU at all: the host's, other.
        "cuda_init_failed",
        C.CUDA_ERROR,
        "CUDA initialization: Unexpected error",
        r"CUDA initialization: Unexpected error from cudaGetDeviceCount\(\).*\bError (?!100\b)\d+:",
        85,
    ),
    # --- other known conditions
    sig(
        "host_environment",
        C.OTHER,
        (
            "Cannot re-initialize CUDA in forked",
            "is available.",
            "NVIDIA-SMI has failed",
            "driver not loaded",
            "memory leak detected",
            "Cannot allocate memory",
            "not compiled with CUDA",
            "has no attribute '_cuda_",
            "No CUDA GPUs",
            "no CUDA-capable device",
            "0 active drivers",
            "exec format error",
            "SGLang only supports sm",
            "memory capacity is unbalanced",
        ),
        # ... and a torch with no CUDA device to use (no driver, no GPU, a build without CUDA)
        r"Cannot re-initialize CUDA in forked subprocess|No accelerator .*is available"
        # no driver loaded on the host, as nvidia-smi and the container toolkit say it
        r"|NVIDIA-SMI has failed because it\b"
        r"|nvidia-container-cli: initialization error: nvml error: driver not loaded"
        r"|Torch not compiled with CUDA enabled|torch\._C' has no attribute '_cuda_"
        # (said in an error: torch warns the same words at import, before what really failed)
        r"|No CUDA GPUs are available|[Ee]rror(?: \d+)?: no CUDA-capable device is detected"
        r"|memory leak detected|\[Errno 12\] Cannot allocate memory"
        # Triton finding no GPU driver to compile for
        r"|\b0 active drivers \(\[\]\)"
        # an image built for another CPU architecture than the host's
        r"|: exec format error$"
        # ... and GPUs SGLang will not use: below its oldest architecture, or unequal in
        # free memory at startup (another process holds one of them)
        r"|SGLang only supports sm\d+ and above|The memory capacity is unbalanced",
        90,
    ),
    sig(
        # A Unix-only module of Python's own library missing: the host is Windows, where
        # SGLang does not run (WSL2 does). No package installs it. Above missing_package.
        "unix_only_module",
        C.OTHER,
        "No module named '",
        r"No module named '(?:resource|fcntl|termios|pwd|grp|_posixsubprocess)'",
        97,
    ),
)


# Whether a line can match any signature at all (most lines cannot), and around a hard wrap,
# which can only make a signature match when one of its literals spans the break.
LONGEST_LITERAL = max(len(lit) for s in SIGNATURES for lit in s.literals)
ANY_LITERAL = any_of({lit for s in SIGNATURES for lit in s.literals})

# Where an out-of-memory error happened, from its frames; checked in this order.
OOM_FRAME_RULES: tuple[tuple[tuple[str, ...], C], ...] = (
    (
        (
            "cuda_graph_runner",
            "capture_one_batch_size",
            "init_cuda_graphs",
            "init_device_graphs",
            "graph_runner",
        ),
        C.CUDA_GRAPH_OOM,
    ),
    (
        (
            "load_model",
            "_device.py:__torch_function__",  # tensors made under a device context: the model
            "load_weights",
            "weight_loader",
            "create_weights",
            "_initialize_model",
            "model_loader",
        ),
        C.WEIGHTS_OOM,
    ),
    (
        ("init_memory_pool", "memory_pool.py", "_create_buffers", "alloc_memory_pool"),
        C.POOL_INIT_OOM,
    ),
)

# Exceptions that only ever follow another failure: never a root cause of their own.
# A CI runner's word that a step's command failed (GitHub Actions' "Error: Process completed
# with exit code 1.", Buildkite's "Error: The command exited with status 1") or was cancelled:
# how the job ended, never why. Shaped like an exception that no program raised.
CI_STEP_FAILED = re.compile(
    r"^Error: (?:(?:Process completed with exit code|The command exited with status) -?\d+"
    r"|The operation was canceled\.$)"
)
CONSEQUENCE_EXCEPTIONS = frozenset(
    {
        "EOFError",
        "BrokenPipeError",
        "ConnectionRefusedError",
        "ConnectionResetError",
        "KeyboardInterrupt",
        "SystemExit",
        "asyncio.CancelledError",
        "CancelledError",
    }
)
