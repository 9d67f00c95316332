"""What a report puts around the log it pastes, which is not the log.

Operators paste logs into issues, forums and chats: under a title and the reporter's own
words (which quote the error), between code fences, above an environment section, with what
they typed after the server stopped. The classifier reads the server's lines only; these
tell the others apart.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from exporter.diagnosis.frames import is_frame_text
from exporter.diagnosis.vocabulary import says_failed
from exporter.logs.lines import LogLine
from exporter.logs.literals import KILLED_TRANSLATED_WORDS
from exporter.logs.tracebacks import EXCEPTION_LINE, PY_WARNING

# "(truncated)", "...", "EDIT: ...", "PS: ...": added by whoever pasted
_COMMENTARY = re.compile(r"^\(.*\)$|^\.\.\.$|^(?:EDIT|Edit|UPDATE|Update|PS|P\.S\.)(?: \d+)?: ")
# A thread's answer below the paste ("Reply: ...", "**Answer (accepted):** ..."): it explains
# what happened, it observed nothing
_ANSWER = re.compile(r"(?:\*\*)?(?:Reply|Answer|Top (?:comment|answer))(?: \([\w ]+\))?:")
# What an operator typed after the server's last line: a Ctrl-C's echo, a shell prompt
# (bare or with a command; "(venv) user@host:~$", "[root@host ~]#").
_OPERATOR = re.compile(
    r"(?:\(\S+\) )?(?:\^C$|\$(?: |$)|[\w.-]+@[\w.-]+:\S*[$#](?: |$)"
    r"|\[[\w.-]+@[\w.-]+ [^\]]*\][$#](?: |$))"
)
_SHELLS_OWN = ("timed out waiting for input: auto-logout",)  # bash's TMOUT, after a prompt
# Words in Chinese, Japanese or Korean: the reporter's (the software writes English), but
# for a shell's "Killed" in the operator's language.
_SHELL_KILLED = re.compile(rf"(?:^|\s)(?:{KILLED_TRANSLATED_WORDS})(?:\s|$)")
_CJK_WORDS = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]{2}")
# An issue's title: "[Bug] ...", "【求助】...", "[질문] ...", "Title: ..."
_REPORT_TITLE = re.compile(
    r"(?:\[(?:Bug|BUG|Feature|Question|Usage|Help|RFC|Docs?)\]|【[^】]*】|\[[^\]\x00-\x7f]+\]"
    r"|Title: )"
)
# Prose that quotes the error in the reporter's own sentence ('SGLang crashes with
# "device-side assert triggered" when I send input_ids'), or a thread's title after where it
# was posted ('Level1Techs forum · "SGLang randomly crashes with ..."'): words, a quoted
# phrase, words or none.
_QUOTING_SENTENCE = re.compile(
    r'[A-Z][\w.-]*(?: [\w.,:\'/\u00b7\u2013\u2014-]+){1,10} ["\u201c][^"\u201d]*\s[^"\u201d]*'
    r"[\"\u201d](?: [\w.,'/?-]+)*[.?!]?$"
)
_QUESTION_MARKS = ("?", "\uff1f")  # and the full-width one of Chinese and Japanese prose
_MARKDOWN_TITLE = re.compile(r"\*\*.+\*\*$|#{1,6} \S")
# The section where an issue template asks for `python3 -m sglang.check_env`'s output.
# A heading, not an annotation ("# env from our helm values: NCCL_SOCKET_IFNAME=eth0").
_ENVIRONMENT_HEADING = re.compile(r"(?i)#{1,6} [^:=]*(?:environment|\benv\b|环境)[^:=]*$")
_FENCE = ("```", "~~~")
# A line of prose: this many words at least, this share of them plain words (letters, with
# the punctuation of a sentence around them), a sentence's end somewhere.
_PROSE_WORDS = 10
_PROSE_SHARE = 0.8
_PLAIN_WORD = re.compile(r"[(\"'`]*[A-Za-z][a-z']*[)\"'`.,;:!?]*|-|&")
# (after a program's name too, as argparse and compilers print theirs: "launch_server.py: error:")
_RECORD_OPENING = re.compile(
    r"(?i)(?:[\w.-]+(?: [\w-]+)?: )?(?:error|fatal|failed|exception|warning|critical|info|debug)\b"
)
_SENTENCE_END = re.compile(r"[.:!?](?:\s|$)")
# What a paste puts around a log: a code fence, the HTML of a collapsed block, a rule
# (Markdown's, or IPython's above a traceback).
_PASTE_FURNITURE = re.compile(
    r"^(?:```|~~~|</?(?:details|summary|pre|code)\b|(?:-{3,}|={3,}|_{3,})$"
    # ... or ssh's word that the remote command the log came through ended
    r"|(?:Shared c|C)onnection to \S+ closed\.$)"
)


def reporters_words(line: LogLine) -> bool:
    """A line of the report around a pasted log, not of the log: a markdown title or heading,
    an issue's title, a question ("... is AWQ not supported with torch compile?"), prose in
    Chinese, Japanese or Korean. It may quote the error; the log's own line with it is the
    evidence."""
    message = line.message
    if _MARKDOWN_TITLE.match(message) or _REPORT_TITLE.match(message):
        return True
    if line.has_sglang_prefix or EXCEPTION_LINE.match(message):
        return False
    return (
        message.endswith(_QUESTION_MARKS)
        or (line.timestamp is None and _QUOTING_SENTENCE.match(message) is not None)
        or (
            not message.isascii()
            and _CJK_WORDS.search(message) is not None
            and _SHELL_KILLED.search(message) is None
        )
    )


def pasted_around(line: LogLine) -> bool:
    """A line the paste added around the log: blank, a fence, the reporter's words."""
    message = line.message
    return (
        not message
        or _PASTE_FURNITURE.match(message) is not None
        or _COMMENTARY.match(message) is not None
        or reporters_words(line)
    )


