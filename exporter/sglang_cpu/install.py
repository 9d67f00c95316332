"""Install the real SGLang into a private cache, with the NVIDIA userspace library it imports.

SGLang's PyPI build is CUDA-only, but it serves on a CPU (`--device cpu`, `SGLANG_USE_CPU_ENGINE=1`)
once its kernel package can load `libcuda.so.1`. Debian's non-free `libcuda1` provides that library
without a GPU or a kernel driver. Everything lands in the cache, outside the repository and outside
the machine's own Python and apt configuration, so a second call only checks marker files.
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_VERSION = "0.5.9"
DRIVER_PACKAGES = ("libcuda1", "libnvidia-ptxjitcompiler1")
# pip prints hundreds of lines; these are enough to show that the long install is moving.
_PIP_PROGRESS_PREFIXES = ("Collecting ", "Installing collected", "Successfully installed", "ERROR")
_TAIL_LINES = 40
_PROGRESS_WIDTH = 200

Progress = Callable[[str], None]


class SGLangInstallError(RuntimeError):
    """A step of the SGLang installation failed; carries the step and the tail of its output."""

    def __init__(self, step: str, detail: str) -> None:
        super().__init__(f"SGLang setup step '{step}' failed:\n{detail}")
        self.step = step
        self.detail = detail


@dataclass(frozen=True)
class SGLangRuntime:
    """An installed SGLang: its interpreter and the extra environment it needs on a CPU."""

    version: str
    python: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def base_command(self) -> list[str]:
        return [str(self.python), "-m", "sglang.launch_server"]


@dataclass(frozen=True)
class AptSource:
    """One Debian archive entry of the machine's apt sources."""

    uri: str
    suites: tuple[str, ...]
    signed_by: str | None


