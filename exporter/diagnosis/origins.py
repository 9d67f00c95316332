"""The second layer: an exception's type and the package of the code that raised it.

A message the signatures do not know still says something by where it came from: an
assertion in ``server_args.py`` is a rejected configuration, a ValueError out of
transformers' config loading is a model that cannot be read, anything raised inside Triton
or a JIT build is a kernel failure. The raising frame (the innermost one that does more
than pass the call along) is asked first, then every frame of the traceback.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from exporter.diagnosis.frames import Frame, raising_frame
from exporter.diagnosis.taxonomy import FailureClass as C

# Exceptions a validation raises; an AttributeError or a KeyError there is a bug, not a
# rejected flag.
_VALIDATION = ("ValueError", "AssertionError", "TypeError", "NotImplementedError", "RuntimeError")
_ARGUMENT_CHECKS = ("ValueError", "TypeError", "NotImplementedError", "KeyError", "AttributeError")


@dataclass(frozen=True)
class OriginRule:
    name: str
    failure_class: C
    fragments: tuple[str, ...]  # in the frame's "path:function"
    types: tuple[str, ...] = ()  # exception class names (without module); empty: any
    # ...but not these: in a kernel or a transport module a ValueError or a TypeError is the
    # module checking its arguments, not the kernel or the transport failing.
    except_types: tuple[str, ...] = ()
    # Only where the traceback was cut before its exception: a message, when there is one,
    # says more than the frame.
    cut_only: bool = False

    def matches(self, frame: Frame, exception_type: str) -> bool:
        # A traceback cut off before its exception has no type: the frames alone decide.
        if exception_type and self.cut_only:
            return False
        if exception_type and (
            (self.types and exception_type not in self.types) or exception_type in self.except_types
        ):
            return False
        return any(fragment in frame.text for fragment in self.fragments)


ORIGIN_RULES: tuple[OriginRule, ...] = (
    OriginRule(
        "server_args",
        C.INVALID_ARGUMENT,
        ("server_args.py", "/arg_groups/", "check_server_args"),
        (*_VALIDATION, "Exception"),
    ),
    OriginRule(
        # SGLang's own check that a parallel size divides a model's dimension ("16 is not
        # divisible by 6": the heads over --tp): the flag does not fit the model
        "parallel_divisibility",
        C.INVALID_ARGUMENT,
        (":ensure_divisibility",),
        ("AssertionError",),
    ),
    OriginRule(
        "kernel_build_or_launch",
        C.KERNEL_ERROR,
        (
            "/triton/",
            "triton_ops",
            "triton_kernels",
            "fused_moe_triton/",
            "_kernel.py:",  # quantization/fp8_kernel.py, int8_kernel.py: Triton kernels
            "/flashinfer/",
            "deep_gemm",
            "/deep_ep/",
            "/sgl_kernel/",
            "/cutlass/",
            "cutlass_",
            "extend_attention",
            "decode_attention",
            "/attention/fla/",  # the Triton kernels of linear attention (Gated DeltaNet)
            "/mamba/ops/",
            "/jit/",
            "/jit_kernel/",
            "cpp_extension.py",
            "torch/_inductor",
            "tvm_ffi",
            "tilelang",
        ),
        except_types=_ARGUMENT_CHECKS,
    ),
    OriginRule(
        # transformers' table of model types has no entry for the checkpoint's (a nested
        # config's, where no ValueError wraps it): this transformers is older than the model
        "model_type_unknown",
        C.UNSUPPORTED_MODEL,
        ("configuration_auto.py:__getitem__",),
        ("KeyError",),
    ),
    OriginRule(
        "model_loading",
        C.MODEL_LOAD_ERROR,
        (
            "model_loader",
            "load_weights",
            "weight_loader",
            "weight_utils",
            "transformers/configuration_utils",
            "transformers/models/auto",
            ":from_pretrained",  # a tokenizer or config being loaded, not one in use
            ":_from_pretrained",
            "hf_transformers_utils",
            "huggingface_hub",
            "modelscope",  # SGLANG_USE_MODELSCOPE's hub
            "safetensors",
        ),
    ),
    OriginRule(
        "distributed_setup",
        C.DISTRIBUTED_INIT,
        (
            "torch/distributed",
            "distributed_c10d",
            "parallel_state",
            "pynccl",
            "rendezvous",
            "mooncake",
            "/nixl/",
            "/mori/",
            "disaggregation/common/",
            "nvshmem",
            # SGLang's own (0.5.23's distributed/bootstrap.py, PD's bootstrap server); not the
            # standard library's (multiprocessing's and threading's _bootstrap, importlib's).
            "distributed/bootstrap",
            "bootstrap_server",
            "bootstrap_thread",
        ),
        except_types=_ARGUMENT_CHECKS,
    ),
    # A bind that failed: a port taken, most often ("File name too long" for an ipc path, a
    # read-only /tmp are others, which their message tells).
    OriginRule("socket_bind", C.PORT_IN_USE, (":bind", ":_bind_server_socket"), cut_only=True),
)


def by_origin(
    frames: Sequence[Frame], exception_type: str, rules: Sequence[OriginRule] = ORIGIN_RULES
) -> OriginRule | None:
    """The rule for the code that raised: the exception's own module first
    (``triton.compiler.errors.CompilationError``), then the raising frame, then any frame."""
    module, _, short_type = exception_type.rpartition(".")
    candidates = [Frame("/" + module.replace(".", "/"), "", -1)] if module else []
    raiser = raising_frame(frames)
    candidates += ([raiser] if raiser is not None else []) + list(reversed(frames))
    for frame in candidates:
        for rule in rules:
            if rule.matches(frame, short_type):
                return rule
    return None
