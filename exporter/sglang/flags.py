"""SGLang's command line: flag values, rendering them into a command and parsing one back,
flag names as argparse resolves them (aliases, unique prefixes), and where the server
listens."""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Mapping, Sequence

FlagValue = str | int | float | bool | list[str | int | float]

# SGLang's defaults for --host and --port.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 30000

# Every flag the planner reads, with SGLang's argparse aliases. The names that differ by
# version are both here: 0.5.9's mamba-scheduler-strategy and cuda-graph-max-bs, 0.5.23's
# mamba-radix-cache-strategy and cuda-graph-max-bs-decode.
FLAG_NAMES: dict[str, str] = {
    name: name
    for name in (
        "mem-fraction-static",
        "context-length",
        "max-running-requests",
        "max-total-tokens",
        "max-prefill-tokens",
        "chunked-prefill-size",
        "page-size",
        "tp-size",
        "pp-size",
        "dp-size",
        "enable-dp-attention",
        "kv-cache-dtype",
        "dtype",
        "quantization",
        "device",
        "speculative-algorithm",
        "speculative-num-steps",
        "speculative-eagle-topk",
        "speculative-num-draft-tokens",
        "speculative-draft-model-path",
        "model-path",
        "speculative-ngram-max-match-window-size",
        "mamba-full-memory-ratio",
        "max-mamba-cache-size",
        "mamba-ssm-dtype",
        "disable-radix-cache",
        "disable-overlap-schedule",
        "disable-cuda-graph",
        "language-only",
        "mm-feature-transport",
        "mamba-scheduler-strategy",
        "mamba-radix-cache-strategy",
        "cuda-graph-max-bs",
        "cuda-graph-max-bs-decode",
    )
} | {
    "tensor-parallel-size": "tp-size",
    "pipeline-parallel-size": "pp-size",
    "data-parallel-size": "dp-size",
    "speculative-draft-model": "speculative-draft-model-path",
}


class FlagError(ValueError):
    """A command line that is not SGLang flags."""


def render_flags(args: Mapping[str, FlagValue]) -> list[str]:
    """SGLang's command-line flags: true -> ``--k``, false -> nothing, lists -> ``--k a b``."""
    rendered: list[str] = []
    for name, value in args.items():
        if value is False:
            continue
        rendered.append(f"--{name}")
        if isinstance(value, list):
            rendered += [str(item) for item in value]
        elif value is not True:
            rendered.append(str(value))
    return rendered


def parse_flags(words: Sequence[str]) -> dict[str, FlagValue]:
    """SGLang's command line as name -> value: ``--name value``, ``--name=value``,
    ``--name`` alone is true, ``--name a b`` a list."""
    words = list(words)
    if words and words[0] == "--":
        words = words[1:]
    flags: dict[str, FlagValue] = {}
    name = None
    for word in words:
        if word.startswith("--") and len(word) > 2:
            name, _, value = word[2:].partition("=")
            flags[name] = value if value else True
            if value:
                name = None
        elif name is None:
            raise FlagError(f"SGLang flag value {word!r} follows no --flag")
        elif flags[name] is True:
            flags[name] = word
        else:
            previous = flags[name]
            flags[name] = [*previous, word] if isinstance(previous, list) else [previous, word]
    return flags


def abbreviated(name: str, options: Collection[str]) -> str | None:
    """The option ``name`` stands for, as argparse (allow_abbrev) reads it: itself, or the
    one option it is a prefix of; None when unknown or ambiguous. Two aliases of one flag
    are two options: argparse rejects a prefix of both as ambiguous."""
    if name in options:
        return name
    matches = [option for option in options if name and option.startswith(name)]
    return matches[0] if len(matches) == 1 else None


def normalize_flags(flags: Mapping[str, object]) -> dict[str, object]:
    """Flag names without ``--``, aliases and unique prefixes resolved the way argparse
    does (``speculative-algo`` is ``speculative-algorithm``); ``false`` drops a flag;
    names not in FLAG_NAMES (or ambiguous) are kept as given."""
    normalized: dict[str, object] = {}
    for raw, value in flags.items():
        given = str(raw).lstrip("-").split("=", 1)[0]
        option = abbreviated(given, FLAG_NAMES)
        name = FLAG_NAMES[option] if option else given
        if value is False or value is None:
            normalized.pop(name, None)
        else:
            normalized[name] = value
    return normalized


def server_address(args: Mapping[str, object]) -> tuple[str, int]:
    """Where SGLang listens, from its flags, as this host reaches it: the IPv4 wildcard
    (0.0.0.0, or an empty host: every interface) through 127.0.0.1, the IPv6 wildcard
    (::) through ::1; uvicorn binds IPv6 with IPV6_V6ONLY, so :: takes no IPv4. A host
    written in brackets ([::1], as in a URL) is read without them."""
    host = str(args.get("host", DEFAULT_HOST))
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if host == "" or (address is not None and address.is_unspecified):
        host = "::1" if address is not None and address.version == 6 else "127.0.0.1"
    return host, int(args.get("port", DEFAULT_PORT))  # type: ignore[call-overload]


def server_url(args: Mapping[str, object]) -> str:
    """The server's base URL from its flags (an IPv6 host in brackets)."""
    host, port = server_address(args)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
