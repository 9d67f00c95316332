"""The code before the streaming diagnosis, for side-by-side figures in the same run.

The commit that added ``exporter/logs/excerpt.py`` is the first to classify from an
excerpt; its parent re-read the whole log. That parent's ``exporter/`` is exported into a
temporary folder; a benchmark runs itself in a subprocess with that folder first on
PYTHONPATH (``bench`` still comes from this checkout), so both run on the same files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from io import BytesIO
from pathlib import Path

from bench.common import PYTHON, REPO


def previous_commit() -> str | None:
    added = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%H", "--", "exporter/logs/excerpt.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    return f"{added[-1]}^" if added else None


def export_tree(rev: str, paths: Sequence[str], into: Path) -> str | None:
    """``paths`` as they are at ``rev``, extracted under ``into``; what git said when it
    could not (outside git, an unknown commit)."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", rev, *paths], cwd=REPO, capture_output=True
    )
    if archive.returncode != 0:
        return archive.stderr.decode(errors="replace")[-500:] or "git archive failed"
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return None


def export_previous(into: Path) -> Path | None:
    """``exporter/`` as it was before the excerpt, under ``into``; None outside git."""
    commit = previous_commit()
    if commit is None or export_tree(commit, ["exporter"], into) is not None:
        return None
    return into


def run_module(module: str, args: Sequence[str], code: Path | None, timeout: float) -> dict:
    """``python -m module args`` with ``code`` (an exported tree) or this checkout first on
    the path; the module prints one JSON object as its last line of stdout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (code, REPO) if p is not None)
    done = subprocess.run(
        [PYTHON, "-m", module, *args],
        cwd=tempfile.gettempdir(),  # not the repo: its exporter/ must not shadow ``code``
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{module} {' '.join(args)} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    print(previous_commit(), file=sys.stderr)
