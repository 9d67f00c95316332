"""The daemon's config: defaults, flag rendering, profiles, paths, and errors that point."""

from __future__ import annotations

import shlex
import subprocess
import sys
import tomllib
from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.config import (
    Config,
    ConfigError,
    MetricsListen,
    Paths,
    Policy,
    load_config,
    parse_config,
)
from tests.conftest import DATA

EXAMPLE = DATA / "example-config.toml"
PATHS = '[paths]\nstate_dir = "/var/lib/s"\nlog_dir = "/var/log/s"\n'


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "exporter.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_defaults_for_everything_but_paths():
    config = parse_config(PATHS)
    assert config.source is None
    assert (config.sglang.python, config.sglang.module) == ("python3", "sglang.launch_server")
    assert config.sglang.version is None and config.sglang.workdir is None
    assert dict(config.sglang.args) == {} and dict(config.sglang.env) == {}
    assert [(p.name, dict(p.set), p.remove) for p in config.profiles] == [("default", {}, ())]
    assert config.policy == Policy()
    assert (config.policy.startup_timeout_s, config.policy.backoff_base_s) == (3600.0, 2.0)
    assert (config.policy.startup_stall_s, config.policy.preflight) == (300.0, "fix")
    assert (config.policy.backoff_cap_s, config.policy.max_attempts) == (300.0, 5)
    assert (config.policy.window_s, config.policy.healthy_reset_s) == (900.0, 300.0)
    assert (config.policy.stop_grace_s, config.policy.health_interval_s) == (30.0, 5.0)
    assert config.policy.max_mem_fraction_static == 0.95 and dict(config.policy.retry) == {}
    assert config.metrics == MetricsListen("127.0.0.1", 9464)
    assert config.command(0) == ["python3", "-m", "sglang.launch_server"]


def test_command_renders_the_toml_values():
    config = parse_config(
        '[sglang]\npython = "/opt/sg/bin/python"\nmodule = "my.launch"\n'
        '[sglang.args]\nmodel-path = "/m"\nport = 30001\nmem-fraction-static = 0.8\n'
        'enable-metrics = true\nlog-requests = false\nsome-list = ["a", "b"]\n' + PATHS
    )
    assert config.command(0) == [
        "/opt/sg/bin/python", "-m", "my.launch",
        "--model-path", "/m", "--port", "30001", "--mem-fraction-static", "0.8",
        "--enable-metrics", "--some-list", "a", "b",
    ]  # fmt: skip


PROFILES = """
[sglang.args]
model-path = "/m"
max-running-requests = 64
enable-metrics = true

[[profiles]]
name = "default"

[[profiles]]
name = "fewer"
set = { max-running-requests = 8 }
remove = ["enable-metrics"]

[[profiles]]
name = "chunked"
set = { chunked-prefill-size = 2048 }
"""


def test_profile_set_overrides_and_remove_drops():
    config = parse_config(PROFILES + PATHS)
    assert config.profile_args(0) == {
        "model-path": "/m",
        "max-running-requests": 64,
        "enable-metrics": True,
    }
    assert config.profile_args(1) == {"model-path": "/m", "max-running-requests": 8}
    assert config.command(1)[3:] == ["--model-path", "/m", "--max-running-requests", "8"]


def test_profiles_patch_the_base_not_each_other():
    config = parse_config(PROFILES + PATHS)
    # profile 2 comes after "fewer" but keeps the base's 64 requests and enable-metrics.
    assert config.profile_args(2) == {
        "model-path": "/m",
        "max-running-requests": 64,
        "enable-metrics": True,
        "chunked-prefill-size": 2048,
    }
    assert [config.profile_index(n) for n in ("default", "fewer", "chunked")] == [0, 1, 2]
    with pytest.raises(KeyError):
        config.profile_index("nope")


def test_profile_args_is_a_copy_the_caller_may_edit():
    config = parse_config("[sglang.args]\nbs = [1, 2]\n" + PATHS)
    args = config.profile_args(0)
    args["bs"].append(3)
    args["new"] = 1
    assert config.profile_args(0) == {"bs": [1, 2]}
    with pytest.raises(TypeError):
        config.sglang.args["x"] = 1  # type: ignore[index]


