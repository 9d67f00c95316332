"""How the daemon ends: its exit code per outcome, and the termination message.

Kubernetes copies the file at ``terminationMessagePath`` (``/dev/termination-log``) into
the container's last state, where ``kubectl describe pod`` shows it, truncated to 4096
bytes. When the daemon exits because of a failure it writes there what an operator needs
first: the class, the root-cause line, the diagnosis and the decision.
"""

from __future__ import annotations

import enum
import logging
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DEFAULT_TERMINATION_LOG",
    "MESSAGE_LIMIT_BYTES",
    "ExitCode",
    "FailureReport",
    "default_termination_log",
    "message",
    "write_message",
]

log = logging.getLogger(__name__)

DEFAULT_TERMINATION_LOG = Path("/dev/termination-log")
MESSAGE_LIMIT_BYTES = 4096  # what the kubelet keeps of a container's message
_FIELD_LIMIT_BYTES = 1024  # a root-cause line or decision longer than this is cut
_CUT = " [...]"


class ExitCode(enum.IntEnum):
    """The daemon's exit status, one per outcome (README: "Termination message and exit
    codes")."""

    STOPPED = 0  # stopped on request (SIGTERM, SIGINT, SIGQUIT); SGLang stopped with it
    ERROR = 1  # could not run: the metrics address, the SGLang runtime, an internal error
    USAGE = 2  # a bad command line or config (argparse uses 2 as well)
    GAVE_UP = 3  # crash-loop limit or end of the ladder, with policy.on_give_up = "exit"
    GROUP_MEMBER_FAILED = 4  # a rank of a multi-node group failed; policy.group = "exit"


_OUTCOME = {
    ExitCode.GAVE_UP: "gave up",
    ExitCode.GROUP_MEMBER_FAILED: "group member failed",
    ExitCode.ERROR: "internal error",
}


@dataclass(frozen=True)
class FailureReport:
    """The last failure, as /status and the termination message tell it."""

    attempt: int
    profile: str
    failure_class: str
    root_cause_line: str | None
    diagnosis: str
    decision: str | None
    log: str | None
    at: float  # when the attempt's end was recorded (Unix time)

    def to_json(self) -> dict:
        return {
            "attempt": self.attempt,
            "profile": self.profile,
            "class": self.failure_class,
            "root_cause_line": self.root_cause_line,
            "diagnosis": self.diagnosis,
            "decision": self.decision,
            "log": self.log,
            "time": self.at,
        }


def default_termination_log(exists=os.path.exists) -> Path | None:
    """``/dev/termination-log`` where it exists (Kubernetes creates it), else none."""
    return DEFAULT_TERMINATION_LOG if exists(DEFAULT_TERMINATION_LOG) else None


def message(code: ExitCode, failure: FailureReport | None, detail: str | None = None) -> str:
    """The termination message for an exit with ``code``: at most MESSAGE_LIMIT_BYTES of
    UTF-8, the fields that matter most first (a cut loses the end, never the class)."""
    lines = [f"sglang-sentinel: {_OUTCOME.get(code, code.name.lower())} (exit code {int(code)})"]
    if detail:
        lines.append(f"reason: {_field(detail)}")
    if failure is not None:
        lines += [
            f"class: {failure.failure_class}",
            f"attempt: {failure.attempt} (profile {failure.profile})",
        ]
        if failure.decision:
            lines.append(f"decision: {_field(failure.decision)}")
        if failure.root_cause_line:
            lines.append(f"root cause: {_field(failure.root_cause_line)}")
        if failure.log:
            lines.append(f"log: {_field(failure.log)}")
        if failure.diagnosis:
            lines.append(f"diagnosis: {failure.diagnosis}")
    return _fit("\n".join(lines) + "\n", MESSAGE_LIMIT_BYTES)


def write_message(path: Path | None, text: str) -> bool:
    """Write the whole message (replacing an earlier one); never raises."""
    if path is None:
        return False
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as error:
        log.error("cannot write the termination message to %s: %s", path, error)
        return False
    return True


def _field(text: str) -> str:
    return _fit(" ".join(text.split()), _FIELD_LIMIT_BYTES)


def _fit(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    cut = data[: limit - len(_CUT.encode()) - 1].decode("utf-8", errors="ignore")
    return cut + _CUT + ("\n" if text.endswith("\n") else "")
