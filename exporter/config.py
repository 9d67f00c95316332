"""The daemon's TOML config: parsed with tomllib, validated into frozen dataclasses.

Every error names the file, the line and the dotted key. tomllib reports positions only for
syntax errors, so a small scanner over the source text finds where each key was written.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import json
import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, NoReturn

from exporter.diagnosis.taxonomy import FailureClass
from exporter.sglang.flags import FlagValue, render_flags
from exporter.termination import default_termination_log

Key = tuple[str | int, ...]  # a key's path from the document root; ints index arrays

_EMPTY: Mapping[Any, Any] = MappingProxyType({})
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_FLAG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PROFILE_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", re.ASCII)
_HOST = re.compile(r"[A-Za-z0-9._-]+")  # a host name or an IPv4 address
_PORT = re.compile(r"[0-9]{1,5}")
_PLACEHOLDER = re.compile(r"@[A-Z][A-Z0-9_]*@")  # filled in at deploy time, e.g. @LWS_GROUP_SIZE@
_LONG_INTEGER = re.compile(r"[0-9][0-9_]{4300,}")  # beyond what int() reads by default
_SYNTAX_AT = re.compile(r" \(at (?:line (\d+), column (\d+)|end of document)\)$")
_BLANKS = re.compile(r"(?:[ \t]|#[^\n]*)*")
_BLANK_LINES = re.compile(r"(?:[ \t]|#[^\n]*|\r?\n)*")
_SCALAR = re.compile(r"[^,\]}#\r\n]+")  # numbers, booleans, dates: skipped, not parsed
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


_DURATIONS = tuple(f.name for f in fields(Policy) if f.name.endswith("_s"))


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


def _group_number(value: FlagValue) -> int | None:
    return None if isinstance(value, str) and _PLACEHOLDER.fullmatch(value) else int(value)  # type: ignore[arg-type]


def load_config(path: str | Path) -> Config:
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ConfigError(
            str(path), None, None, f"cannot read: {error.strerror or error}"
        ) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise ConfigError(str(path), line, None, "not UTF-8 text") from None
    return parse_config(text, path)


def parse_config(text: str, source: str | Path = "<config>") -> Config:
    """Parse and validate; ``source`` names the file in errors and anchors relative paths.

    A source in angle brackets (the default ``<config>``) is no file: relative paths are then
    relative to the current directory.
    """
    name = str(source)
    origin = None if name.startswith("<") else Path(source)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise _syntax_error(str(error), text, name) from None
    except RecursionError:
        raise ConfigError(name, None, None, "invalid TOML: nested too deeply") from None
    except ValueError as error:  # tomllib lets int() refuse integers of thousands of digits
        digits = _LONG_INTEGER.search(text)
        if not digits:
            raise ConfigError(name, None, None, f"invalid TOML: {error}") from None
        message = "invalid TOML: integer too long (over 4300 digits)"
        raise _error_at(text, name, digits.start(), None, message) from None
    return _Reader(name, text).config(data, origin)


class _Reader:
    """Validates the parsed document, raising ConfigError at the offending key's line."""

    def __init__(self, source: str, text: str) -> None:
        self.source = source
        self.text = text

    def fail(self, key: Key, message: str, at: Key | None = None) -> NoReturn:
        """Raise for ``key``, at the line of ``at`` (for a missing key: its table)."""
        line = _line_of(self.text, _Scanner(self.text).run(), key if at is None else at)
        raise ConfigError(self.source, line, _dotted(key), message)

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
            if isinstance(value, str) and _PLACEHOLDER.fullmatch(value):
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
            remove = table.get("remove", [])
            if not isinstance(remove, list):
                self.fail((*key, "remove"), f"must be an array of flag names, got {_kind(remove)}")
            for position, flag in enumerate(remove):
                item = (*key, "remove", position)
                # Removing a flag the base never sets does nothing: most likely a typo.
                if self.flag_name(self.string(flag, item), item) not in base:
                    self.fail(item, f"{flag!r} is not in sglang.args: nothing to remove")
            profiles.append(
                Profile(name, self.flags(table.get("set", {}), (*key, "set")), tuple(remove))
            )
        return tuple(profiles) or (Profile("default"),)

    def policy(self, raw: object, **defaults: str) -> Policy:
        """``defaults``: those of group and on_give_up, which depend on the rest."""
        key: Key = ("policy",)
        table = self.table(raw, key, tuple(f.name for f in fields(Policy)))
        values: dict[str, Any] = dict(defaults)
        for name in _DURATIONS:
            if name in table:
                values[name] = self.number(table[name], (*key, name))
                if values[name] <= 0:
                    self.fail((*key, name), f"must be > 0, got {table[name]}")
        if "max_attempts" in table:
            attempts = table["max_attempts"]
            if not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 1:
                self.fail((*key, "max_attempts"), f"must be an integer >= 1, got {attempts!r}")
            values["max_attempts"] = attempts
        if "max_mem_fraction_static" in table:
            fraction = self.number(
                table["max_mem_fraction_static"], (*key, "max_mem_fraction_static")
            )
            if not 0 < fraction <= 1:
                self.fail((*key, "max_mem_fraction_static"), f"must be in (0, 1], got {fraction}")
            values["max_mem_fraction_static"] = fraction
        if "automatic_remedies" in table:
            if not isinstance(table["automatic_remedies"], bool):
                self.fail(
                    (*key, "automatic_remedies"),
                    f"must be true or false, got {_kind(table['automatic_remedies'])}",
                )
            values["automatic_remedies"] = table["automatic_remedies"]
        if "preflight" in table:
            mode = table["preflight"]
            if mode not in PREFLIGHT_MODES:
                self.fail(
                    (*key, "preflight"),
                    f"must be one of {', '.join(map(repr, PREFLIGHT_MODES))}, got {mode!r}",
                )
            values["preflight"] = mode
        if "retry" in table:
            retry = self.table(table["retry"], (*key, "retry"))
            for name, value in retry.items():
                if name not in RETRY_CLASSES:
                    self.fail(
                        (*key, "retry", name),
                        f"not a failure class (expected one of: {', '.join(RETRY_CLASSES)})",
                    )
                if not isinstance(value, bool):
                    self.fail((*key, "retry", name), f"must be true or false, got {_kind(value)}")
            values["retry"] = MappingProxyType(dict(retry))
        for name, allowed in (("group", GROUP_POLICIES), ("on_give_up", GIVE_UP_POLICIES)):
            if name in table:
                choice = self.string(table[name], (*key, name))
                if choice not in allowed:
                    expected = " or ".join(f'"{value}"' for value in allowed)
                    self.fail((*key, name), f"must be {expected}, got {choice!r}")
                values[name] = choice
        policy = Policy(**values)
        if policy.backoff_cap_s < policy.backoff_base_s:
            culprit = "backoff_cap_s" if "backoff_cap_s" in table else "backoff_base_s"
            self.fail(
                (*key, culprit),
                f"backoff_cap_s ({policy.backoff_cap_s}) must be >= "
                f"backoff_base_s ({policy.backoff_base_s})",
            )
        return policy

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


