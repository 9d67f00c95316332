"""Pastes hard-wrapped at a terminal's width.

A narrow terminal, ``screen`` or a copy from a fixed-width console breaks every long line
into rows of exactly its width, mid-word: ``... cache hit`` / `` rate: 11.42%, ...``. Read
row by row, a wrapped record no longer parses (a ``fired up`` line, a batch line) and a
message is cut in two. Such a file shows a width that many *different* rows fill exactly,
each followed by a row that starts no record of its own; a log that merely repeats its
longest line (one per rank) or pads its lines with spaces shows no such width.

The rejoined record keeps its first row's number and text as its raw line, so a root cause
stays a line of the file as it was given.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from exporter.logs.lines import opens_a_record

# Below this width a "wrap" is more likely a short log's coincidence than a terminal.
MIN_WIDTH = 60
# At least this many different rows fill the width and go on in the next row.
MIN_WRAPPED_ROWS = 2
# ... and most rows of that width do (an unwrapped line may fill it by chance).
MIN_SHARE = 0.6
_PADDING = "  "
_SAME_START = 8  # characters: a timestamp's date, a path's first directories
# What starts a line of its own, wrapped or not: an indented frame or source line, Python's
# own headers (a traceback's, faulthandler's), an exception, argparse's error, a timestamp.
_OWN_LINE = re.compile(
    r"\s{2,}\S|\s*(?:File \"|Traceback|During handling|The above|Fatal Python error"
    r"|(?:Current t|T)hread 0x|\d{4}-\d\d-\d\d[ T]\d\d:|[\w.-]+(?: [\w.-]+)?: error: "
    r"|(?:[a-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Warning|Interrupt)\b)"
)
# A whole frame header: what goes on from it is the code line under it, unless the row
# holds nothing but the rest of the function's name.
_WHOLE_FRAME = re.compile(r'File ".*", line \d+, in \S+$')
_NAME_TAIL = re.compile(r"\w+")
# What a reply puts before every row, after the wrap: a Markdown quote's "> ", once per level
# (not a REPL's ">>> ").
_QUOTE = re.compile(r"(?:>(?: |$))+")


def wrap_width(rows: Sequence[str]) -> int | None:
    """The width ``rows`` were hard-wrapped at, or None when they were not."""
    lengths = Counter(len(row) for row in rows)
    if not lengths:
        return None
    width = max(lengths)
    if width < MIN_WIDTH or lengths[width] < MIN_WRAPPED_ROWS:
        return None
    full = [i for i, row in enumerate(rows[:-1]) if fills(row, width)]
    going_on = [rows[i] for i in full if continues(rows[i + 1], rows[i])]
    if len(set(going_on)) < MIN_WRAPPED_ROWS or len(going_on) < MIN_SHARE * len(full):
        return None
    return width


def continues(row: str, above: str) -> bool:
    """Whether ``row`` can be the rest of the row ``above``: quoted as it is, it starts no
    record or line of its own, nor the way the row above starts (a record of a format no
    wrapper names, repeated)."""
    head, body, _ = _marked(row)
    above_head, above_body, _ = _marked(above)
    return (
        head == above_head
        and bool(body.strip())
        and body[:_SAME_START] != above_body[:_SAME_START]
        and not _OWN_LINE.match(body)
        and not (_WHOLE_FRAME.search(above_body) and not _NAME_TAIL.fullmatch(body))
        and not opens_a_record(body)
    )


def fills(row: str, width: int) -> bool:
    """Whether ``row`` was cut at ``width``. A row padded to the width with spaces was not;
    one cut just after a space ends in that one space."""
    return len(row) == width and not _marked(row)[1].endswith(_PADDING)


def _marked(row: str) -> tuple[str, str, str]:
    """``row`` as (what marks it, the text, what closes it): a reply's quote or a chat's
    inline code is put on each row of a paste after the terminal wrapped it."""
    if row.startswith("`") and row.endswith("`") and row.count("`") == 2:
        return "`", row[1:-1], "`"
    quote = _QUOTE.match(row)
    if quote is not None:
        return row[: quote.end()], row[quote.end() :], ""
    return "", row, ""


@dataclass(frozen=True, slots=True)
class Rejoined:
    """A record rejoined from the rows it was wrapped into."""

    first: str  # its first row, as given: the raw line it is shown as
    text: str  # the rows joined
    rows: int


class Rejoiner:
    """Rows in, records out: each row that fills the width is held until the rows that go
    on from it have come (across calls: a stream's reads cut anywhere)."""

    def __init__(self, width: int) -> None:
        self.width = width
        self._held: list[str] = []

    def feed(self, rows: Iterable[str]) -> Iterator[str | Rejoined]:
        width = self.width
        for row in rows:
            if self._held:
                if continues(row, self._held[-1]):
                    self._held.append(row)
                    if not fills(row, width):
                        yield self._release()
                    continue
                yield self._release()
            if fills(row, width):
                self._held.append(row)
            else:
                yield row

    def close(self) -> list[str | Rejoined]:
        return [self._release()] if self._held else []

    def _release(self) -> str | Rejoined:
        held, self._held = self._held, []
        if len(held) == 1:
            return held[0]
        head, _, tail = _marked(held[0])
        text = head + "".join(_marked(row)[1] for row in held) + tail
        return Rejoined(held[0], text, len(held))