def answers_the_report(line: LogLine) -> bool:
    """A reply to the report, pasted below it: its words are an explanation, not a record."""
    return _ANSWER.match(line.message or line.raw) is not None


def typed_by_operator(line: LogLine) -> bool:
    """A shell prompt and the command typed at it (``$ docker inspect ... {{.State.OOMKilled}}``):
    the operator's words, whatever they name; not what the shell itself printed after its
    prompt (its idle limit's auto-logout)."""
    message = line.message
    return _OPERATOR.match(message) is not None and not message.endswith(_SHELLS_OWN)


def after_the_log(line: LogLine) -> bool:
    """A line from which on what follows is not the server's: a ^C or a shell prompt (the
    operator's), a Markdown heading (the report's next section: its environment, ...)."""
    return typed_by_operator(line) or _MARKDOWN_TITLE.match(line.message) is not None


def the_reports_own(lines: Sequence[LogLine]) -> set[int]:
    """The numbers of the lines a report wrote around its log: its prose outside the code
    fences, when the fences hold the log (the server's records, or a failure, inside them), and its
    environment section (versions, ``CUDA available: False``, torch's warnings)."""
    own: set[int] = set()
    inside = False
    fenced_log = False
    outside: list[int] = []  # positions; whether each reads as the server's is asked at the end
    environment = False
    for i, line in enumerate(lines):
        message = line.message
        if message.startswith(_FENCE):
            inside = not inside
            continue
        if _MARKDOWN_TITLE.match(message):
            environment = _ENVIRONMENT_HEADING.match(message) is not None
        if environment:
            own.add(line.number)
        elif inside:
            fenced_log = fenced_log or line.has_sglang_prefix or says_failed(message)
        else:
            outside.append(i)
    if fenced_log:  # most logs hold no fence: their lines are never asked
        own.update(lines[i].number for i in outside if not _reads_as_log(lines, i))
    return own | _prose_above_the_log(lines)


def _prose_above_the_log(lines: Sequence[LogLine]) -> set[int]:
    """The numbers of the reporter's sentences above the log, before its first line that
    reads as the server's ("Just want to confirm this is a normal shutdown - our
    deploy tool flagged ... exit code 137."). A paste with no such line (a chat message with
    the error inline) is all the reporter's words and the error's: none is taken."""
    prose = set()
    for i, line in enumerate(lines):
        if _reads_as_log(lines, i):
            return prose
        if sentences(line.message):
            prose.add(line.number)
    return set()


def sentences(message: str) -> bool:
    """Prose: many words, most of them words of a language, ending as a sentence does, and
    not opening as a program's error record does ("Error starting router: ...") nor a Python
    warning's line."""
    words = message.split()
    plain = sum(1 for word in words if _PLAIN_WORD.fullmatch(word))
    return (
        len(words) >= _PROSE_WORDS
        and _RECORD_OPENING.match(message) is None
        and PY_WARNING.search(message) is None  # a library's warning says sentences too
        and plain >= _PROSE_SHARE * len(words)
        and _SENTENCE_END.search(message) is not None
    )


def _reads_as_log(lines: Sequence[LogLine], position: int) -> bool:
    """A line outside the fences that is still the server's: a record with SGLang's prefix,
    a traceback's frame or exception."""
    line = lines[position]
    return (
        line.has_sglang_prefix
        or EXCEPTION_LINE.match(line.message) is not None
        or is_frame_text(lines, position)
    )
