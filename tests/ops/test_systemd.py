"""The systemd unit and its companions, checked by systemd's own tools.

``systemd-analyze verify`` works without systemd running, but exits 0 on unknown keys and
bad values (it only prints them), so every check here fails on ANY output. It exits 1 when
ExecStart's program is missing, and /usr/local/bin/sglang-sentinel (the installed path the
unit documents) does not exist in a test environment: the verified copy points ExecStart
at this environment's own ``sglang-sentinel`` console script, the very program the unit
runs, rather than at /bin/true, so the check also proves the entry point is an absolute,
executable file. Nothing here starts systemd: booting it against this machine's root
would run its tmpfiles cleanup on everyone's /tmp.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from exporter.config import load_config
from exporter.notify import MAX_WATCHDOG_GAP_S
from tests.harness.daemon_timing import longest_loop_stall_s, longest_stop_s

REPO = Path(__file__).resolve().parents[2]
SYSTEMD = REPO / "systemd"
UNIT = SYSTEMD / "sglang-sentinel.service"
TEMPLATE = SYSTEMD / "sglang-sentinel@.service"
INSTANCE = "demo"  # the instance verified: sglang-sentinel@demo.service
ENV_FILE = SYSTEMD / "sglang-sentinel.env"
CONFIG = SYSTEMD / "config.example.toml"
INSTALLED_EXEC = "/usr/local/bin/sglang-sentinel"
EXEC_ARGS = "run --config /etc/sglang-sentinel/config.toml"
TEMPLATE_EXEC_ARGS = "run --config /etc/sglang-sentinel/%i.toml"

# Measured with systemd 252 (Debian 12): the unit scores 2.3; a unit with no hardening at
# all scores 9.6. What remains is deliberate: network access, GPU device nodes (no
# PrivateDevices/DeviceAllow), writable-executable memory for the JIT compilers, and a
# syscall deny-list rather than an allow-list. Below 3.0: dropping the empty capability
# bounding set (4.5), the syscall filter (3.4) or the namespace restriction (3.0) fails.
# The score moves little for single options (ProtectSystem= alone is 0.1), so the content
# checks below pin the others one by one.
MAX_EXPOSURE = 3.0


def systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        pytest.fail(
            "systemd-analyze is missing: install Debian's systemd package "
            "(apt-get install --no-install-recommends systemd; it boots nothing)"
        )
    return found


def entry_point() -> Path:
    """This environment's ``sglang-sentinel`` console script, absolute."""
    script = Path(sys.executable).parent / "sglang-sentinel"
    if not script.is_file():
        found = shutil.which("sglang-sentinel")
        if found is None:
            pytest.fail("the sglang-sentinel console script is not installed (pip install -e .)")
        script = Path(found)
    assert os.access(script, os.X_OK)
    return script.absolute()


def parse_unit(text: str) -> list[tuple[str, str, str]]:
    """(section, key, value) for every assignment, in order; comments and blanks skipped."""
    entries = []
    section = ""
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", ";")):
            continue
        assert not stripped.endswith("\\"), f"line {number}: keep every setting on one line"
        if stripped.startswith("["):
            section = stripped.strip("[]")
            continue
        key, separator, value = stripped.partition("=")
        assert separator, f"line {number}: not KEY=VALUE: {line!r}"
        entries.append((section, key.strip(), value.strip()))
    return entries


def settings(section: str, unit: Path = UNIT) -> dict[str, str]:
    """The last value of each key in ``section`` (as systemd reads single-valued keys)."""
    return {k: v for s, k, v in parse_unit(unit.read_text()) if s == section}


def seconds(value: str) -> float:
    """A systemd time span: plain seconds, or units such as "1min 30s"."""
    units = {"ms": 0.001, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}
    if re.fullmatch(r"\d+(\.\d+)?", value):
        return float(value)
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]+)", value):
        total += float(number) * units[unit]
    assert total > 0, f"cannot read the time span {value!r}"
    return total


