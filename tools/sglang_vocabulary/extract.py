#!/usr/bin/env python3
"""Extract every error message an SGLang release can raise or log under sglang/srt/.

For each version: ``pip download --no-deps sglang==V`` into a cache outside the repo, read the
wheel's ``sglang/srt/**.py`` straight from the zip (nothing is installed or imported), and walk
each module's AST for

- ``raise X(<string>)``: a literal, an f-string, a concatenation or ``.format``/``%`` of one;
- ``assert cond, <string>``: SGLang rejects many flag combinations this way;
- ``logger.error/critical/exception(<string>)`` (any receiver named like a logger).

The formatted parts of a message are rendered as a plausible value where the expression's
own name says what it is (a path, an architecture, a port, a number, a dtype: see VALUES) and
as ``{...}`` otherwise, so no wording is invented that a signature could match by accident.
Identical (module, type, message) rows within a release are kept once. Output, one JSON
object a line, sorted by module and line:

    {"module": "sglang/srt/server_args.py", "line": 1234, "function": "__post_init__",
     "kind": "raise", "type": "ValueError", "code": "raise ValueError(", "message": "..."}

``kind`` is raise, assert or log; ``type`` is the exception's name as a traceback prints it
(``pkg.module.Name`` for a class defined outside builtins) or the log level.

    python tools/sglang_vocabulary/extract.py 0.4.6 0.5.0rc2 0.5.9 0.5.16 0.5.23
"""

from __future__ import annotations

import argparse
import ast
import builtins
import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "sglang_vocabulary"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sglang-sentinel-vocab"
LOG_LEVELS = ("error", "critical", "exception")
# Never build a release from source: a wheel is all we read.
PIP_DOWNLOAD = (
    sys.executable,
    "-m",
    "pip",
    "download",
    "--quiet",
    "--no-deps",
    "--only-binary",
    ":all:",
)
LOGGER_NAME = re.compile(r"(?:^|_)(?:logger|log|logging)$")
PLACEHOLDER = "{...}"
# (regex on the formatted expression's source, value); first match wins.
VALUES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rx), value)
    for rx, value in [
        (
            r"architectures?\b|\barch\b|model_cls|model_class|model[\w.]*\)?\.__name__",
            "Qwen3ForCausalLM",
        ),
        (r"[Ee]rror_?[Ss]tring|strerror", "invalid argument"),
        (r"^int\(result\[0\]\)$|error_code|\berr_code\b|return_code|\bret\b|\brc\b", "1"),
        (r"model_type", "qwen3"),
        (
            r"model_path|model_name|tokenizer_path|\bpath\b|_path\b|_dir\b|\bfile",
            "/models/Qwen3-8B",
        ),
        (r"\bport\b|_port\b", "30000"),
        (r"\bhost\b|_host\b|\baddr", "127.0.0.1"),
        (r"dtype", "torch.bfloat16"),
        (r"\bdevice\b", "cuda"),
        (r"version", "0.0.1"),
        (
            r"size|num_|_num\b|dim|count|\blen\(|_len\b|length|rank|world|heads?\b|tokens?\b"
            r"|\bbs\b|batch|limit|max_|min_|idx|index|layer",
            "64",
        ),
    ]
]


def download(version: str, cache: Path = CACHE) -> Path:
    """The wheel of ``sglang==version`` in the cache, fetched once."""
    wheels = cache / "wheels"
    found = sorted(wheels.glob(f"sglang-{version}-*.whl"))
    if not found:
        wheels.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [*PIP_DOWNLOAD, f"sglang=={version}", "-d", str(wheels)],
            check=True,
        )
        found = sorted(wheels.glob(f"sglang-{version}-*.whl"))
    if not found:
        raise SystemExit(f"pip download sglang=={version} left no wheel in {wheels}")
    return found[0]


def modules(wheel: Path) -> Iterator[tuple[str, str]]:
    """(path inside the wheel, source) of every non-test module under sglang/srt/."""
    with zipfile.ZipFile(wheel) as archive:
        for name in sorted(archive.namelist()):
            parts = name.split("/")
            if not name.startswith("sglang/srt/") or not name.endswith(".py"):
                continue
            if any(p in ("test", "tests") for p in parts) or parts[-1].startswith("test_"):
                continue
            yield name, archive.read(name).decode("utf-8", errors="replace")


