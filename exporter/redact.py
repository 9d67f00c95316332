"""Keep secrets passed as flags or environment (API keys, tokens) out of history, logs and
metrics. A flag or variable is secret when one of its dash- or underscore-separated words
is key, token, secret, password, passwd or credential(s): ``--api-key``, ``HF_TOKEN``, but
not ``--max-total-tokens`` or ``--tokenizer-path``."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a value handed in: redacting needs no classifier
    from exporter.diagnosis.classify import Classification

_SECRET_WORD = re.compile(
    r"(?:^|[-_])(?:key|token|secret|password|passwd|credentials?)(?:[-_]|$)", re.I
)
MASK = "***"
MIN_SECRET_CHARS = 4  # shorter values would mask ordinary text everywhere


def is_secret_name(name: str) -> bool:
    return _SECRET_WORD.search(name.lstrip("-")) is not None


def redact_command(argv: Sequence[str]) -> list[str]:
    """argv with the value after every secret flag (or after its ``=``) masked."""
    out: list[str] = []
    mask_next = False
    for arg in argv:
        if mask_next and not arg.startswith("--"):
            out.append(MASK)
            mask_next = False
            continue
        mask_next = False
        name, sep, _value = arg.partition("=")
        if name.startswith("--") and is_secret_name(name):
            if sep:
                out.append(f"{name}={MASK}")
            else:
                out.append(arg)
                mask_next = True
            continue
        out.append(arg)
    return out


def secret_values(args: Mapping[str, object], env: Mapping[str, str]) -> frozenset[str]:
    """The values of the secret flags and variables a launch carries."""
    pairs: Iterable[tuple[str, object]] = [*args.items(), *env.items()]
    return frozenset(
        str(value)
        for name, value in pairs
        if is_secret_name(name) and len(str(value)) >= MIN_SECRET_CHARS
    )


def mask_text(text: str | None, secrets: Iterable[str]) -> str | None:
    """``text`` with every secret value masked: SGLang echoes its arguments in its log
    (``server_args=ServerArgs(..., api_key='...')``), and that line can be a root cause."""
    if text is None:
        return None
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text


def mask_classification(result: Classification, secrets: Iterable[str]) -> Classification:
    """A classification without ``secrets``: SGLang echoes its arguments into its log, and
    a secret among them must not reach the history or the daemon's log through a root-cause
    line, a diagnosis or an evidence line."""
    secrets = frozenset(secrets)
    if not secrets:
        return result
    return dataclasses.replace(
        result,
        root_cause_line=mask_text(result.root_cause_line, secrets),
        diagnosis=mask_text(result.diagnosis, secrets) or "",
        evidence=[mask_text(line, secrets) or "" for line in result.evidence],
    )