def test_relative_paths_are_relative_to_the_config_files_directory(tmp_path, monkeypatch):
    directory = tmp_path / "etc"
    directory.mkdir()
    (directory / "sentinel.toml").write_text(
        '[paths]\nstate_dir = "state"\nlog_dir = "/abs/logs"\n', encoding="utf-8"
    )
    monkeypatch.chdir(tmp_path)  # a relative config path, from another directory
    config = load_config(Path("etc/sentinel.toml"))
    assert config.source == Path("etc/sentinel.toml")
    assert config.paths.state_dir == directory / "state"
    assert config.paths.log_dir == Path("/abs/logs")


def test_example_config_loads_with_every_key():
    config = load_config(EXAMPLE)
    assert config.sglang.version == "0.5.9" and config.sglang.workdir
    assert [p.name for p in config.profiles] == ["default", "fewer-requests", "no-cuda-graph"]
    assert config.policy.retry["cuda_error"] is True
    assert "--disable-cuda-graph" in config.command(2) and "--cuda-graph-bs" not in config.command(
        2
    )
    assert "--disable-cuda-graph" not in config.command(0)


def test_ipv6_listen_address():
    config = parse_config('[metrics]\nlisten = "[::1]:9000"\n' + PATHS)
    assert config.metrics == MetricsListen("::1", 9000)
    assert config.metrics.address == "[::1]:9000"


# fmt: off
ERRORS = [
    # (what, text, line, key, words in the message)
    ("syntax error", '[sglang.args]\nport = 30000\nmodel-path = "/m\n', 3, "sglang.args.model-path", "invalid TOML"),
    ("unclosed header", "[policy\nwindow_s = 1\n", 1, "policy", "invalid TOML"),
    ("unknown top-level key", PATHS + "[polcy]\nwindow_s = 1\n", 4, "polcy", "unknown key"),
    ("unknown key in a table", PATHS + "[policy]\nwindow_s = 1\nbackoff_cap = 10\n", 6, "policy.backoff_cap", "unknown key"),
    ("unknown key in a profile", PATHS + '[[profiles]]\nname = "a"\n[[profiles]]\nname = "b"\nsets = {}\n', 8, "profiles[1].sets", "unknown key"),
    ("wrong type", PATHS + '[policy]\nmax_attempts = "5"\n', 5, "policy.max_attempts", "integer"),
    ("wrong type in a flag", PATHS + "[sglang.args]\nx = 1979-05-27\n", 5, "sglang.args.x", "date/time"),
    ("negative duration", PATHS + "[policy]\nbackoff_cap_s = -1.0\n", 5, "policy.backoff_cap_s", "> 0"),
    ("zero max_attempts", PATHS + "[policy]\nmax_attempts = 0\n", 5, "policy.max_attempts", ">= 1"),
    ("unknown pre-flight mode", PATHS + '[policy]\npreflight = "fixit"\n', 5, "policy.preflight", "'fix', 'warn', 'off'"),
    ("pre-flight not a string", PATHS + "[policy]\npreflight = true\n", 5, "policy.preflight", "got True"),
    ("zero stall", PATHS + "[policy]\nstartup_stall_s = 0\n", 5, "policy.startup_stall_s", "> 0"),
    ("fraction above 1", PATHS + "[policy]\nmax_mem_fraction_static = 1.5\n", 5, "policy.max_mem_fraction_static", "(0, 1]"),
    ("bad listen address", PATHS + '[metrics]\nlisten = "localhost"\n', 5, "metrics.listen", "host:port"),
    ("bad listen port", PATHS + '[metrics]\nlisten = "[::1]:70000"\n', 5, "metrics.listen", "1..65535"),
    ("bad sglang port", PATHS + "[sglang.args]\nport = 0\n", 5, "sglang.args.port", "1..65535"),
    ("duplicate profile name", PATHS + '[[profiles]]\nname = "a"\n\n[[profiles]]\n# again\nname = "a"\n', 9, "profiles[1].name", "duplicate"),
    ("duplicate name, inline profiles", 'profiles = [\n  { name = "a" },\n  { name = "a" },\n]\n' + PATHS, 3, "profiles[1].name", "duplicate"),
    ("profile without a name", PATHS + '[[profiles]]\nname = "a"\n[[profiles]]\nset = { x = 1 }\n', 6, "profiles[1].name", "missing"),
    ("removing a flag never set", PATHS + '[[profiles]]\nname = "a"\nremove = [\n  "x",\n]\n', 7, "profiles[0].remove[0]", "not in sglang.args"),
    ("unknown failure class", PATHS + "[policy.retry]\ncuda_error = true\ncuda_eror = true\n", 6, "policy.retry.cuda_eror", "not a failure class"),
    ("env value not a string", PATHS + '[sglang]\nenv = { A = "1", B = 2 }\n', 5, "sglang.env.B", "must be a string"),
    ("missing paths.state_dir", '[metrics]\n\n[paths]\nlog_dir = "/l"\n', 3, "paths.state_dir", "missing"),
    ("unknown group policy", PATHS + '[policy]\ngroup = "restart"\n', 5, "policy.group", '"exit" or "relaunch"'),
    ("unknown give-up policy", PATHS + '[policy]\non_give_up = "stay"\n', 5, "policy.on_give_up", '"wait" or "exit"'),
    ("nnodes not an integer", PATHS + '[sglang.args]\nnnodes = "2"\n', 5, "sglang.args.nnodes", "integer >= 1"),
    ("node-rank of no node", PATHS + "[sglang.args]\nnnodes = 2\nnode-rank = 2\n", 6, "sglang.args.node-rank", "below nnodes (2)"),
    ("termination log not a string", PATHS + "termination_log = 1\n", 4, "paths.termination_log", "must be a string"),
]
# fmt: on


