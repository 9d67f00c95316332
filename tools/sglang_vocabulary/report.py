#!/usr/bin/env python3
"""Print, as Markdown, how today's classifier reads SGLang's own error vocabulary.

Per release (and for the lower layers' messages): how many messages, how many deserve a class
(label != other), how many of those the classifier calls other/none, and the share; then the
same per class. ``--misses`` lists every class-worthy message that falls to other/none.

    python tools/sglang_vocabulary/report.py [--misses]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from exporter.diagnosis.taxonomy import FailureClass
from tools.sglang_vocabulary.vocabulary import (
    LOWER_LAYERS,
    Summary,
    Verdict,
    load,
    load_rules,
    releases,
    verdicts,
)


def measured() -> dict[str, list[Verdict]]:
    rules = load_rules()
    names = [*releases(), LOWER_LAYERS.stem] if LOWER_LAYERS.exists() else releases()
    return {name: verdicts(load(name), rules) for name in names}


def headline(results: dict[str, list[Verdict]]) -> list[str]:
    out = [
        "| release | messages | class-worthy | to other/none | share | wrong class "
        "| labelled other given a class |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, found in results.items():
        s = Summary.of(found)
        out.append(
            f"| {name} | {s.messages} | {s.class_worthy} | {s.missed} | "
            f"{s.missed_share:.1%} | {s.wrong_class} ({s.wrong_share:.1%}) | "
            f"{s.false_class} of {s.labelled_other} ({s.false_share:.1%}) |"
        )
    return out


def per_class(results: dict[str, list[Verdict]]) -> list[str]:
    """Class-worthy messages per class and release: 'missed/total'."""
    names = list(results)
    classes = [c for c in FailureClass if c not in (FailureClass.OTHER, FailureClass.NONE)]
    out = [
        "| class | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for failure_class in classes:
        cells = []
        for name in names:
            worthy = [v for v in results[name] if v.want is failure_class]
            missed = sum(v.missed for v in worthy)
            cells.append(f"{missed}/{len(worthy)}" if worthy else "·")
        if any(cell != "·" for cell in cells):
            out.append(f"| {failure_class} | " + " | ".join(cells) + " |")
    return out


def wrong_pairs(results: dict[str, list[Verdict]]) -> list[str]:
    """Which classes the classifier confuses (want -> got), over all releases."""
    pairs = Counter(
        (v.want.value, v.got.value)
        for found in results.values()
        for v in found
        if v.wrong_class or v.false_class
    )
    out = ["| label | classifier | messages |", "|---|---|---:|"]
    out += [f"| {want} | {got} | {n} |" for (want, got), n in pairs.most_common()]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--misses", action="store_true", help="list every miss too")
    args = parser.parse_args(argv)
    results = measured()
    print("Class-worthy messages (label != other) the classifier calls other/none:\n")
    print("\n".join(headline(results)))
    print("\nPer class, missed/class-worthy:\n")
    print("\n".join(per_class(results)))
    print("\nWrong classes (label -> classifier), all releases:\n")
    print("\n".join(wrong_pairs(results)))
    if args.misses:
        for name, found in results.items():
            print(f"\n## {name}\n")
            for verdict in found:
                if verdict.missed or verdict.wrong_class:
                    print("- " + verdict.describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
