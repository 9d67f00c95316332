"""Shared paths and helpers for the tests."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import psutil
import pynvml
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.exposition import render
from exporter.identity import ProcessIdentity, identify

# The reliability harness's fixtures (launchers, daemons, supervise), for every test folder.
pytest_plugins = ["tests.harness.reliability"]

TESTS = Path(__file__).resolve().parent
GOLDEN = TESTS / "golden"
DATA = TESTS / "data"
# The labelled corpus lives in shared/, beside the repository (CI lays it there too).
FAKE_NVML_SOURCE = TESTS / "harness" / "fake_nvml" / "fake_nvml.c"
GiB = 1 << 30
CORPUS = Path(os.environ.get("SGLANG_SENTINEL_CORPUS", TESTS.parents[1] / "shared" / "corpus"))


def pytest_addoption(parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite tests/**/*.metrics from what the code renders now (review the diff)",
    )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`./dev test` runs on two pytest-xdist workers with ``--dist loadgroup``: the real
    SGLang's tests (tests/e2e/) all on one, one SGLang at a time as their timings assume,
    the rest spread over both. Grouped by path here: xdist's own ``xdist_group`` mark does
    not reach pytest 9.2's node ids."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SGLangTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "tests/e2e" if nodeid.startswith("tests/e2e/") else nodeid

    return SGLangTogether(config, log)


def wait(predicate, timeout_s: float, what: str, poll_s: float = 0.25):
    """Poll ``predicate`` until it returns something true (returned), or fail naming what
    was awaited."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the kernel's pick), on ``host``."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def exposed_samples(families) -> dict[str, list[tuple[dict, float]]]:
    """Sample name -> [(labels, value)], as a scraper reads the families' exposition."""
    out: dict[str, list[tuple[dict, float]]] = {}
    for family in text_string_to_metric_families(render(families).decode()):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def load_labels(directory: Path) -> list[dict]:
    with open(directory / "labels.jsonl", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


@pytest.fixture(scope="session", autouse=True)
def private_temp_dir() -> Iterator[Path]:
    """The processes the tests start get a temp directory of their own, removed at the end:
    SGLang names its IPC sockets after temp files it never removes, and torch leaves a
    directory behind each time it imports its RPC module, once per SGLang process."""
    directory = Path(tempfile.mkdtemp(prefix="sentinel-tests-"))
    before = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(directory)
    yield directory
    if before is None:
        del os.environ["TMPDIR"]
    else:
        os.environ["TMPDIR"] = before
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def corpus_labels() -> list[dict]:
    if not (CORPUS / "labels.jsonl").exists():
        raise FileNotFoundError(f"the labelled corpus is missing at {CORPUS}")
    return load_labels(CORPUS)


# --- a fake libnvidia-ml.so.1 that the real pynvml code runs against --------------------------


def reset_pynvml() -> None:
    pynvml.nvmlLib = None
    pynvml._nvmlGetFunctionPointer_cache = {}
    pynvml._nvmlLib_refcount = 0


@pytest.fixture(scope="session")
def fake_library(tmp_path_factory) -> Path:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.fail("gcc is needed to build the fake NVML library (apt-get install gcc)")
    out = tmp_path_factory.mktemp("fake_nvml") / "libnvidia-ml.so.1"
    subprocess.run(
        [gcc, "-shared", "-fPIC", "-Wall", "-Werror", "-o", str(out), str(FAKE_NVML_SOURCE)],
        check=True,
    )
    return out


class FakeNvml:
    """The fake library's state file, rewritten atomically on every change."""

    def __init__(self, lib: ctypes.CDLL, path: Path) -> None:
        self.lib = lib
        self.path = path
        self.devices = [
            ("GPU-11111111-2222-3333-4444-555555555555", 141 * GiB, 60 * GiB, 80 * GiB, GiB),
            ("GPU-66666666-7777-8888-9999-000000000000", 141 * GiB, 0, 140 * GiB, GiB),
        ]
        self.name = "NVIDIA H200"
        self.processes: list[tuple[int, int, int | None]] = []  # (device, pid, bytes)
        self.xids: list[tuple[int, int]] = []
        self.fails: list[tuple[str, int, int | None]] = []
        self.delays: list[tuple[str, int]] = []
        self.write()

    def uuid(self, device: int) -> str:
        return self.devices[device][0]

    def write(self) -> None:
        lines = [f"device {u} {t} {used} {f} {r} {self.name}" for u, t, used, f, r in self.devices]
        lines += [
            f"process {dev} {pid} {'unknown' if size is None else size}"
            for dev, pid, size in self.processes
        ]
        lines += [f"xid {dev} {xid}" for dev, xid in self.xids]
        lines += [
            f"fail {fn} {code}" + ("" if dev is None else f" {dev}") for fn, code, dev in self.fails
        ]
        lines += [f"delay {fn} {ms}" for fn, ms in self.delays]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        os.replace(tmp, self.path)  # the library never reads half a file

    def set_processes(self, processes: list[tuple[int, int, int | None]]) -> None:
        self.processes = processes
        self.write()

    def add_xid(self, device: int, xid: int) -> None:
        self.xids.append((device, xid))
        self.write()

    def fail(self, function: str, code: int, device: int | None = None) -> None:
        self.fails.append((function, code, device))
        self.write()

    def delay(self, function: str, ms: int) -> None:
        self.delays.append((function, ms))
        self.write()

    def heal(self) -> None:
        self.fails, self.delays = [], []
        self.write()

    @property
    def init_count(self) -> int:
        return self.lib.fake_nvml_init_count()

    @property
    def refcount(self) -> int:
        return self.lib.fake_nvml_refcount()


@pytest.fixture
def nvml(fake_library: Path, tmp_path: Path, monkeypatch) -> Iterator[FakeNvml]:
    state = tmp_path / "nvml-state"
    monkeypatch.setenv("FAKE_NVML_STATE", str(state))
    lib = ctypes.CDLL(str(fake_library))
    fake = FakeNvml(lib, state)
    reset_pynvml()
    pynvml.nvmlLib = lib  # what pynvml's own loader would set
    yield fake
    assert fake.refcount == 0, "an nvmlInit without its nvmlShutdown"
    reset_pynvml()


def live_in_sessions(leaders: Iterable[ProcessIdentity]) -> list[psutil.Process]:
    """Live (not zombie) processes in the sessions of these launchers, started no earlier
    than their launcher: what an attempt left behind. Starts are the kernel's (clock ticks
    since boot), which a stepped clock does not move."""
    starts = {leader.pid: leader.start_ticks for leader in leaders}
    found = []
    for pid in psutil.pids():
        try:
            sid = os.getsid(pid)
        except OSError:
            continue
        member = identify(pid) if sid in starts else None
        if member is not None and member.start_ticks >= starts[sid] and member.alive():
            with contextlib.suppress(psutil.Error):
                found.append(psutil.Process(pid))
    return found
