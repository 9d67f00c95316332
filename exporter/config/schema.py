"""The daemon's config as typed values: frozen dataclasses with their defaults, the values
a choice may take, the error every invalid config raises, and the group's size and rank."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from exporter.diagnosis.taxonomy import FailureClass
from exporter.sglang.flags import FlagValue, render_flags

_EMPTY: Mapping[Any, Any] = MappingProxyType({})
_PLACEHOLDER = re.compile(r"@[A-Z][A-Z0-9_]*@")  # filled in at deploy time, e.g. @LWS_GROUP_SIZE@
# "none" means the log shows no failure: there is nothing to retry.
RETRY_CLASSES = tuple(c.value for c in FailureClass if c is not FailureClass.NONE)
GROUP_POLICIES = ("exit", "relaunch")  # policy.group: what a failed rank of a group does
GIVE_UP_POLICIES = ("wait", "exit")  # policy.on_give_up
# policy.preflight: change a command predicted to fail in sizing, only report it, or skip.
PREFLIGHT_MODES = ("fix", "warn", "off")


class ConfigError(Exception):
    """A config that cannot be used; ``str()`` reads ``path:line: key: message``."""

    def __init__(self, path: str, line: int | None, key: str | None, message: str) -> None:
        super().__init__(path, line, key, message)
        self.path = path
        self.line = line
        self.key = key
        self.message = message

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"


@dataclass(frozen=True)
class SGLangSpec:
    python: str = "python3"
    module: str = "sglang.launch_server"
    version: str | None = None
    workdir: str | None = None
    args: Mapping[str, FlagValue] = field(default_factory=lambda: _EMPTY)
    env: Mapping[str, str] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True)
class Profile:
    name: str
    set: Mapping[str, FlagValue] = field(default_factory=lambda: _EMPTY)
    remove: tuple[str, ...] = ()


@dataclass(frozen=True)
class Policy:
    startup_timeout_s: float = 3600.0  # the outer cap; a stalled startup ends at startup_stall_s
    startup_stall_s: float = 300.0  # no startup progress (phase, shard, graph) that long: a hang
    backoff_base_s: float = 2.0
    backoff_cap_s: float = 300.0
    max_attempts: int = 5
    window_s: float = 900.0
    healthy_reset_s: float = 300.0
    stop_grace_s: float = 30.0
    health_interval_s: float = 5.0
    hang_timeout_s: float = 300.0
    automatic_remedies: bool = True  # when the ladder is exhausted, try the planner's change
    max_mem_fraction_static: float = 0.95
    preflight: str = "fix"  # one of PREFLIGHT_MODES
    retry: Mapping[str, bool] = field(default_factory=lambda: _EMPTY)
    group: str = "relaunch"  # read from a config: "exit" by default when --nnodes > 1
    on_give_up: str = "wait"  # read from a config: "exit" by default with a termination log


@dataclass(frozen=True)
class MetricsListen:
    host: str = "127.0.0.1"
    port: int = 9464

    @property
    def address(self) -> str:
        """``host:port`` as written in the config, IPv6 hosts in brackets."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Paths:
    state_dir: Path
    log_dir: Path
    termination_log: Path | None = None  # where the termination message goes, if anywhere


@dataclass(frozen=True)
class Config:
    source: Path | None
    sglang: SGLangSpec
    profiles: tuple[Profile, ...]
    policy: Policy
    metrics: MetricsListen
    paths: Paths

    def profile_args(self, index: int) -> dict[str, FlagValue]:
        """The base args patched by one profile: each profile patches the base, not the last."""
        profile = self.profiles[index]
        args = {**self.sglang.args, **profile.set}
        for name in profile.remove:
            args.pop(name, None)
        # Copy the lists so that a caller editing the result cannot change the config.
        return {name: list(v) if isinstance(v, list) else v for name, v in args.items()}

    def command(self, index: int) -> list[str]:
        args = render_flags(self.profile_args(index))
        return [self.sglang.python, "-m", self.sglang.module, *args]

    def profile_index(self, name: str) -> int:
        """The index of the profile with this name; KeyError if there is none."""
        for index, profile in enumerate(self.profiles):
            if profile.name == name:
                return index
        raise KeyError(name)


def nnodes(args: Mapping[str, FlagValue]) -> int | None:
    """SGLang's ``--nnodes`` (1 when absent): how many nodes the server spans; None for a
    placeholder a deploy-time script fills in (a group's config template)."""
    return _group_number(args.get("nnodes", 1))


def node_rank(args: Mapping[str, FlagValue]) -> int | None:
    """SGLang's ``--node-rank`` (0, the leader, when absent); None for a placeholder."""
    return _group_number(args.get("node-rank", 0))


def is_group(args: Mapping[str, FlagValue]) -> bool:
    """One rank of a multi-node group: --nnodes > 1, or templated (only a group templates
    it: deploy/container/sglang-sentinel-lws)."""
    size = nnodes(args)
    return size is None or size > 1


def is_placeholder(value: FlagValue) -> bool:
    """A value a deploy-time script fills in, like "@LWS_GROUP_SIZE@"."""
    return isinstance(value, str) and _PLACEHOLDER.fullmatch(value) is not None


def _group_number(value: FlagValue) -> int | None:
    return None if is_placeholder(value) else int(value)  # type: ignore[arg-type]
