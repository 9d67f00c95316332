"""The roles of an SGLang server's processes, from the titles SGLang sets
(``sglang::scheduler_TP3``, ``sglang::detokenizer``); the launcher keeps its command line."""

from __future__ import annotations

import re

# A closed set: metric labels take these values and nothing else.
ROLES = ("launcher", "scheduler", "detokenizer", "other")
_TP_RANK = re.compile(r"TP(\d+)")


def role_of(cmdline: str, is_leader: bool) -> tuple[str, str]:
    """(role, tp_rank) from a process title; tp_rank is "" where it does not apply."""
    if is_leader:
        return "launcher", ""
    title = cmdline.split(" ", 1)[0]
    if title.startswith("sglang::scheduler"):
        match = _TP_RANK.search(title)
        return "scheduler", match.group(1) if match else "0"
    if title.startswith("sglang::detokenizer"):
        return "detokenizer", ""
    return "other", ""
