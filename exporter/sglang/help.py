"""The flags SGLang's own ``--help`` lists, and the flags it would reject.

0.5.23 renamed and removed flags 0.5.9 had (``--cuda-graph-max-bs`` became ambiguous,
``--enable-piecewise-cuda-graph`` is gone). Like argparse (allow_abbrev), a unique prefix
of a known flag is accepted and an ambiguous one is not. Running ``--help`` and caching
its flags is the supervisor's (``supervisor/flags.py``): this module only reads text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from exporter.sglang.flags import abbreviated

_FLAG = re.compile(r"(?<![\w-])--([a-z0-9][a-z0-9-_]*)")


def help_flags(text: str) -> frozenset[str]:
    """The flags (without ``--``) a ``--help`` text lists, aliases included."""
    return frozenset(_FLAG.findall(text))


def unknown_flags(names: Iterable[str], known: frozenset[str]) -> list[str]:
    """Flag names (without ``--``) the parser would reject: unknown, or an ambiguous prefix."""
    return [name for name in names if abbreviated(name, known) is None]
