"""How often the classifier agrees with the labels of a set of real logs.

    python -m tools.accuracy [--folds 5] [--misses]

Reports each labelled set (the shared corpus, the held-out logs, the recorded CPU runs), the
corpus split into folds by thread (all logs of one GitHub thread in one fold, so that a rule
written for one report cannot be measured on its twin), and the corpus files kept sealed:
never opened while the rules were written, so their figure is the blind one.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from exporter.diagnosis.classify import classify
from exporter.logs.reader import read_log

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("SGLANG_SENTINEL_CORPUS", REPO.parent / "shared" / "corpus"))
DATA = REPO / "tests" / "data"
LABELLED_SETS = {
    "corpus": CORPUS,
    "heldout": DATA / "heldout",
    "heldout2": DATA / "heldout2",
    "heldout3": DATA / "heldout3",
    "heldout4": DATA / "heldout4",
    "heldout5": DATA / "heldout5",
    "heldout6": DATA / "heldout6",
    "heldout7": DATA / "heldout7",
    "heldout8": DATA / "heldout8",
    "heldout9": DATA / "heldout9",
    "heldout10": DATA / "heldout10",
    "heldout11": DATA / "heldout11",
    "heldout12": DATA / "heldout12",
    "heldout13": DATA / "heldout13",
    "heldout14": DATA / "heldout14",
    "heldout15": DATA / "heldout15",
    "heldout16": DATA / "heldout16",
    "heldout17": DATA / "heldout17",
    "heldout18": DATA / "heldout18",
    "heldout19": DATA / "heldout19",
    "heldout20": DATA / "heldout20",
    "heldout21": DATA / "heldout21",
    "heldout22": DATA / "heldout22",
    "heldout23": DATA / "heldout23",
    "heldout24": DATA / "heldout24",
    "heldout25": DATA / "heldout25",
    "heldout26": DATA / "heldout26",
    "heldout27": DATA / "heldout27",
    "heldout28": DATA / "heldout28",
    "heldout29": DATA / "heldout29",
    "heldout30": DATA / "heldout30",
    "heldout31": DATA / "heldout31",
    "heldout32": DATA / "heldout32",
    "heldout33": DATA / "heldout33",
    "heldout34": DATA / "heldout34",
    "heldout35": DATA / "heldout35",
    "heldout36": DATA / "heldout36",
    "heldout37": DATA / "heldout37",
    "heldout38": DATA / "heldout38",
    "heldout39": DATA / "heldout39",
    "heldout40": DATA / "heldout40",
    "heldout41": DATA / "heldout41",
    "heldout42": DATA / "heldout42",
    "heldout43": DATA / "heldout43",
    "heldout44": DATA / "heldout44",
    "heldout45": DATA / "heldout45",
    "heldout46": DATA / "heldout46",
    "heldout47": DATA / "heldout47",
    "heldout48": DATA / "heldout48",
    "heldout49": DATA / "heldout49",
    "heldout50": DATA / "heldout50",
    "heldout51": DATA / "heldout51",
    "heldout52": DATA / "heldout52",
    "heldout53": DATA / "heldout53",
    "heldout54": DATA / "heldout54",
    "heldout55": DATA / "heldout55",
    "heldout56": DATA / "heldout56",
    "heldout57": DATA / "heldout57",
    "heldout58": DATA / "heldout58",
    "heldout59": DATA / "heldout59",
    "heldout60": DATA / "heldout60",
    "heldout61": DATA / "heldout61",
    "heldout62": DATA / "heldout62",
    "heldout63": DATA / "heldout63",
    "heldout64": DATA / "heldout64",
    "heldout65": DATA / "heldout65",
    "heldout66": DATA / "heldout66",
    "heldout67": DATA / "heldout67",
    "heldout68": DATA / "heldout68",
    "heldout69": DATA / "heldout69",
    "heldout70": DATA / "heldout70",
    "heldout71": DATA / "heldout71",
    "heldout72": DATA / "heldout72",
    "heldout73": DATA / "heldout73",
    "heldout74": DATA / "heldout74",
    "heldout75": DATA / "heldout75",
    "heldout76": DATA / "heldout76",
    "heldout77": DATA / "heldout77",
    "heldout78": DATA / "heldout78",
    "heldout79": DATA / "heldout79",
    "heldout80": DATA / "heldout80",
    "heldout81": DATA / "heldout81",
    "heldout82": DATA / "heldout82",
    "heldout83": DATA / "heldout83",
    "heldout84": DATA / "heldout84",
    "heldout85": DATA / "heldout85",
    "heldout86": DATA / "heldout86",
    "heldout87": DATA / "heldout87",
    "heldout88": DATA / "heldout88",
    "heldout89": DATA / "heldout89",
    "heldout90": DATA / "heldout90",
    "heldout91": DATA / "heldout91",
    "heldout92": DATA / "heldout92",
    "heldout93": DATA / "heldout93",
    "heldout94": DATA / "heldout94",
    "heldout95": DATA / "heldout95",
    "heldout96": DATA / "heldout96",
    "heldout97": DATA / "heldout97",
    "heldout98": DATA / "heldout98",
    "heldout99": DATA / "heldout99",
    "heldout100": DATA / "heldout100",
    "heldout101": DATA / "heldout101",
    "heldout102": DATA / "heldout102",
    "heldout103": DATA / "heldout103",
    "heldout104": DATA / "heldout104",
    "heldout105": DATA / "heldout105",
    "heldout106": DATA / "heldout106",
    "heldout107": DATA / "heldout107",
    "heldout108": DATA / "heldout108",
    "heldout109": DATA / "heldout109",
    "heldout110": DATA / "heldout110",
    "heldout111": DATA / "heldout111",
    "heldout112": DATA / "heldout112",
    "heldout113": DATA / "heldout113",
    "heldout114": DATA / "heldout114",
    "heldout115": DATA / "heldout115",
    "heldout116": DATA / "heldout116",
    "heldout117": DATA / "heldout117",
    "heldout118": DATA / "heldout118",
    "heldout119": DATA / "heldout119",
    "heldout120": DATA / "heldout120",
    "heldout121": DATA / "heldout121",
    "heldout122": DATA / "heldout122",
    "heldout123": DATA / "heldout123",
    "heldout124": DATA / "heldout124",
    "heldout125": DATA / "heldout125",
    "heldout126": DATA / "heldout126",
    "heldout127": DATA / "heldout127",
    "heldout128": DATA / "heldout128",
    "heldout129": DATA / "heldout129",
    "heldout130": DATA / "heldout130",
    "heldout131": DATA / "heldout131",
    "heldout132": DATA / "heldout132",
    "heldout133": DATA / "heldout133",
    "heldout134": DATA / "heldout134",
    "heldout135": DATA / "heldout135",
    "heldout136": DATA / "heldout136",
    "heldout137": DATA / "heldout137",
    "heldout138": DATA / "heldout138",
    "heldout139": DATA / "heldout139",
    "heldout140": DATA / "heldout140",
    "heldout141": DATA / "heldout141",
    "heldout142": DATA / "heldout142",
    "heldout143": DATA / "heldout143",
    "heldout144": DATA / "heldout144",
    "heldout145": DATA / "heldout145",
    "heldout146": DATA / "heldout146",
    "heldout147": DATA / "heldout147",
    "heldout148": DATA / "heldout148",
    "heldout149": DATA / "heldout149",
    "cpu-0.5.9": DATA / "sglang-0.5.9-cpu",
    "cpu-0.5.23": DATA / "sglang-0.5.23-cpu",
}
# Corpus files of one fold of threads, set aside before the layered classifier was written
# (2026-12-01) and never opened while writing its rules: the blind part. Rotate the fold
# (and write down the figure first) when the next rules are written. 310 left it on
# 2026-12-07: a search of every log for NVSHMEM's words printed its lines and label.
SEALED = frozenset({"328.log", "330.log", "334.log", "336.log", "338.log"})


@dataclass(frozen=True)
class Agreement:
    file: str
    thread: str
    want_class: str
    got_class: str
    want_root: str | None
    got_root: str | None
    signature: str | None

    @property
    def class_right(self) -> bool:
        return self.want_class == self.got_class

    @property
    def root_right(self) -> bool:
        return self.want_root == self.got_root

    def describe(self) -> str:
        marks = ("class ok" if self.class_right else "CLASS") + ("" if self.root_right else " ROOT")
        text = (
            f"{self.file}: {marks}: want {self.want_class}, got {self.got_class} [{self.signature}]"
        )
        if not self.root_right:
            text += f"\n    want root {(self.want_root or '')[:120]!r}"
            text += f"\n    got root  {(self.got_root or '')[:120]!r}"
        return text


def labels_of(directory: Path) -> list[dict]:
    with open(directory / "labels.jsonl", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def score(directory: Path, labels: Iterable[dict] | None = None) -> list[Agreement]:
    """Classify every labelled file of ``directory``."""
    agreements = []
    for label in labels if labels is not None else labels_of(directory):
        text = (directory / label["file"]).read_bytes().decode("utf-8", errors="replace")
        result = classify(*read_log(text))
        agreements.append(
            Agreement(
                file=label["file"],
                thread=label.get("source") or label["file"],
                want_class=label["failure_class"],
                got_class=result.failure_class.value,
                want_root=(label.get("root_cause_line") or "").strip() or None,
                got_root=result.root_cause_line,
                signature=result.signature,
            )
        )
    return agreements


def fold_of(thread: str, folds: int) -> int:
    """A thread's fold: stable across runs and machines."""
    return int(hashlib.sha256(thread.encode()).hexdigest(), 16) % folds