@pytest.mark.parametrize(
    ("text", "line", "key", "words"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS]
)
def test_errors_name_file_line_and_key(tmp_path, text, line, key, words):
    path = tmp_path / "sentinel.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    error = caught.value
    assert (error.path, error.line, error.key) == (str(path), line, key)
    assert words in error.message
    assert str(error) == f"{path}:{line}: {key}: {error.message}"


def test_missing_paths_table_has_no_line():
    with pytest.raises(ConfigError) as caught:
        parse_config("[policy]\n", "c.toml")
    assert str(caught.value) == "c.toml: paths.state_dir: required key is missing"


def test_unreadable_file_names_path_and_os_error(tmp_path):
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as caught:
        load_config(missing)
    assert str(caught.value) == f"{missing}: cannot read: No such file or directory"


def test_non_utf8_file_names_the_line(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'[sglang.env]\nA = "caf\xe9"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert (caught.value.line, caught.value.message) == (2, "not UTF-8 text")


def test_check_config_prints_each_profiles_command():
    done = cli("check-config", str(EXAMPLE))
    assert done.returncode == 0, done.stderr
    config = load_config(EXAMPLE)
    for index, profile in enumerate(config.profiles):
        assert f"{index} {profile.name}" in done.stdout
        assert shlex.join(config.command(index)) in done.stdout
    assert "/var/lib/sglang-sentinel" in done.stdout and "/var/log/sglang-sentinel" in done.stdout
    assert "127.0.0.1:9464" in done.stdout


def test_check_config_masks_secrets(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[sglang.args]\napi-key = "hunter2"\n' + PATHS, encoding="utf-8")
    done = cli("check-config", str(path))
    assert done.returncode == 0 and "hunter2" not in done.stdout and "--api-key" in done.stdout


def test_check_config_failure_exit_1_with_file_line_key(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(PATHS + "[policy]\nwindow_s = -5\n", encoding="utf-8")
    done = cli("check-config", str(path))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == f"{path}:5: policy.window_s: must be > 0, got -5\n"


# Fragments that mutate a valid config into near-misses of every kind.
FRAGMENTS = [
    "[", "]", "[[", "]]", "{", "}", "=", ",", ".", '"', "'", '"""', "'''", "#", "\\", "\n",
    " ", "\t", "\r", "-1", "0", "1e309", "nan", "inf", "true", "1979-05-27", "99999999999",
    "1" * 5000, "[" * 2000,
    "[policy]", "[[profiles]]", "[paths]", "[sglang.args]", "[policy.retry]",
    'name = "a"', "port = 0", 'listen = "[::1]:0"', "retry = {}", "x = 1",
    'state_dir = ""', "max_attempts = 0", "cuda_error = 1", "set = { a = [1, [2]] }",
    'remove = ["nope"]', 'env = { A = 1 }', "profiles = 5", '"quoted key" = 1',
]  # fmt: skip
EXAMPLE_TEXT = EXAMPLE.read_text(encoding="utf-8")


@st.composite
def mutated_configs(draw) -> str:
    text = EXAMPLE_TEXT
    for _ in range(draw(st.integers(1, 4))):
        start = draw(st.integers(0, len(text)))
        end = draw(st.integers(start, min(len(text), start + 40)))
        insert = draw(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=10)))
        text = text[:start] + insert + text[end:]
    return text


def check_loads_or_config_error(text: str) -> None:
    try:
        config = parse_config(text, "fuzz.toml")
    except ConfigError as error:
        assert error.path == "fuzz.toml" and error.message
        assert error.line is None or 1 <= error.line <= text.count("\n") + 1
        assert str(error).startswith("fuzz.toml")
        return
    assert isinstance(config, Config)
    for index in range(len(config.profiles)):
        assert config.command(index)[1] == "-m"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(), mutated_configs()))
