"""One regex for whether any of many literals occurs in a text, for the quick checks that
run on every line before the costly ones (the classifier's signatures, the excerpt's
error-shaped lines)."""

from __future__ import annotations

import re
from collections.abc import Iterable


def any_of(literals: Iterable[str]) -> re.Pattern[str]:
    """A pattern whose ``search`` finds whether any of ``literals`` occurs, built as a trie
    (``CUDA (?:error|out)``): the regex engine then drops a position at its first character,
    not at every literal's (about 10x faster than a plain alternation)."""
    trie: dict = {}
    for literal in literals:
        node = trie
        for char in literal:
            node = node.setdefault(char, {})
        node[""] = {}

    def render(node: dict) -> str:
        if "" in node:  # a shorter literal ends here: enough for a search
            return ""
        branches = [re.escape(char) + render(child) for char, child in sorted(node.items())]
        return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"

    return re.compile(render(trie))


# A shell's report of a child SIGKILLed (glibc's strsignal) in the locales an operator's
# terminal may run in: zh_CN, ru, de, ja, ko, fr, es. English "Killed" is matched as a word.
KILLED_TRANSLATED = (
    "已杀死",
    "Убито",
    "Getötet",
    "強制終了",
    "죽었음",
    "Processus arrêté",
    "Terminado (killed)",
)
KILLED_TRANSLATED_WORDS = "|".join(map(re.escape, KILLED_TRANSLATED))  # for a regex
