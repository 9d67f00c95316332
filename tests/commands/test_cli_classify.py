"""`sglang-sentinel classify` as an operator runs it: files, stdin, JSON lines, bad paths."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import GOLDEN

INCIDENT = GOLDEN / "sglang-0.5.9-pool-init-oom-incident.log"
REQUIRED = {
    "file",
    "failure_class",
    "root_cause_line",
    "phase",
    "sglang_version",
    "evidence",
    "diagnosis",
    "remedy",
}


def cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "exporter.cli", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_json_one_object_per_input_line_by_line():
    healthy = GOLDEN / "sglang-0.5.9-serve-hybrid-tp2.log"
    done = cli("classify", "--json", str(INCIDENT), str(healthy))
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert [row["file"] for row in rows] == [str(INCIDENT), str(healthy)]
    assert all(row.keys() >= REQUIRED for row in rows)
    assert rows[0]["failure_class"] == "pool_init_oom"
    assert rows[0]["root_cause_line"] == (
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        "Current value: self.server_args.mem_fraction_static=0.85"
    )
    assert rows[0]["phase"] == "startup"
    assert rows[0]["evidence"] and isinstance(rows[0]["evidence"], list)
    assert rows[1]["failure_class"] == "none" and rows[1]["root_cause_line"] is None


def test_stdin_dash():
    done = cli(
        "classify", "--json", "-", stdin=b"launch_server.py: error: unrecognized arguments: --x\n"
    )
    assert done.returncode == 0
    row = json.loads(done.stdout)
    assert (row["file"], row["failure_class"]) == ("-", "invalid_argument")


def test_readable_report_names_class_root_and_remedy():
    done = cli("classify", str(INCIDENT))
    text = done.stdout.decode()
    assert done.returncode == 0
    assert "pool_init_oom" in text and "root cause: RuntimeError: Not enough memory" in text
    assert "remedy:" in text and "(--mem-fraction-static: raise)" in text


def test_unreadable_input_is_reported_and_others_still_classified(tmp_path):
    missing = tmp_path / "nope.log"
    done = cli("classify", "--json", str(missing), str(INCIDENT))
    assert done.returncode == 1
    assert f"cannot read {missing}: No such file or directory" in done.stderr.decode()
    assert json.loads(done.stdout)["failure_class"] == "pool_init_oom"


def test_binary_garbage_is_read_not_fatal(tmp_path):
    junk = tmp_path / "junk.log"
    junk.write_bytes(bytes(range(256)) * 50 + b"\xff\xfe\n")
    done = cli("classify", "--json", str(junk))
    assert done.returncode == 0
    assert json.loads(done.stdout)["failure_class"] in {"none", "other"}


def test_help_lists_subcommands():
    done = cli("--help")
    assert done.returncode == 0 and b"classify" in done.stdout