def is_text(node: ast.expr) -> bool:
    """Whether an expression builds a message string we can read."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        return is_text(node.left)
    if isinstance(node, ast.IfExp):
        return is_text(node.body) and is_text(node.orelse)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr == "format" and is_text(node.func.value)
    return False


def value_of(node: ast.expr) -> str:
    source = ast.unparse(node)
    return next((value for rx, value in VALUES if rx.search(source)), PLACEHOLDER)


_PERCENT = re.compile(r"%(?:\(\w+\))?[-+ #0]*(?:\d+|\*)?(?:\.\d+)?[diouxXeEfFgGcrsa]")


def percent(template: str, args: list[ast.expr]) -> str:
    values = iter(args)

    def one(match: re.Match[str]) -> str:
        arg = next(values, None)
        return value_of(arg) if arg is not None else PLACEHOLDER

    return _PERCENT.sub(one, template.replace("%%", "\0")).replace("\0", "%")


def render(node: ast.expr) -> str:
    """The text a message expression produces, its dynamic parts filled in."""
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(
            formatted(part) if isinstance(part, ast.FormattedValue) else str(part.value)
            for part in node.values
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return render(node.left) + (render(node.right) if is_text(node.right) else PLACEHOLDER)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        args = list(node.right.elts) if isinstance(node.right, ast.Tuple) else [node.right]
        return percent(render(node.left), args)
    if isinstance(node, ast.IfExp):  # the branch that reads as the failure: the first
        return render(node.body)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):  # "...".format()
        return brace_format(render(node.func.value), node)
    return value_of(node)


def brace_format(template: str, call: ast.Call) -> str:
    """``template.format(...)`` with each field filled from the argument it names."""
    positional = iter(call.args)
    keywords = {k.arg: k.value for k in call.keywords if k.arg}

    def one(match: re.Match[str]) -> str:
        field = re.split(r"[!:.\[]", match.group(1))[0]
        if field.isdigit():
            index = int(field)
            arg = call.args[index] if index < len(call.args) else None
        else:
            arg = keywords.get(field) if field else next(positional, None)
        return value_of(arg) if arg is not None else PLACEHOLDER

    return re.sub(r"\{([^{}]*)\}", one, template)


def formatted(part: ast.FormattedValue) -> str:
    if is_text(part.value):
        return render(part.value)
    return value_of(part.value)


def message_of(call: ast.Call) -> str | None:
    if not call.args or not is_text(call.args[0]):
        return None
    text = render(call.args[0])
    if len(call.args) > 1 and "%" in text:  # logger.error("... %s", value)
        text = percent(text, call.args[1:])
    return text


class Names:
    """How a traceback prints an exception class named in a module: builtins bare, others
    as ``module.Class`` (defined here, or where ``from X import Class`` brought it from)."""

    def __init__(self, tree: ast.Module, dotted: str) -> None:
        package = dotted.rsplit(".", 1)[0]
        self.origin: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                self.origin.setdefault(node.name, dotted)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*up, base] if base else up)
                for alias in node.names:
                    self.origin[alias.asname or alias.name] = base

    def printed(self, func: ast.expr) -> str:
        name = ast.unparse(func)
        if "." in name or hasattr(builtins, name):
            return name
        origin = self.origin.get(name)
        return f"{origin}.{name}" if origin else name


def records(path: str, source: str) -> Iterator[dict]:
    """The error messages of one module, as the rows of <version>.jsonl."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    lines = source.splitlines()
    names = Names(tree, path.removesuffix(".py").replace("/", "."))
    for function, node in statements(tree):
        found = message_site(node, names)
        if found is None:
            continue
        kind, type_name, message = found
        if not message.strip():
            continue
        yield {
            "module": path,
            "line": node.lineno,
            "function": function,
            "kind": kind,
            "type": type_name,
            "code": lines[node.lineno - 1].strip(),
            "message": message,
        }


def statements(tree: ast.Module) -> Iterator[tuple[str, ast.AST]]:
    """Every node with the name of the function it sits in (``<module>`` at top level)."""

    def walk(node: ast.AST, function: str) -> Iterator[tuple[str, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            inner = (
                child.name
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
                else function
            )
            yield inner, child
            yield from walk(child, inner)

    yield from walk(tree, "<module>")


def message_site(node: ast.AST, names: Names) -> tuple[str, str, str] | None:
    """(kind, exception type or log level, message) when the node raises, asserts or logs an
    error with a readable message."""
    if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
        message = message_of(node.exc)
        return None if message is None else ("raise", names.printed(node.exc.func), message)
    if isinstance(node, ast.Assert) and node.msg is not None and is_text(node.msg):
        return "assert", "AssertionError", render(node.msg)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in LOG_LEVELS
        and LOGGER_NAME.search(ast.unparse(node.func.value))
    ):
        message = message_of(node)
        return None if message is None else ("log", node.func.attr, message)
    return None


def extract(wheel: Path) -> list[dict]:
    seen: set[tuple[str, str, str]] = set()
    rows = []
    for path, source in modules(wheel):
        for row in records(path, source):
            key = (row["module"], row["type"], row["message"])
            if key not in seen:
                seen.add(key)
                rows.append(row)
    return sorted(rows, key=lambda r: (r["module"], r["line"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("versions", nargs="+", help="SGLang releases, e.g. 0.4.6 0.5.23")
    parser.add_argument("--out", type=Path, default=DATA, help="where <version>.jsonl goes")
    parser.add_argument("--cache", type=Path, default=CACHE, help="where wheels are kept")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for version in args.versions:
        rows = extract(download(version, args.cache))
        with open(args.out / f"{version}.jsonl", "w") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        print(f"{version}: {len(rows)} messages", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
