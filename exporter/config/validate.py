"""The parsed TOML document checked key by key into the schema's dataclasses.

Each check raises ConfigError at the line of the key it is about (positions.py finds it),
so the first thing wrong is what the user reads, in the order the keys are checked here.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import fields
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any, NoReturn

from exporter.config.positions import Key, dotted, line_of
from exporter.config.schema import (
    GIVE_UP_POLICIES,
    GROUP_POLICIES,
    PREFLIGHT_MODES,
    RETRY_CLASSES,
    Config,
    ConfigError,
    MetricsListen,
    Paths,
    Policy,
    Profile,
    SGLangSpec,
    is_group,
    is_placeholder,
    nnodes,
    node_rank,
)
from exporter.sglang.flags import FlagValue
from exporter.termination import default_termination_log

_FLAG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PROFILE_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", re.ASCII)
_HOST = re.compile(r"[A-Za-z0-9._-]+")  # a host name or an IPv4 address
_PORT = re.compile(r"[0-9]{1,5}")
_DURATIONS = tuple(f.name for f in fields(Policy) if f.name.endswith("_s"))


class Validator:
    """Validates the parsed document, raising ConfigError at the offending key's line."""

    def __init__(self, source: str, text: str) -> None:
        self.source = source
        self.text = text

    def fail(self, key: Key, message: str, at: Key | None = None) -> NoReturn:
        """Raise for ``key``, at the line of ``at`` (for a missing key: its table)."""
        line = line_of(self.text, key if at is None else at)
        raise ConfigError(self.source, line, dotted(key), message)

    def config(self, data: dict[str, Any], origin: Path | None) -> Config:
        self.table(data, (), ("sglang", "profiles", "policy", "metrics", "paths"))
        sglang = self.sglang(data.get("sglang", {}))
        paths = self.paths(data.get("paths"), origin)
        policy = self.policy(
            data.get("policy", {}),
            group="exit" if is_group(sglang.args) else "relaunch",
            on_give_up="exit" if paths.termination_log else "wait",
        )
        return Config(
            source=origin,
            sglang=sglang,
            profiles=self.profiles(data.get("profiles", []), sglang.args),
            policy=policy,
            metrics=self.metrics(data.get("metrics", {})),
            paths=paths,
        )

    # --- the tables, in the order config() reads them ---------------------------------------

    def sglang(self, raw: object) -> SGLangSpec:
        key: Key = ("sglang",)
        table = self.table(raw, key, ("python", "module", "version", "workdir", "args", "env"))
        spec = SGLangSpec()
        module = self.string(table.get("module", spec.module), (*key, "module"))
        if not _MODULE.fullmatch(module):
            self.fail((*key, "module"), "must be a dotted Python module name")
        env = self.table(table.get("env", {}), (*key, "env"))
        for name in env:
            if not _ENV_NAME.fullmatch(name):
                self.fail((*key, "env", name), "not an environment variable name")
        args = self.flags(table.get("args", {}), (*key, "args"))
        self.group_flags(args, (*key, "args"))
        return SGLangSpec(
            python=self.nonempty(table.get("python", spec.python), (*key, "python")),
            module=module,
            version=self.optional_nonempty(table.get("version"), (*key, "version")),
            workdir=self.optional_nonempty(table.get("workdir"), (*key, "workdir")),
            args=args,
            env=MappingProxyType({n: self.string(v, (*key, "env", n)) for n, v in env.items()}),
        )

    def group_flags(self, args: Mapping[str, FlagValue], key: Key) -> None:
        """--nnodes and --node-rank decide what the daemon does on a failure and how it
        tells readiness: integers, the rank one of the group's (or placeholders of a config
        template, like "@LWS_GROUP_SIZE@", which a deploy-time script fills in)."""
        for name, least in (("nnodes", 1), ("node-rank", 0)):
            value = args.get(name, least)
            if is_placeholder(value):
                continue
            if type(value) is not int or value < least:
                self.fail(
                    (*key, name),
                    f'must be an integer >= {least} (or a placeholder like "@NAME@"), '
                    f"got {value!r}",
                )
        size, rank = nnodes(args), node_rank(args)
        if size is not None and rank is not None and rank >= size:
            self.fail(
                (*key, "node-rank"),
                f"must be below nnodes ({size}), got {rank}",
            )

    def paths(self, raw: object, origin: Path | None) -> Paths:
        key: Key = ("paths",)
        if raw is None:
            self.fail((*key, "state_dir"), "required key is missing", at=key)
        table = self.table(raw, key, ("state_dir", "log_dir", "termination_log"))
        base = origin.absolute().parent if origin else Path.cwd()
        resolved: dict[str, Path | None] = {}
        for name in ("state_dir", "log_dir"):
            if name not in table:
                self.fail((*key, name), "required key is missing", at=key)
            resolved[name] = base / os.path.expanduser(self.nonempty(table[name], (*key, name)))
        if "termination_log" not in table:
            resolved["termination_log"] = default_termination_log()
        else:  # "" writes none
            written = self.string(table["termination_log"], (*key, "termination_log"))
            resolved["termination_log"] = base / os.path.expanduser(written) if written else None
        return Paths(**resolved)

    def policy(self, raw: object, **defaults: str) -> Policy:
        """``defaults``: those of group and on_give_up, which depend on the rest."""
        key: Key = ("policy",)
        table = self.table(raw, key, tuple(f.name for f in fields(Policy)))
        values: dict[str, Any] = dict(defaults)
        for name, read in self.policy_readers().items():  # checked in this order
            if name in table:
                values[name] = read(table[name], (*key, name))
        policy = Policy(**values)
        if policy.backoff_cap_s < policy.backoff_base_s:
            culprit = "backoff_cap_s" if "backoff_cap_s" in table else "backoff_base_s"
            self.fail(
                (*key, culprit),
                f"backoff_cap_s ({policy.backoff_cap_s}) must be >= "
                f"backoff_base_s ({policy.backoff_base_s})",
            )
        return policy

    def profiles(self, raw: object, base: Mapping[str, FlagValue]) -> tuple[Profile, ...]:
        if not isinstance(raw, list):
            self.fail(("profiles",), f"must be an array of tables, got {_kind(raw)}")
        profiles: list[Profile] = []
        seen: dict[str, int] = {}
        for index, entry in enumerate(raw):
            key: Key = ("profiles", index)
            table = self.table(entry, key, ("name", "set", "remove"))
            if "name" not in table:
                self.fail((*key, "name"), "required key is missing", at=key)
            name = self.string(table["name"], (*key, "name"))
            if not _PROFILE_NAME.fullmatch(name):
                self.fail((*key, "name"), "must match [A-Za-z0-9_.-]+")
            if name in seen:
                self.fail(
                    (*key, "name"), f"duplicate profile name {name!r} (profiles[{seen[name]}])"
                )
            seen[name] = index
            remove = self.removed_flags(table.get("remove", []), (*key, "remove"), base)
            profiles.append(Profile(name, self.flags(table.get("set", {}), (*key, "set")), remove))
        return tuple(profiles) or (Profile("default"),)

    def removed_flags(
        self, remove: object, key: Key, base: Mapping[str, FlagValue]
    ) -> tuple[str, ...]:
        """A profile's ``remove``: flag names, each one the base sets."""
        if not isinstance(remove, list):
            self.fail(key, f"must be an array of flag names, got {_kind(remove)}")
        for position, flag in enumerate(remove):
            item = (*key, position)
            # Removing a flag the base never sets does nothing: most likely a typo.
            if self.flag_name(self.string(flag, item), item) not in base:
                self.fail(item, f"{flag!r} is not in sglang.args: nothing to remove")
        return tuple(remove)

    def metrics(self, raw: object) -> MetricsListen:
        key: Key = ("metrics", "listen")
        table = self.table(raw, key[:1], ("listen",))
        if "listen" not in table:
            return MetricsListen()
        listen = self.string(table["listen"], key)
        if listen.startswith("["):
            host, bracket, port = listen[1:].partition("]:")
            valid = bool(bracket) and _is_ipv6(host)
        else:
            host, colon, port = listen.rpartition(":")
            valid = bool(colon) and bool(_HOST.fullmatch(host))
        if not valid or not _PORT.fullmatch(port):
            self.fail(key, f"expected host:port (IPv6 in brackets: [::1]:9464), got {listen!r}")
        if not 1 <= int(port) <= 65535:
            self.fail(key, f"port must be in 1..65535, got {port}")
        return MetricsListen(host, int(port))

    # --- the policy's values ------------------------------------------------------------------

    def policy_readers(self) -> dict[str, Callable[[object, Key], Any]]:
        """Each policy key's check, in the order they run (the first error is the one shown)."""
        return {
            **dict.fromkeys(_DURATIONS, self.duration),
            "max_attempts": self.max_attempts,
            "max_mem_fraction_static": self.fraction,
            "automatic_remedies": self.boolean,
            "preflight": self.preflight_mode,
            "retry": self.retry,
            "group": partial(self.choice, allowed=GROUP_POLICIES),
            "on_give_up": partial(self.choice, allowed=GIVE_UP_POLICIES),
        }

    def duration(self, value: object, key: Key) -> float:
        seconds = self.number(value, key)
        if seconds <= 0:
            self.fail(key, f"must be > 0, got {value}")
        return seconds

    def max_attempts(self, value: object, key: Key) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            self.fail(key, f"must be an integer >= 1, got {value!r}")
        return value

    def fraction(self, value: object, key: Key) -> float:
        fraction = self.number(value, key)
        if not 0 < fraction <= 1:
            self.fail(key, f"must be in (0, 1], got {fraction}")
        return fraction

    def preflight_mode(self, mode: object, key: Key) -> str:
        if mode not in PREFLIGHT_MODES:
            self.fail(key, f"must be one of {', '.join(map(repr, PREFLIGHT_MODES))}, got {mode!r}")
        return mode  # type: ignore[return-value]

    def retry(self, raw: object, key: Key) -> Mapping[str, bool]:
        retry = self.table(raw, key)
        for name, value in retry.items():
            if name not in RETRY_CLASSES:
                self.fail(
                    (*key, name),
                    f"not a failure class (expected one of: {', '.join(RETRY_CLASSES)})",
                )
            self.boolean(value, (*key, name))
        return MappingProxyType(dict(retry))

    def choice(self, value: object, key: Key, allowed: tuple[str, ...]) -> str:
        choice = self.string(value, key)
        if choice not in allowed:
            expected = " or ".join(f'"{option}"' for option in allowed)
            self.fail(key, f"must be {expected}, got {choice!r}")
        return choice

    # --- values of any table ------------------------------------------------------------------

    def table(self, raw: object, key: Key, allowed: tuple[str, ...] | None = None) -> dict:
        """``raw`` as a table; with ``allowed``, any other key is an error."""
        if not isinstance(raw, dict):
            self.fail(key, f"must be a table, got {_kind(raw)}")
        for name in raw if allowed is not None else ():
            if name not in allowed:
                self.fail((*key, name), f"unknown key (expected one of: {', '.join(allowed)})")
        return raw

    def flags(self, raw: object, key: Key) -> Mapping[str, FlagValue]:
        flags = {
            self.flag_name(n, (*key, n)): self.flag(v, (*key, n))
            for n, v in self.table(raw, key).items()
        }
        port = flags.get("port")
        if "port" in flags and (type(port) is not int or not 1 <= port <= 65535):
            self.fail((*key, "port"), f"must be an integer in 1..65535, got {port!r}")
        return MappingProxyType(flags)

    def flag_name(self, name: str, key: Key) -> str:
        if not _FLAG_NAME.fullmatch(name):
            self.fail(key, "not a flag name: write it without the leading --")
        return name

    def flag(self, value: object, key: Key) -> FlagValue:
        if isinstance(value, bool):
            return value
        if not isinstance(value, list):
            return self.scalar(value, key, "a string, number, boolean or array")
        return [self.scalar(item, (*key, i), "a string or number") for i, item in enumerate(value)]

    def scalar(self, value: object, key: Key, expected: str) -> str | int | float:
        if isinstance(value, str):
            return self.string(value, key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if not isinstance(value, float):
            self.fail(key, f"must be {expected}, got {_kind(value)}")
        if not math.isfinite(value):
            self.fail(key, f"must be a finite number, got {value}")
        return value

    def number(self, value: object, key: Key) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(key, f"must be a number, got {_kind(value)}")
        try:
            number = float(value)
        except OverflowError:  # an integer of hundreds of digits
            number = math.inf
        if not math.isfinite(number):
            self.fail(key, f"must be a finite number, got {value}")
        return number

    def boolean(self, value: object, key: Key) -> bool:
        if not isinstance(value, bool):
            self.fail(key, f"must be true or false, got {_kind(value)}")
        return value

    def string(self, value: object, key: Key) -> str:
        if not isinstance(value, str):
            self.fail(key, f"must be a string, got {_kind(value)}")
        if "\0" in value:  # no command line or environment can carry it
            self.fail(key, "must not contain a NUL character")
        return value

    def nonempty(self, value: object, key: Key) -> str:
        """A string that must not be empty."""
        string = self.string(value, key)
        if not string:
            self.fail(key, "must not be empty")
        return string

    def optional_nonempty(self, value: object, key: Key) -> str | None:
        return None if value is None else self.nonempty(value, key)


def _kind(value: object) -> str:
    kinds = {bool: "boolean", int: "integer", float: "float", str: "string", list: "array"}
    return "table" if isinstance(value, dict) else kinds.get(type(value), "date/time")


def _is_ipv6(host: str) -> bool:
    try:
        ipaddress.IPv6Address(host)
    except ValueError:
        return False
    return True