def verifiable_copy(unit: Path, exec_args: str, directory: Path) -> Path:
    """A copy of ``unit`` in ``directory`` whose ExecStart runs a program that exists here."""
    text = unit.read_text()
    installed = f"ExecStart={INSTALLED_EXEC} {exec_args}\n"
    assert text.count(installed) == 1
    copy = directory / unit.name
    copy.write_text(text.replace(installed, f"ExecStart={entry_point()} {exec_args}\n"))
    return copy


@pytest.fixture
def verifiable_unit(tmp_path: Path) -> Path:
    return verifiable_copy(UNIT, EXEC_ARGS, tmp_path)


@pytest.fixture
def verifiable_template(tmp_path: Path) -> Path:
    return verifiable_copy(TEMPLATE, TEMPLATE_EXEC_ARGS, tmp_path)


def analyze(
    *args: str, cwd: Path, unit_path: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """systemd-analyze; with ``unit_path``, unit names are also looked up there (first)."""
    env = {**os.environ, "SYSTEMD_LOG_COLOR": "0", "SYSTEMD_PAGER": "", "LC_ALL": "C.UTF-8"}
    if unit_path is not None:
        # The trailing colon keeps systemd's own search path after it (network-online.target).
        env["SYSTEMD_UNIT_PATH"] = f"{unit_path}:"
    return subprocess.run(
        [systemd_analyze(), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=60,
    )


# --- systemd's own checks ---------------------------------------------------------------


def test_verify_prints_nothing(verifiable_unit: Path) -> None:
    result = analyze("verify", "--man=no", verifiable_unit.name, cwd=verifiable_unit.parent)
    assert result.stderr == ""
    assert result.stdout == ""
    assert result.returncode == 0


@pytest.mark.parametrize(
    ("good", "bad"),
    [
        ("Type=notify\n", "Type=notfy\n"),
        ("WatchdogSec=60\n", "WatchdogSec=thirty\n"),
        ("StartLimitBurst=5\n", "StartLimitBursts=5\n"),
        ("KillMode=mixed\n", "KillMode=mixd\n"),
    ],
)
def test_verify_reports_mistakes_only_on_stderr(verifiable_unit: Path, good: str, bad: str) -> None:
    """Why the test above checks the output and not only the exit status."""
    text = verifiable_unit.read_text()
    assert text.count(good) == 1
    verifiable_unit.write_text(text.replace(good, bad))
    result = analyze("verify", "--man=no", verifiable_unit.name, cwd=verifiable_unit.parent)
    assert result.returncode == 0  # systemd-analyze 252 does not fail on these...
    assert bad.split("=")[0] in result.stderr or bad.strip().split("=")[1] in result.stderr


def test_verify_fails_on_the_installed_path_missing_here(tmp_path: Path) -> None:
    if Path(INSTALLED_EXEC).exists():
        pytest.skip(f"{INSTALLED_EXEC} exists on this machine")
    copy = tmp_path / UNIT.name
    shutil.copy(UNIT, copy)
    result = analyze("verify", "--man=no", copy.name, cwd=tmp_path)
    assert result.returncode != 0
    assert INSTALLED_EXEC in result.stderr


def test_security_exposure_is_low(verifiable_unit: Path) -> None:
    result = analyze("security", "--offline=true", verifiable_unit.name, cwd=verifiable_unit.parent)
    assert result.returncode == 0, result.stderr
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
    assert match, result.stdout
    assert float(match.group(1)) < MAX_EXPOSURE, result.stdout


# --- what the unit must say -------------------------------------------------------------------


def test_notify_watchdog_and_restart_policy() -> None:
    service = settings("Service")
    unit = settings("Unit")
    assert service["Type"] == "notify"
    assert service["NotifyAccess"] == "main"
    assert service["ExecStart"] == f"{INSTALLED_EXEC} {EXEC_ARGS}"
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert seconds(service["WatchdogSec"]) > 0
    assert service["Restart"] == "always"
    assert seconds(service["RestartSec"]) > 0
    # The rate limit belongs in [Unit]: systemd ignores it in [Service] since v230.
    assert "StartLimitBurst" not in service
    assert "StartLimitIntervalSec" not in service
    burst, interval = int(unit["StartLimitBurst"]), seconds(unit["StartLimitIntervalSec"])
    assert burst >= 1
    # Otherwise restarts are too slow ever to reach the burst inside the interval.
    assert burst * seconds(service["RestartSec"]) < interval
    assert service["KillMode"] == "mixed"
    assert service["EnvironmentFile"] == "-/etc/default/sglang-sentinel"


def test_timeouts_fit_the_daemon_s_longest_blocking_steps() -> None:
    """The main loop does not ping while it stops SGLang and waits for the port: the
    watchdog must outlast that; the stop timeout must outlast the longest stop."""
    grace = load_config(CONFIG).policy.stop_grace_s
    service = settings("Service")
    margin = 4.0
    # A ping may be up to MAX_WATCHDOG_GAP_S old when the stall starts.
    stall = longest_loop_stall_s(grace)
    assert seconds(service["WatchdogSec"]) - MAX_WATCHDOG_GAP_S >= stall + margin
    assert seconds(service["TimeoutStartSec"]) >= stall + margin
    assert seconds(service["TimeoutStopSec"]) >= longest_stop_s(grace) + margin


def test_gpu_friendly_hardening() -> None:
    entries = parse_unit(UNIT.read_text())
    keys = {key for _, key, _ in entries}
    service = settings("Service")
    # GPUs live in /dev; JIT compilers (triton, inductor, CUDA's PTX JIT) need W+X memory.
    assert "PrivateDevices" not in keys
    assert "MemoryDenyWriteExecute" not in keys
    # ProtectClock= implies DeviceAllow=char-rtc, and any DeviceAllow= turns the default
    # device policy into an allow-list: the GPUs would vanish unless explicitly allowed.
    if keys & {"ProtectClock", "DeviceAllow", "DevicePolicy"}:
        allowed = [v for _, k, v in entries if k == "DeviceAllow"]
        assert any("nvidia" in value for value in allowed), "a device allow-list without GPUs"
    expected = {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "read-only",
        "PrivateTmp": "yes",
        "ProtectKernelTunables": "yes",
        "ProtectKernelModules": "yes",
        "ProtectControlGroups": "yes",
        "RestrictSUIDSGID": "yes",
        "LockPersonality": "yes",
        "RestrictRealtime": "yes",
        "SystemCallArchitectures": "native",
        "CapabilityBoundingSet": "",
    }
    assert {key: service.get(key) for key in expected} == expected
    assert service["User"] == service["Group"] == "sglang-sentinel"
    assert int(service["LimitNOFILE"]) >= 65536
    # The daemon must outlive SGLang under memory pressure.
    assert int(service["OOMScoreAdjust"]) < 0
    assert "Install" in {section for section, _, _ in entries}


# --- the files beside the unit ------------------------------------------------------------------


def test_example_config_uses_the_unit_s_directories() -> None:
    service = settings("Service")
    config = load_config(CONFIG)
    assert config.paths.state_dir == Path("/var/lib") / service["StateDirectory"]
    assert config.paths.log_dir == Path("/var/log") / service["LogsDirectory"]
    assert service["ConfigurationDirectory"] == "sglang-sentinel"
    assert EXEC_ARGS.endswith(f"/etc/{service['ConfigurationDirectory']}/config.toml")
    # Every key the example sets exists in the full reference config.
    reference = tomllib.loads((REPO / "tests" / "data" / "example-config.toml").read_text())
    example = tomllib.loads(CONFIG.read_text())
    for table in ("sglang", "policy", "metrics", "paths"):
        assert set(example[table]) - {"args", "env", "retry"} <= set(reference[table]), table


def test_environment_file_writes_only_where_the_unit_allows() -> None:
    cache = Path("/var/cache") / settings("Service")["CacheDirectory"]
    assignments = {}
    for line in ENV_FILE.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, separator, value = line.partition("=")
        assert separator and re.fullmatch(r"[A-Z_][A-Z0-9_]*", key), line
        assignments[key] = value
    assert assignments, "the example sets nothing"
    for key, value in assignments.items():
        if value.startswith("/"):
            assert Path(value).is_relative_to(cache), f"{key}={value} is read-only to the unit"


# --- the template unit: several servers on one host ------------------------------------------

# The only settings in which sglang-sentinel@.service may differ from sglang-sentinel.service,
# with the template's values: everything else (timeouts, watchdog, hardening, checked above
# on the plain unit) must stay the same.
PER_INSTANCE = {
    ("Unit", "Description"): ["sglang-sentinel: supervised SGLang LLM server %i"],
    ("Service", "ExecStart"): [f"{INSTALLED_EXEC} {TEMPLATE_EXEC_ARGS}"],
    ("Service", "EnvironmentFile"): [
        "-/etc/default/sglang-sentinel",
        "-/etc/default/sglang-sentinel-%i",
    ],
    ("Service", "StateDirectory"): ["sglang-sentinel/%i"],
    ("Service", "LogsDirectory"): ["sglang-sentinel/%i"],
    ("Service", "SyslogIdentifier"): ["sglang-sentinel-%i"],
}


def grouped(unit: Path) -> dict[tuple[str, str], list[str]]:
    """(section, key) -> every value assigned, in order (EnvironmentFile= may repeat)."""
    out: dict[tuple[str, str], list[str]] = {}
    for section, key, value in parse_unit(unit.read_text()):
        out.setdefault((section, key), []).append(value)
    return out


def test_template_instance_verify_prints_nothing(verifiable_template: Path) -> None:
    """Verified as an instance, so %i is expanded as systemd does at start."""
    result = analyze(
        "verify",
        "--man=no",
        f"sglang-sentinel@{INSTANCE}.service",
        cwd=verifiable_template.parent,
        unit_path=verifiable_template.parent,
    )
    assert result.stderr == ""
    assert result.stdout == ""
    assert result.returncode == 0


def test_template_instance_verify_reads_the_template(verifiable_template: Path) -> None:
    """The check above would pass vacuously if the instance did not load the template."""
    text = verifiable_template.read_text()
    verifiable_template.write_text(text.replace("Type=notify\n", "Type=notfy\n"))
    result = analyze(
        "verify",
        "--man=no",
        f"sglang-sentinel@{INSTANCE}.service",
        cwd=verifiable_template.parent,
        unit_path=verifiable_template.parent,
    )
    assert "notfy" in result.stderr


def test_template_instance_security_exposure_is_low(verifiable_template: Path) -> None:
    name = f"sglang-sentinel@{INSTANCE}.service"
    result = analyze(
        "security",
        "--offline=true",
        name,
        cwd=verifiable_template.parent,
        unit_path=verifiable_template.parent,
    )
    assert result.returncode == 0, result.stderr
    match = re.search(rf"Overall exposure level for {re.escape(name)}: (\d+\.\d+)", result.stdout)
    assert match, result.stdout
    assert float(match.group(1)) < MAX_EXPOSURE, result.stdout


def test_template_differs_from_the_unit_only_per_instance() -> None:
    unit, template = grouped(UNIT), grouped(TEMPLATE)
    differing = {key for key in unit.keys() | template.keys() if unit.get(key) != template.get(key)}
    assert differing == set(PER_INSTANCE), "the template drifted from the plain unit"
    assert {key: template[key] for key in PER_INSTANCE} == PER_INSTANCE


def test_template_keeps_instances_apart() -> None:
    """Config, history, logs and journal identifier are per instance; the cache is shared."""
    service = settings("Service", TEMPLATE)
    assert service["ExecStart"].endswith(f"/etc/{service['ConfigurationDirectory']}/%i.toml")
    for key in ("StateDirectory", "LogsDirectory", "SyslogIdentifier"):
        assert "%i" in service[key], key
    assert "%i" not in service["CacheDirectory"]
    assert service["Environment"] == f"HOME=%C/{service['CacheDirectory']}"
