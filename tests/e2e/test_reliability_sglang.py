"""kill -9 of the daemon, again and again, while it supervises the real SGLang 0.5.9 on the CPU.

The test states what it breaks and what must survive. Every process an attempt started
must be gone at the end, and the autouse decoy (a process titled like SGLang that the
daemon did not start) is never signalled.
"""

from __future__ import annotations

import contextlib
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

from exporter.history import History
from exporter.identity import ProcessIdentity, identify
from tests.conftest import live_in_sessions, wait
from tests.e2e.conftest import write_config

KILLS = 20
WHILE_SERVING = 5  # of the KILLS, at least the last ones come while the server serves
MILESTONES = (  # SGLang 0.5.9's log lines, in order: the phase a kill lands in
    ("loading", "Load weight begin."),
    ("pools", "KV Cache is allocated."),
    ("serving", "The server is fired up and ready to roll!"),
)
REPO = Path(__file__).resolve().parents[2]


def phase_of(log: Path | None) -> str:
    """How far SGLang's log got: before loading, loading, pools or serving."""
    try:
        text = log.read_text(errors="replace") if log else ""
    except OSError:
        text = ""
    reached = "before loading"
    for phase, line in MILESTONES:
        if line in text:
            reached = phase
    return reached


def launchers_on(port: int, since: float) -> list[psutil.Process]:
    """SGLang launchers for this test's port, started by this test (recorded or not)."""
    needle = ["-m", "sglang.launch_server"]
    found = []
    for proc in psutil.process_iter(["cmdline", "create_time", "status"]):
        cmdline = proc.info["cmdline"] or []
        if (
            proc.info["create_time"] >= since
            and proc.info["status"] != psutil.STATUS_ZOMBIE
            and any(cmdline[i : i + 2] == needle for i in range(len(cmdline)))
            and "--port" in cmdline
            and cmdline[cmdline.index("--port") + 1 :][:1] == [str(port)]
        ):
            found.append(proc)
    return found


