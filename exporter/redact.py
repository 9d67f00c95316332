"""Keep secrets passed as flags (API keys, tokens) out of history, logs and metrics."""

from __future__ import annotations

import re
from collections.abc import Sequence

_SECRET_FLAG = re.compile(r"^--[\w-]*(?:key|token|secret|password|passwd|credential)[\w-]*$", re.I)
MASK = "***"


def redact_command(argv: Sequence[str]) -> list[str]:
    """argv with the value after every secret-looking flag (or after ``=``) masked."""
    out: list[str] = []
    mask_next = False
    for arg in argv:
        if mask_next and not arg.startswith("--"):
            out.append(MASK)
            mask_next = False
            continue
        mask_next = False
        name, sep, _value = arg.partition("=")
        if _SECRET_FLAG.match(name):
            if sep:
                out.append(f"{name}={MASK}")
            else:
                out.append(arg)
                mask_next = True
            continue
        out.append(arg)
    return out
