"""A config file to a Config: read, decoded, parsed with tomllib, then validated.

Every error names the file, the line and the dotted key, a TOML syntax error too: tomllib
gives its line and column, the scanner (positions.py) the key being read there.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from exporter.config.positions import dotted, scan
from exporter.config.schema import Config, ConfigError
from exporter.config.validate import Validator

_LONG_INTEGER = re.compile(r"[0-9][0-9_]{4300,}")  # beyond what int() reads by default
_SYNTAX_AT = re.compile(r" \(at (?:line (\d+), column (\d+)|end of document)\)$")


def load_config(path: str | Path) -> Config:
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ConfigError(
            str(path), None, None, f"cannot read: {error.strerror or error}"
        ) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise ConfigError(str(path), line, None, "not UTF-8 text") from None
    return parse_config(text, path)


def parse_config(text: str, source: str | Path = "<config>") -> Config:
    """Parse and validate; ``source`` names the file in errors and anchors relative paths.

    A source in angle brackets (the default ``<config>``) is no file: relative paths are then
    relative to the current directory.
    """
    name = str(source)
    origin = None if name.startswith("<") else Path(source)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise _syntax_error(str(error), text, name) from None
    except RecursionError:
        raise ConfigError(name, None, None, "invalid TOML: nested too deeply") from None
    except ValueError as error:  # tomllib lets int() refuse integers of thousands of digits
        digits = _LONG_INTEGER.search(text)
        if not digits:
            raise ConfigError(name, None, None, f"invalid TOML: {error}") from None
        message = "invalid TOML: integer too long (over 4300 digits)"
        raise _error_at(text, name, digits.start(), None, message) from None
    return Validator(name, text).config(data, origin)


def _syntax_error(message: str, text: str, source: str) -> ConfigError:
    """tomllib's ``... (at line N, column M)`` as a ConfigError naming the key being read."""
    match = _SYNTAX_AT.search(message)
    if not match:
        return ConfigError(source, None, None, f"invalid TOML: {message}")
    reason = f"invalid TOML: {message[: match.start()]}"
    if not match[1]:  # at the end of the document
        return _error_at(text, source, len(text), None, reason)
    line, column = int(match[1]), int(match[2])
    offset = sum(len(row) + 1 for row in text.split("\n")[: line - 1]) + column - 1
    return _error_at(text, source, offset, line, f"{reason} (column {column})")


def _error_at(text: str, source: str, offset: int, line: int | None, message: str) -> ConfigError:
    """An error at ``offset`` naming the innermost key read there, else the table being read.

    Without a line (the end of the document), the line is where that key starts.
    """
    items = scan(text)
    inside = [item for item in items if item.start <= offset <= item.end]
    if inside:
        found = max(inside, key=lambda item: item.start)
    else:
        found = max(
            (item for item in items if item.header and item.start <= offset),
            key=lambda item: item.start,
            default=None,
        )
    if line is None:
        start = min(found.start, len(text.rstrip())) if inside else len(text.rstrip())
        line = text.count("\n", 0, start) + 1
    return ConfigError(source, line, found and dotted(found.key), message)