def test_daemon_kill_9_at_20_points_of_one_attempts_life(tmp_path, runtime, models):
    """Breaks: kill -9 of `sglang-sentinel run`, 20 times, at random points of one SGLang
    attempt's life, restarting the daemon each time: at random delays before loading, at
    the moment the log shows weights loading or the KV pool allocated (on the tiny model the
    two are a fraction of a second apart: one kill lands at whichever is seen first), at the
    moment it prints the ready line (before the daemon can have confirmed /health), and at
    least 5 times while it serves. Must survive: after every kill the history reads back (at
    most a cut last line counted) with unique, increasing attempt ids; at no moment do two
    attempts' launchers live, and no SGLang on the port is unknown to the history: each
    restarted daemon adopts the running server (checked once starting, once serving) or
    cleanly replaces it; the last daemon serves the adopted server; SIGTERM then exits 0
    and leaves no process of any attempt (identities from the history); the decoy is never
    signalled; and the attempt that served is recorded as having served (a ready record)."""
    since = time.time() - 1
    config = write_config(tmp_path, runtime, models["tiny"], policy={"max_attempts": 10})
    port = int(config.profile_args(0)["port"])
    metrics_url = f"http://{config.metrics.address}/metrics"
    history = History(config.paths.state_dir)
    command = [sys.executable, "-m", "exporter.cli", "run", "--config", str(config.source)]
    rng = random.Random(20_261_129)
    daemons: list[subprocess.Popen] = []
    kills: list[tuple[int, str, int]] = []  # (kill number, SGLang's phase then, attempts)

    def start() -> subprocess.Popen:
        with open(tmp_path / f"daemon-{len(daemons):02d}.stderr", "wb") as stderr:
            daemon = subprocess.Popen(
                command, cwd=REPO, stderr=stderr, stdout=subprocess.DEVNULL,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        daemons.append(daemon)
        return daemon

    def said() -> str:
        last = sorted(tmp_path.glob("daemon-*.stderr"))[-1]
        return f"{last.name}:\n" + last.read_text(errors="replace")[-3000:]

    def leaders() -> set[ProcessIdentity]:
        return {ProcessIdentity.from_json(p) for a in history.read().attempts for p in a.processes}

    def current_log() -> Path | None:
        records = history.read().attempts
        return Path(records[-1].log) if records and records[-1].log else None

    def daemon_state() -> str | None:
        try:
            text = httpx.get(metrics_url, timeout=10, trust_env=False).text
        except httpx.HTTPError:
            return None
        for state in ("starting", "ready", "unhealthy", "backoff", "stopping", "gave_up"):
            if f'sglang_sentinel_server_state{{state="{state}"}} 1.0' in text:
                return state
        return None

    def check_after_kill(number: int) -> None:
        read = history.read()
        context = f"after kill {number}: {read.warnings}"
        assert read.corrupt_lines <= 1, context
        ids = [a.attempt for a in read.attempts]
        assert ids == sorted(set(ids)), context
        live = [
            a
            for a in read.attempts
            if any(ProcessIdentity.from_json(p).alive() for p in a.processes)
        ]
        assert len(live) <= 1, f"two attempts' launchers alive {context}"
        if live:
            assert live[0] is read.attempts[-1], f"an older attempt still runs {context}"
        assert all(a.ended for a in read.attempts[:-1]), f"an attempt never concluded {context}"
        known = {leader.pid for leader in leaders()}
        strays = [p.pid for p in launchers_on(port, since) if p.pid not in known]
        assert not strays, f"SGLang launchers the history does not know: {strays} {context}"

    daemon = start()
    try:
        wait(lambda: history.read().attempts, 300, "the first launch (after SGLang's --help)")
        milestones_hit: set[str] = set()
        for number in range(1, KILLS + 1):
            if number > KILLS - WHILE_SERVING and "serving" not in milestones_hit:
                delay = 300.0  # no more kills before serving: wait for the ready line
            else:
                delay = rng.uniform(0.3, 3.0)
            deadline = time.monotonic() + delay
            # A random point, or the moment the log shows a new phase: at the ready line
            # the daemon cannot have confirmed /health yet (a one-token generation).
            while time.monotonic() < deadline:
                phase = phase_of(current_log())
                if phase not in milestones_hit and phase != "before loading":
                    milestones_hit.add(phase)
                    break
                time.sleep(0.02)
            phase = phase_of(current_log())
            daemon.kill()
            daemon.wait(timeout=30)
            kills.append((number, phase, len(history.read().attempts)))
            check_after_kill(number)
            daemon = start()
            if number in (1, KILLS - 2):
                # Let this one finish resuming: it must adopt, not launch a second server.
                before = len(history.read().attempts)
                wait(
                    lambda: daemon_state() in ("starting", "ready"),
                    120,
                    f"resume after kill {number}",
                )
                assert len(history.read().attempts) == before, (
                    f"launched instead of adopting: {kills}"
                )

        wait(lambda: daemon_state() == "ready", 180, "the last daemon serving the adopted server")
        check_after_kill(KILLS)
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=180) == 0, said()
        everyone = leaders()
        left = live_in_sessions(everyone)
        assert not left, f"processes of attempts left: {[p.pid for p in left]}"
        assert not launchers_on(port, since), "an SGLang launcher for this test is left"
        records = history.read().attempts
        assert records and all(a.ended for a in records), records
        assert records[-1].stopped_by == "daemon"
        phases = {phase for _, phase, _ in kills}
        assert {"before loading", "serving"} <= phases, kills
        print(f"kills (number, SGLang's phase, attempts): {kills}; launches: {len(records)}")
        served = [a for a in records if a.ready_at is not None]
        assert served, f"no attempt is recorded as served, though one did: {records} {kills}"
    finally:
        for running in daemons:
            if running.poll() is None:
                running.kill()
                running.wait(timeout=30)
        # What a failure left behind: processes of this test's attempts only.
        strays = {i for p in launchers_on(port, since) if (i := identify(p.pid))}
        for proc in live_in_sessions(leaders() | strays):
            with contextlib.suppress(psutil.Error):
                proc.kill()
