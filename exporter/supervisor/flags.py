"""The flags the installed SGLang knows, from its real ``--help``: read once per
interpreter and version and cached in the state directory, so that a flag it would reject
is caught before a launch costs minutes (which ones it rejects: ``sglang/help.py``).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from exporter.sglang.help import help_flags

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
    known = help_flags(done.stdout.decode("utf-8", errors="replace"))
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(sorted(known)))
    except OSError:
        pass  # unwritable state dir: read --help again next time
    return known
