"""Traceback frames as the classifier needs them: which code raised, and from which package.

Frames reach us in the shapes pasted logs take: indented or not, hard-wrapped so that
``File "...memory_pool.py",`` and ``line 499, in _init_mamba_pool`` sit on two lines, or as
IPython prints them in a notebook (``File /x/memory_pool.py:499, in _init_mamba_pool(self)``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from exporter.logs.lines import LogLine
from exporter.logs.tracebacks import DIRECT_CAUSE, EXCEPTION_LINE, HANDLED, TRACEBACK_START

# Python's frame, or IPython's ("File /x.py:12, in f(a)")
_FRAME = re.compile(
    r'^File "(?P<path>[^"]+)", line \d+,? in (?P<func>\S+)'
    r"|^File (?P<ipath>[^\s\"]+\.py):\d+, in (?P<ifunc>[\w.<>]+)"
)
_FRAME_HEAD = re.compile(r'^File "(?P<path>[^"]+)",?$')  # the path, wrapped before "line N"
_FRAME_TAIL = re.compile(r"^line \d+,? in (?P<func>\S+)")
_CHAIN_OR_START = (HANDLED, DIRECT_CAUSE)
LOOKBACK = 400  # lines searched above an exception for its frames
# Frames that only pass a call along: the code that raised is further out.
_PASS_THROUGH = (
    "torch/nn/modules/module.py",
    "torch/utils/_contextlib.py",
    "torch/_dynamo",
    "torch/fx/",
    "functools.py",
    "contextlib.py",
    "threading.py",
    "concurrent/futures",
    "asyncio/",
    "<eval_with_key>",
    "<string>",
)


@dataclass(frozen=True, slots=True)
class Frame:
    path: str
    func: str
    position: int  # index of the frame's first line in the time-ordered lines

    @property
    def text(self) -> str:
        return f"{self.path}:{self.func}"

    @property
    def passes_through(self) -> bool:
        return any(fragment in self.path for fragment in _PASS_THROUGH)


def frame_at(ordered: Sequence[LogLine], position: int) -> Frame | None:
    """The frame that starts at ``position``, whole or hard-wrapped over two lines."""
    message = ordered[position].message
    if not message.startswith("File "):
        return None
    match = _FRAME.match(message)
    if match:
        path, func = (
            match.group("path", "func") if match.group("path") else match.group("ipath", "ifunc")
        )
        return Frame(path, func, position)
    head = _FRAME_HEAD.match(message)
    if head and position + 1 < len(ordered):
        tail = _FRAME_TAIL.match(ordered[position + 1].message)
        if tail:
            return Frame(head.group("path"), tail.group("func"), position)
    return None


def is_frame_text(ordered: Sequence[LogLine], position: int) -> bool:
    """The line is part of a frame header (a ``File`` line or its wrapped ``line N`` half)."""
    if frame_at(ordered, position) is not None:
        return True
    return (
        position > 0
        and _FRAME_TAIL.match(ordered[position].message) is not None
        and frame_at(ordered, position - 1) is not None
    )


def frames_before(ordered: Sequence[LogLine], position: int) -> list[Frame]:
    """The frames of the traceback that ends at ``position``, innermost last."""
    frames: list[Frame] = []
    for i in range(position - 1, max(-1, position - LOOKBACK - 1), -1):
        message = ordered[i].message
        if message.endswith(TRACEBACK_START) or message.startswith(_CHAIN_OR_START):
            break
        frame = frame_at(ordered, i)
        if frame is not None:
            frames.append(frame)
    frames.reverse()
    return frames


def chained_frames(ordered: Sequence[LogLine], position: int) -> list[Frame]:
    """The frames of the tracebacks chained after the exception at ``position`` ("During
    handling of the above exception ...", "The above exception was the direct cause ..."),
    outermost chain first: the code the failure went on through (a download's, a loader's)."""
    frames: list[Frame] = []
    i = position + 1
    while i < len(ordered) and i - position <= LOOKBACK:
        message = ordered[i].message
        if not message:
            i += 1
            continue
        if not message.startswith((HANDLED, DIRECT_CAUSE)):
            break
        end = next(
            (
                j
                for j in range(i + 1, min(len(ordered), i + LOOKBACK))
                if EXCEPTION_LINE.match(ordered[j].message)
            ),
            None,
        )
        if end is None:
            break
        frames += frames_before(ordered, end)
        i = end + 1
    return frames


def raising_frame(frames: Sequence[Frame]) -> Frame | None:
    """The innermost frame that does more than pass the call along."""
    for frame in reversed(frames):
        if not frame.passes_through:
            return frame
    return frames[-1] if frames else None


def source_line(ordered: Sequence[LogLine], frame: Frame) -> int | None:
    """The position of the code line printed under a frame, when the paste kept it."""
    following = frame.position + 1
    if following < len(ordered) and _FRAME_TAIL.match(ordered[following].message):
        following += 1
    if following < len(ordered) and frame_at(ordered, following) is None:
        message = ordered[following].message
        if message and not message.startswith(("Traceback", "[")) and ":" not in message[:1]:
            # "assert (" opens a statement spread over lines: its condition says what failed
            opened = message.endswith("(") and following + 1 < len(ordered)
            if opened and frame_at(ordered, following + 1) is None:
                return following + 1
            return following
    return None
