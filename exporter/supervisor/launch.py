"""Launching one attempt: its id, the pre-flight of its command, the command, environment
and log path as one value (``LaunchSpec``), the checks that refuse it before it runs, the
spawn (``begin``: refused, or the probes pointed at it and the launcher started). Each step
returns a value; the daemon keeps what it needs of them and writes the history."""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from exporter.attempt.attempt_log import AttemptLog
from exporter.config import Config, SGLangSpec
from exporter.diagnosis.planner import FITS
from exporter.history import History, Record, start_record
from exporter.identity import ProcessIdentity, identify
from exporter.plan_inputs import gather
from exporter.redact import redact_command
from exporter.sglang.flags import FlagValue, server_address, server_url
from exporter.sglang.help import unknown_flags
from exporter.sglang.versions import DEFAULT_VERSION
from exporter.supervisor.attempt import Attempt
from exporter.supervisor.flags import read_known_flags
from exporter.supervisor.ladder import Ladder
from exporter.supervisor.preflight import Preflight, check
from exporter.supervisor.processes import AttemptProcesses, SpawnError, spawn, wait_port_free
from exporter.telemetry.probes import ProbeCollector

log = logging.getLogger("sglang_sentinel.launch")

PORT_WAIT_S = 10.0
ATTEMPT_MARKER = "SGLANG_SENTINEL_ATTEMPT"  # in each launch's environment: "<state_dir>:<id>"


@dataclass(frozen=True)
class LaunchSpec:
    """One launch as it will run and be recorded: pure, built before anything starts."""

    number: int
    profile_index: int
    profile: str  # the profile's name, as the history records it
    args: dict[str, FlagValue]
    command: list[str]
    env: dict[str, str]
    workdir: str | None
    log_path: Path
    patch: dict | None  # the automatic change it carries, so a restarted daemon keeps it
    preflight: dict | None  # what the pre-flight found, as the history records it

    def start_record(self, at: float, processes: Sequence[ProcessIdentity], reason: str) -> Record:
        return start_record(
            self.number,
            at,
            profile=self.profile,
            profile_index=self.profile_index,
            command=redact_command(self.command),
            log=self.log_path,
            processes=[process.to_json() for process in processes],
            reason=reason,
            patch=self.patch,
            preflight=self.preflight,
        )


@dataclass(frozen=True)
class Started:
    leader: ProcessIdentity
    popen: subprocess.Popen
    at: float


@dataclass(frozen=True)
class NotLaunched:
    """A launch that never started (bad flags, missing interpreter, no log directory)."""

    error: str
    at: float


def next_attempt_id(history: History, last_id: int, log_dir: Path) -> int:
    """Never reused: not while the history cannot be written (``last_id``, the ids in
    memory), nor after a start record was cut by kill -9 (the log files already named)."""
    logged = [
        int(path.stem.split("-")[1])
        for path in log_dir.glob("attempt-*.log")
        if path.stem.split("-")[1].isdigit()
    ]
    return max(history.next_attempt_id(), last_id + 1, max(logged, default=0) + 1)


def preflight(config: Config, args: dict[str, FlagValue], history: History) -> Preflight | None:
    """Plan the command about to launch (policy.preflight), None when it is off; in "fix"
    mode a predicted sizing failure carries the planner's cheapest fitting change, which
    the caller makes. Whatever goes wrong here, the launch goes ahead."""
    policy = config.policy
    if policy.preflight == "off":
        return None
    version = config.sglang.version or DEFAULT_VERSION
    try:
        previous = next((a.log for a in reversed(history.read().attempts) if a.log), None)
        env = {**os.environ, **config.sglang.env}
        inputs: object = gather(args, env, previous, version)
    except Exception as error:  # no input problem may block a launch
        inputs = str(error) or type(error).__name__
    return check(policy.preflight, args, inputs, version, policy.max_mem_fraction_static)


def log_preflight(number: int, result: Preflight) -> None:
    say = log.info if result.verdict == FITS else log.warning
    say("attempt %d: %s", number, result.sentence())


