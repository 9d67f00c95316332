"""Where each key, table header and array item sits in TOML text.

tomllib reports positions only for syntax errors, so this scanner reads the source text
again to tell the line a valid document wrote a key on, or the key a syntax error is in.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import re
import tomllib
from dataclasses import dataclass

Key = tuple[str | int, ...]  # a key's path from the document root; ints index arrays

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_BLANKS = re.compile(r"(?:[ \t]|#[^\n]*)*")
_BLANK_LINES = re.compile(r"(?:[ \t]|#[^\n]*|\r?\n)*")
_SCALAR = re.compile(r"[^,\]}#\r\n]+")  # numbers, booleans, dates: skipped, not parsed


def dotted(key: Key) -> str | None:
    """A key as written in TOML: ``profiles[0].set."odd key"``; None for the root."""
    parts: list[str] = []
    for part in key:
        if isinstance(part, int):
            parts[-1] += f"[{part}]"
        else:
            parts.append(part if _BARE_KEY.fullmatch(part) else json.dumps(part))
    return ".".join(parts) or None


def line_of(text: str, key: Key) -> int | None:
    """The line of ``key``; else of the first key written under it; else of its table."""
    items = scan(text)
    for candidate in (key, *(key[:n] for n in range(len(key) - 1, 0, -1))):
        found = next((i for i in items if i.key == candidate), None)
        found = found or next((i for i in items if i.key[: len(candidate)] == candidate), None)
        if found:
            return text.count("\n", 0, found.start) + 1
    return None


@dataclass
class Item:
    key: Key
    start: int  # offset of its first character
    end: float  # offset just past it; infinite while unfinished
    header: bool = False


def scan(text: str) -> list[Item]:
    """Every item of ``text`` up to the first thing the scanner cannot read."""
    return _Scanner(text).run()


class _Stop(Exception):
    """The scanner met text it cannot read: what it found before stands."""


class _Scanner:
    """Reads valid TOML exactly and stops at the first thing it cannot read, so that it can
    also name the key that holds a syntax error. Values are skipped, not parsed."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.items: list[Item] = []
        self.array_tables: dict[Key, int] = {}  # [[name]] -> entries so far

    def run(self) -> list[Item]:
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
            self.inline_table(key)
        elif self.take("["):
            self.array(key)
        elif self.peek() in ("'", '"'):
            self.string()
        else:
            match = _SCALAR.match(self.text, self.pos)
            if not match:
                raise _Stop
            self.pos = match.end()

    def inline_table(self, key: Key) -> None:
        while True:  # newlines and a trailing comma are TOML 1.1: be lenient
            self.skip(newlines=True)
            if self.take("}"):
                return
            self.keyvalue(key)
            self.skip(newlines=True)
            if not self.take(","):
                self.expect("}")
                return

    def array(self, key: Key) -> None:
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

    def open(self, key: Key, start: int, header: bool = False) -> Item:
        item = Item(key, start, math.inf, header)
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
