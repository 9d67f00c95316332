"""Flags the installed SGLang does not know, caught before a launch costs minutes.

0.5.23 renamed and removed flags 0.5.9 had (``--cuda-graph-max-bs`` became ambiguous,
``--enable-piecewise-cuda-graph`` is gone). The real ``--help`` is read once per
interpreter and version and cached in the state directory. Like argparse (allow_abbrev),
a unique prefix of a known flag is accepted and an ambiguous one is not.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

_FLAG = re.compile(r"(?<![\w-])--([a-z0-9][a-z0-9-_]*)")
HELP_TIMEOUT_S = 120.0


def read_known_flags(
    command: Sequence[str], env: Mapping[str, str], cache_dir: Path, version: str | None
) -> frozenset[str] | None:
    """The flags ``command --help`` lists (without ``--``), cached; None when --help fails
    (then nothing is checked: a launch will say what is wrong)."""
    key = hashlib.sha256(json.dumps([list(command), version]).encode()).hexdigest()[:16]
    cache = cache_dir / f"sglang-flags-{key}.json"
    try:
        return frozenset(json.loads(cache.read_text()))
    except (OSError, ValueError):
        pass
    try:
        done = subprocess.run(
            [*command, "--help"],
            env=dict(env),
            capture_output=True,
            timeout=HELP_TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    known = frozenset(_FLAG.findall(done.stdout.decode("utf-8", errors="replace")))
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(sorted(known)))
    except OSError:
        pass  # unwritable state dir: read --help again next time
    return known


def unknown_flags(names: Iterable[str], known: frozenset[str]) -> list[str]:
    """Flag names (without ``--``) the parser would reject: unknown, or an ambiguous prefix."""
    rejected = []
    for name in names:
        if name in known:
            continue
        matches = [flag for flag in known if flag.startswith(name)]
        if len(matches) != 1:
            rejected.append(name)
    return rejected