def _dotted(key: Key) -> str | None:
    parts: list[str] = []
    for part in key:
        if isinstance(part, int):
            parts[-1] += f"[{part}]"
        else:
            parts.append(part if _BARE_KEY.fullmatch(part) else json.dumps(part))
    return ".".join(parts) or None


def _syntax_error(message: str, text: str, source: str) -> ConfigError:
    """tomllib's ``... (at line N, column M)`` as a ConfigError naming the key being read."""
    match = _SYNTAX_AT.search(message)
    if not match:
        return ConfigError(source, None, None, f"invalid TOML: {message}")
    reason = f"invalid TOML: {message[: match.start()]}"
    if not match[1]:  # at the end of the document
        return _error_at(text, source, len(text), None, reason)
    line, column = int(match[1]), int(match[2])
    offset = sum(len(row) + 1 for row in text.split("\n")[: line - 1]) + column - 1
    return _error_at(text, source, offset, line, f"{reason} (column {column})")


def _error_at(text: str, source: str, offset: int, line: int | None, message: str) -> ConfigError:
    """An error at ``offset`` naming the innermost key read there, else the table being read.

    Without a line (the end of the document), the line is where that key starts.
    """
    items = _Scanner(text).run()
    inside = [item for item in items if item.start <= offset <= item.end]
    if inside:
        found = max(inside, key=lambda item: item.start)
    else:
        found = max(
            (item for item in items if item.header and item.start <= offset),
            key=lambda item: item.start,
            default=None,
        )
    if line is None:
        start = min(found.start, len(text.rstrip())) if inside else len(text.rstrip())
        line = text.count("\n", 0, start) + 1
    return ConfigError(source, line, found and _dotted(found.key), message)


def _line_of(text: str, items: list[_Item], key: Key) -> int | None:
    """The line of ``key``; else of the first key written under it; else of its table."""
    for candidate in (key, *(key[:n] for n in range(len(key) - 1, 0, -1))):
        found = next((i for i in items if i.key == candidate), None)
        found = found or next((i for i in items if i.key[: len(candidate)] == candidate), None)
        if found:
            return text.count("\n", 0, found.start) + 1
    return None