def default_cache_dir() -> Path:
    """`$SGLANG_SENTINEL_CACHE`, else `${XDG_CACHE_HOME:-~/.cache}/sglang-sentinel`."""
    explicit = os.environ.get("SGLANG_SENTINEL_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "sglang-sentinel"


def ensure_sglang(
    version: str = DEFAULT_VERSION,
    cache_dir: Path | None = None,
    progress: Progress = print,
) -> SGLangRuntime:
    """Install SGLang `version` and the driver library once; later calls only check markers."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    home = cache / f"sglang-{version}"
    # Parallel callers wait for each other per step (one version's long pip install does not
    # hold up another version), then find the markers.
    with _exclusive_lock(cache / ".lock-nvidia-userspace"):
        lib_dir = _ensure_driver_libs(cache, progress)
    with _exclusive_lock(cache / f".lock-sglang-{version}"):
        python = _ensure_venv(home, version, progress)
        runtime = SGLangRuntime(version=version, python=python, env=_runtime_env(lib_dir))
        _ensure_smoke_checked(runtime, home, progress)
    return runtime


def _runtime_env(lib_dir: Path) -> dict[str, str]:
    existing = os.environ.get("LD_LIBRARY_PATH")
    library_path = f"{lib_dir}:{existing}" if existing else str(lib_dir)
    return {"SGLANG_USE_CPU_ENGINE": "1", "LD_LIBRARY_PATH": library_path}


@contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --- the SGLang virtual environment -------------------------------------------------------


def _ensure_venv(home: Path, version: str, progress: Progress) -> Path:
    venv = home / "venv"
    python = venv / "bin" / "python"
    marker = home / "installed.json"
    if marker.exists() and python.exists():
        return python
    # No marker means a previous attempt stopped half way: start over from an empty venv.
    shutil.rmtree(venv, ignore_errors=True)
    home.mkdir(parents=True, exist_ok=True)
    progress(f"creating virtual environment {venv}")
    run_step("create venv", [sys.executable, "-m", "venv", str(venv)])
    progress(f"pip install sglang=={version} into {venv} (takes minutes, about 11 GB)")
    started = time.monotonic()
    run_step(
        "pip install",
        [str(python), "-m", "pip", "install", "--progress-bar", "off", f"sglang=={version}"],
        on_line=_pip_progress(progress),
    )
    seconds = round(time.monotonic() - started, 1)
    progress(f"sglang=={version} installed in {seconds} s")
    marker.write_text(json.dumps({"version": version, "pip_seconds": seconds}) + "\n")
    return python


def _pip_progress(progress: Progress) -> Callable[[str], None]:
    def forward(line: str) -> None:
        if line.startswith(_PIP_PROGRESS_PREFIXES):
            progress(line[:_PROGRESS_WIDTH])

    return forward


def _ensure_smoke_checked(runtime: SGLangRuntime, home: Path, progress: Progress) -> None:
    marker = home / "smoke-checked"
    if marker.exists():
        return
    # Importing SGLang proves the venv and the driver library fit together (about 5 s).
    progress("smoke check: sglang.launch_server --help")
    run_step("smoke check", [*runtime.base_command, "--help"], env={**os.environ, **runtime.env})
    marker.write_text("ok\n")


# --- the NVIDIA userspace driver library --------------------------------------------------


def _ensure_driver_libs(cache: Path, progress: Progress) -> Path:
    root = cache / "nvidia-userspace"
    marker = cache / "nvidia-userspace.complete"
    if marker.exists():
        return _find_lib_dir(root)
    shutil.rmtree(root, ignore_errors=True)
    progress(f"fetching {', '.join(DRIVER_PACKAGES)} from Debian non-free into {root}")
    apt_work = cache / "apt"
    for deb in _apt_download(apt_work, DRIVER_PACKAGES):
        run_step("unpack driver package", ["dpkg", "-x", str(deb), str(root)])
    shutil.rmtree(apt_work)  # the .deb files and package lists are not needed any more
    lib_dir = _find_lib_dir(root)
    marker.write_text(f"{lib_dir}\n")
    return lib_dir


def _find_lib_dir(root: Path) -> Path:
    found = sorted(p.parent for p in root.glob("usr/lib/*/nvidia/current/libcuda.so.1"))
    if not found:
        raise SGLangInstallError("find libcuda.so.1", f"no usr/lib/*/nvidia/current in {root}")
    # Debian's multiarch directory starts with the machine name (x86_64-linux-gnu, aarch64-...).
    native = [d for d in found if d.parts[-3].startswith(platform.machine())]
    return (native or found)[0]


def _apt_download(work: Path, packages: Sequence[str]) -> list[Path]:
    """Download .deb files with a private apt setup; the machine's apt state is never touched."""
    shutil.rmtree(work, ignore_errors=True)
    state, cache, etc, debs = work / "state", work / "cache", work / "etc", work / "debs"
    for directory in (state / "lists/partial", cache / "archives/partial", etc / "parts", debs):
        directory.mkdir(parents=True)
    source = _debian_source()
    (etc / "sources.list").write_text(_non_free_line(source) + "\n")
    options = [
        *("-o", f"Dir::State={state}"),
        *("-o", f"Dir::Cache={cache}"),
        *("-o", f"Dir::Etc::SourceList={etc / 'sources.list'}"),
        *("-o", f"Dir::Etc::SourceParts={etc / 'parts'}"),
        # apt's download user cannot enter a private cache under a home directory.
        *("-o", "APT::Sandbox::User=root"),
    ]
    run_step("apt-get update (private non-free list)", ["apt-get", *options, "update"])
    run_step("apt-get download", ["apt-get", *options, "download", *packages], cwd=debs)
    return sorted(debs.glob("*.deb"))


def _non_free_line(source: AptSource) -> str:
    signed = f"[signed-by={source.signed_by}] " if source.signed_by else ""
    return f"deb {signed}{source.uri} {_os_codename()} non-free"


def _debian_source() -> AptSource:
    codename = _os_codename()
    for source in _machine_sources(Path("/etc/apt")):
        if codename in source.suites:
            return source
    raise SGLangInstallError(
        "find Debian mirror", f"no 'deb' entry for suite {codename!r} in /etc/apt sources"
    )


def _os_codename() -> str:
    text = Path("/etc/os-release").read_text()
    match = re.search(r"^VERSION_CODENAME=\"?([\w-]+)\"?$", text, re.MULTILINE)
    if not match:
        raise SGLangInstallError("find Debian release", "no VERSION_CODENAME in /etc/os-release")
    return match[1]


def _machine_sources(apt_dir: Path) -> Iterator[AptSource]:
    parts = apt_dir / "sources.list.d"
    for path in sorted(parts.glob("*.sources")):
        yield from _parse_deb822(path.read_text())
    for path in [apt_dir / "sources.list", *sorted(parts.glob("*.list"))]:
        if path.exists():
            yield from _parse_one_line(path.read_text())


def _parse_deb822(text: str) -> Iterator[AptSource]:
    for stanza in re.split(r"\n\s*\n", text):
        fields = _deb822_fields(stanza)
        if "deb" not in fields.get("types", "").split() or fields.get("enabled") == "no":
            continue
        # Signed-By may hold an inline key instead of a path; only a path fits a one-line entry.
        signed_by = fields.get("signed-by", "")
        for uri in fields.get("uris", "").split():
            yield AptSource(
                uri=uri,
                suites=tuple(fields.get("suites", "").split()),
                signed_by=signed_by if signed_by.startswith("/") else None,
            )


def _deb822_fields(stanza: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    key = ""
    for line in stanza.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if line[0].isspace() and key:  # a continuation line
            fields[key] += " " + line.strip()
            continue
        key, _, value = line.partition(":")
        key = key.strip().lower()
        fields[key] = value.strip()
    return fields


def _parse_one_line(text: str) -> Iterator[AptSource]:
    pattern = re.compile(r"^deb\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)")
    for line in text.splitlines():
        match = pattern.match(line.strip())
        if not match:
            continue
        options = dict(o.split("=", 1) for o in (match[1] or "").split() if "=" in o)
        yield AptSource(uri=match[2], suites=(match[3],), signed_by=options.get("signed-by"))


# --- running the steps --------------------------------------------------------------------


def run_step(
    step: str,
    command: Sequence[str],
    *,
    on_line: Callable[[str], None] | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> None:
    """Run one install step, streaming its merged output; fail with the output's tail."""
    tail: deque[str] = deque(maxlen=_TAIL_LINES)
    try:
        proc = subprocess.Popen(
            list(command),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env=env,
            cwd=cwd,
        )
    except OSError as exc:
        raise SGLangInstallError(step, f"cannot run {shlex.join(command)}: {exc}") from exc
    with proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip()
            tail.append(line)
            if on_line is not None:
                on_line(line)
    if proc.returncode != 0:
        detail = "\n".join([f"exit status {proc.returncode}: {shlex.join(command)}", *tail])
        raise SGLangInstallError(step, detail)