def launch_spec(
    ladder: Ladder, number: int, index: int, planned: Preflight | None, planned_at: float | None
) -> LaunchSpec:
    config = ladder.config
    # Unbuffered: SGLang SIGKILLs itself on failure, and buffered stdout would die with it.
    # The marker lets a restarted daemon find a launch it could not record (kill -9).
    env = {
        "PYTHONUNBUFFERED": "1",
        **os.environ,
        **config.sglang.env,
        ATTEMPT_MARKER: f"{config.paths.state_dir}:{number}",
    }
    return LaunchSpec(
        number=number,
        profile_index=index,
        profile=config.profiles[index].name,
        args=ladder.args(index),
        command=ladder.command(index),
        env=env,
        workdir=config.sglang.workdir,
        log_path=config.paths.log_dir / f"attempt-{number:06d}.log",
        patch=ladder.patch_record(index),
        preflight=planned.record(planned_at or 0.0)["preflight"] if planned else None,
    )


def refusal(spec: LaunchSpec, sglang: SGLangSpec, state_dir: Path) -> str | None:
    """Why this launch cannot start, found before it runs: no log directory, or flags this
    SGLang's --help does not list (a launch would fail after seconds)."""
    try:
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return str(error)
    known = read_known_flags(
        [sglang.python, "-m", sglang.module], spec.env, state_dir, sglang.version
    )
    rejected = unknown_flags(spec.args, known) if known else []
    if not rejected:
        return None
    flags = ", ".join(f"--{name}" for name in rejected)
    version = f"SGLang {sglang.version}" if sglang.version else "the installed SGLang"
    return f"{flags}: not a flag of {version} (checked against its --help before launch)"


def begin(
    spec: LaunchSpec, config: Config, probes: ProbeCollector, clock: Callable[[], float]
) -> Started | NotLaunched:
    """The launch refused before it runs (``refusal``), or the probes pointed at its server
    and the launcher started (``start``)."""
    refused = refusal(spec, config.sglang, config.paths.state_dir)
    if refused is not None:
        return NotLaunched(refused, clock())
    probes.target(server_url(spec.args), sglang_metrics=spec.args.get("enable-metrics") is True)
    return start(spec, clock)


def start(spec: LaunchSpec, clock: Callable[[], float]) -> Started | NotLaunched:
    """Wait (bounded) for the port to be free, spawn the launcher in its own session and
    point `current` at its log."""
    host, port = server_address(spec.args)
    if not wait_port_free(host, port, PORT_WAIT_S):
        log.warning("attempt %d: port %s:%d is in use before launch", spec.number, host, port)
    started = clock()
    try:
        popen = spawn(spec.command, env=spec.env, cwd=spec.workdir, log_path=spec.log_path)
    except SpawnError as error:
        return NotLaunched(str(error), started)
    point_current(spec.log_path.parent, spec.log_path)
    leader = identify(popen.pid)
    assert leader is not None  # our child, not yet waited for: /proc keeps even a zombie
    return Started(leader, popen, started)


def attempt(
    spec: LaunchSpec, started: Started, version: str | None, clock: Callable[[], float]
) -> Attempt:
    """The attempt a spawn started, its log not followed yet."""
    return Attempt(
        number=spec.number,
        profile_index=spec.profile_index,
        command=spec.command,
        log_path=spec.log_path,
        started_at=started.at,
        processes=AttemptProcesses(started.leader, started.popen),
        log=AttemptLog(version, clock),
    )


def point_current(log_dir: Path, target: Path) -> None:
    """`current` always names the live attempt's log; replaced atomically."""
    link = log_dir / "current"
    temporary = log_dir / f".current-{os.getpid()}"
    try:
        temporary.unlink(missing_ok=True)
        temporary.symlink_to(target.name)
        temporary.replace(link)
    except OSError as error:
        log.warning("cannot update %s: %s", link, error)