def rates(agreements: Sequence[Agreement]) -> tuple[float, float]:
    if not agreements:
        return 0.0, 0.0
    total = len(agreements)
    classes = sum(a.class_right for a in agreements)
    roots = sum(a.root_right for a in agreements)
    return classes / total, roots / total


def _line(name: str, agreements: Sequence[Agreement]) -> str:
    classes, roots = rates(agreements)
    n = len(agreements)
    right = sum(a.class_right for a in agreements)
    rooted = sum(a.root_right for a in agreements)
    return f"| {name} | {n} | {right} ({classes:.0%}) | {rooted} ({roots:.0%}) |"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folds", type=int, default=5, help="folds of the corpus by thread")
    parser.add_argument("--misses", action="store_true", help="list every disagreement")
    args = parser.parse_args(argv)
    print("| set | logs | classes right | root lines right |\n|---|---|---|---|")
    scored = {name: score(path) for name, path in LABELLED_SETS.items() if path.exists()}
    for name, agreements in scored.items():
        print(_line(name, agreements))
    corpus = scored.get("corpus", [])
    for fold in range(args.folds):
        members = [a for a in corpus if fold_of(a.thread, args.folds) == fold]
        print(_line(f"corpus fold {fold + 1}/{args.folds} (by thread)", members))
    print(_line("corpus, sealed (blind)", [a for a in corpus if a.file in SEALED]))
    if args.misses:
        for name, agreements in scored.items():
            for agreement in agreements:
                if agreement.file in SEALED and name == "corpus":
                    continue  # the blind part stays unread
                if not (agreement.class_right and agreement.root_right):
                    print(f"{name}/{agreement.describe()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