@dataclass
class _Item:
    key: Key
    start: int  # offset of its first character
    end: float  # offset just past it; infinite while unfinished
    header: bool = False


class _Stop(Exception):
    """The scanner met text it cannot read: what it found before stands."""


class _Scanner:
    """Where each key, table header and array item starts and ends in TOML text.

    It reads valid TOML exactly and stops at the first thing it cannot read, so that it can
    also name the key that holds a syntax error. Values are skipped, not parsed.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.items: list[_Item] = []
        self.array_tables: dict[Key, int] = {}  # [[name]] -> entries so far

    def run(self) -> list[_Item]:
        with contextlib.suppress(_Stop, RecursionError):
            self.document()
        return self.items

    def document(self) -> None:
        table: Key = ()
        while self.skip(newlines=True) < len(self.text):
            start = self.pos
            if self.take("[["):
                *parents, name = self.key()
                path = (*self.resolve(parents), name)
                count = self.array_tables.get(path, 0)
                self.array_tables[path] = count + 1
                table = (*path, count)
                closing = "]]"
            elif self.take("["):
                table = self.resolve(self.key())
                closing = "]"
            else:
                self.keyvalue(table)
                continue
            # Opened before the closing bracket, so that "[policy" names policy.
            item = self.open(table, start, header=True)
            self.skip()
            self.expect(closing)
            item.end = self.pos

    def resolve(self, names: list[str]) -> Key:
        """A header's path, through the latest entry of each array of tables on the way."""
        path: Key = ()
        for name in names:
            path = (*path, name)
            if path in self.array_tables:
                path = (*path, self.array_tables[path] - 1)
        return path

    def keyvalue(self, table: Key) -> None:
        start = self.pos
        item = self.open((*table, *self.key()), start)
        self.skip()
        self.expect("=")
        self.skip()
        self.value(item.key)
        item.end = self.pos

    def value(self, key: Key) -> None:
        if self.take("{"):
            while True:  # newlines and a trailing comma are TOML 1.1: be lenient
                self.skip(newlines=True)
                if self.take("}"):
                    return
                self.keyvalue(key)
                self.skip(newlines=True)
                if not self.take(","):
                    self.expect("}")
                    return
        if self.take("["):
            for index in itertools.count():
                self.skip(newlines=True)
                if self.take("]"):
                    return
                item = self.open((*key, index), self.pos)
                self.value(item.key)
                item.end = self.pos
                self.skip(newlines=True)
                if not self.take(","):
                    self.expect("]")
                    return
        if self.peek() in ("'", '"'):
            self.string()
            return
        match = _SCALAR.match(self.text, self.pos)
        if not match:
            raise _Stop
        self.pos = match.end()

    def key(self) -> list[str]:
        names = []
        while True:
            self.skip()
            bare = _BARE_KEY.match(self.text, self.pos)
            if bare:
                names.append(bare[0])
                self.pos = bare.end()
            else:
                start = self.pos
                self.string(single_line=True)
                try:  # let tomllib undo the escapes of a quoted key
                    names.append(tomllib.loads("k = " + self.text[start : self.pos])["k"])
                except tomllib.TOMLDecodeError:
                    raise _Stop from None
            self.skip()
            if not self.take("."):
                return names

    def string(self, single_line: bool = False) -> None:
        quote = self.peek()
        if quote not in ("'", '"'):
            raise _Stop
        text, escapes = self.text, quote == '"'
        triple = not single_line and text.startswith(quote * 3, self.pos)
        i = self.pos + (3 if triple else 1)
        while i < len(text):
            char = text[i]
            if char == "\\" and escapes:
                i += 2
            elif char == quote and (not triple or text.startswith(quote * 3, i)):
                run = 1
                while triple and run < 5 and text.startswith(quote, i + run):
                    run += 1  # up to two quotes before the closing three belong to the string
                self.pos = i + run
                return
            elif char == "\n" and not triple:
                break
            else:
                i += 1
        raise _Stop

    def open(self, key: Key, start: int, header: bool = False) -> _Item:
        item = _Item(key, start, math.inf, header)
        self.items.append(item)
        return item

    def skip(self, newlines: bool = False) -> int:
        """Skip blanks and comments (and line ends, if asked); return the new position."""
        self.pos = (_BLANK_LINES if newlines else _BLANKS).match(self.text, self.pos).end()
        return self.pos

    def peek(self) -> str:
        return self.text[self.pos : self.pos + 1]

    def take(self, token: str) -> bool:
        if self.text.startswith(token, self.pos):
            self.pos += len(token)
            return True
        return False

    def expect(self, token: str) -> None:
        if not self.take(token):
            raise _Stop