def test_any_text_loads_or_raises_config_error(text):
    check_loads_or_config_error(text)


def test_a_multi_node_rank_exits_on_failure_by_default_one_node_relaunches():
    assert parse_config(PATHS).policy.group == "relaunch"
    group = parse_config("[sglang.args]\nnnodes = 2\nnode-rank = 1\n" + PATHS).policy
    assert group.group == "exit"
    chosen = parse_config('[sglang.args]\nnnodes = 2\n[policy]\ngroup = "relaunch"\n' + PATHS)
    assert chosen.policy.group == "relaunch"
    # A group's config template (deploy/container/sglang-sentinel-lws fills it in).
    template = '[sglang.args]\nnnodes = "@LWS_GROUP_SIZE@"\nnode-rank = "@LWS_WORKER_INDEX@"\n'
    assert parse_config(template + PATHS).policy.group == "exit"


def test_termination_log_defaults_to_the_kubernetes_file_where_it_exists(monkeypatch):
    assert parse_config(PATHS).paths.termination_log is None  # no /dev/termination-log here
    assert parse_config(PATHS).policy.on_give_up == "wait"
    monkeypatch.setattr(
        "exporter.config.validate.default_termination_log", lambda: Path("/dev/termination-log")
    )
    on_kubernetes = parse_config(PATHS)
    assert on_kubernetes.paths.termination_log == Path("/dev/termination-log")
    assert on_kubernetes.policy.on_give_up == "exit"  # the message is read once it exits
    off = parse_config(PATHS + 'termination_log = ""\n[policy]\non_give_up = "wait"\n')
    assert off.paths.termination_log is None and off.policy.on_give_up == "wait"


def test_check_config_shows_the_container_settings(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(
        "[sglang.args]\nnnodes = 2\nnode-rank = 1\n" + PATHS + 'termination_log = "t"\n'
    )
    done = cli("check-config", str(path))
    assert done.returncode == 0, done.stderr
    assert f"termination log: {tmp_path / 't'}" in done.stdout
    assert "group:     rank 1 of 2 nodes; on a failure: exit" in done.stdout
    assert "give up:   exit" in done.stdout


def test_example_config_sets_every_policy_and_paths_key():
    example = tomllib.loads(EXAMPLE.read_text())
    assert set(example["policy"]) == {f.name for f in fields(Policy)}
    assert set(example["paths"]) == {f.name for f in fields(Paths)}
    config = load_config(EXAMPLE)
    assert (config.policy.group, config.policy.on_give_up) == ("relaunch", "wait")
    assert config.paths.termination_log == Path("/dev/termination-log")
    assert {"nnodes", "node-rank"} <= set(example["sglang"]["args"])
