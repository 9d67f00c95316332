"""What SGLang is (exporter/sglang/): versions and their detection, the command line and
where the server listens, the flags --help lists, and the roles of its processes."""

from __future__ import annotations

import argparse
import asyncio
import socket

import pytest

from exporter.diagnosis.planner.versions import SIZERS
from exporter.logs.grammar import GRAMMARS
from exporter.logs.reader import read_log
from exporter.sglang.flags import (
    FLAG_NAMES,
    FlagError,
    abbreviated,
    normalize_flags,
    parse_flags,
    render_flags,
    server_address,
    server_url,
)
from exporter.sglang.help import help_flags, unknown_flags
from exporter.sglang.roles import ROLES, role_of
from exporter.sglang.versions import DEFAULT_VERSION, VERSIONS, detect_version
from exporter.supervisor.processes import port_free
from tests.conftest import GOLDEN

# --- versions -------------------------------------------------------------------------


def test_every_known_version_has_a_grammar_table_and_a_planner_sizer():
    assert set(GRAMMARS) == set(VERSIONS)
    assert set(SIZERS) == set(VERSIONS)
    assert DEFAULT_VERSION in VERSIONS


def test_every_flag_a_sizer_reads_is_resolved_by_normalize_flags():
    for sizer in SIZERS.values():
        for name in sizer.flag_names:
            assert FLAG_NAMES.get(name) == name, (sizer.version, name)


def test_a_stated_version_is_detected_from_the_log():
    lines, events = read_log("[2026-01-01 10:00:00] sglang version: 0.5.10.post1\n")
    assert detect_version(lines, events) == "0.5.10.post1"
    lines, events = read_log("Requirement already satisfied: sglang==0.5.9 in /opt\n")
    assert detect_version(lines, events) == "0.5.9"


def test_lines_only_0_5_23_prints_reveal_it_and_a_silent_log_reveals_nothing():
    for log, expected in (
        ("sglang-0.5.23-pool-init-oom.log", "0.5.23"),
        ("sglang-0.5.23-serve-hybrid-tp2.log", "0.5.23"),
        ("sglang-0.5.9-cuda-graph-oom.log", None),
    ):
        lines, events = read_log((GOLDEN / log).read_text())
        assert detect_version(lines, events) == expected, log
    assert detect_version(*read_log("[2026-01-01 10:00:00] Load weight begin.\n")) is None


# --- the command line -----------------------------------------------------------------


def test_flag_rendering_strings_ints_floats_true_false_lists():
    args = {
        "model-path": "/models/with space",
        "port": 30000,
        "mem-fraction-static": 0.85,
        "enable-metrics": True,
        "disable-cuda-graph": False,
        "cuda-graph-bs": [1, 2, 4],
        "mixed": ["a", 1, 0.5],
    }
    assert render_flags(args) == [
        "--model-path", "/models/with space",
        "--port", "30000",
        "--mem-fraction-static", "0.85",
        "--enable-metrics",
        "--cuda-graph-bs", "1", "2", "4",
        "--mixed", "a", "1", "0.5",
    ]  # fmt: skip


def test_a_rendered_command_line_parses_back_to_its_flags():
    args = {"model-path": "/m", "tp-size": "2", "enable-metrics": True, "cuda-graph-bs": ["1", "2"]}
    assert parse_flags(render_flags(args)) == args
    assert parse_flags(["--", "--port=8", "--host", "::1"]) == {"port": "8", "host": "::1"}


def test_a_value_before_any_flag_is_a_clear_error():
    with pytest.raises(FlagError, match=r"'2' follows no --flag"):
        parse_flags(["2", "--tp-size"])


def test_aliases_and_unique_prefixes_resolve_as_argparse_does():
    given = {"--tensor-parallel-size": 2, "speculative-algo": "NEXTN", "max-running": 8}
    assert normalize_flags(given) == {
        "tp-size": 2,
        "speculative-algorithm": "NEXTN",
        "max-running-requests": 8,
    }
    assert normalize_flags({"mem-fraction-static=0.8": 0.8, "enable-foo": True}) == {
        "mem-fraction-static": 0.8,
        "enable-foo": True,  # not a flag the planner reads: kept as given
    }
    assert normalize_flags({"disable-cuda-graph": False, "tp-size": None}) == {}


def test_a_prefix_of_two_aliases_of_one_flag_is_ambiguous_as_in_argparse(capsys):
    # The planner's copy of the prefix rule resolved this prefix to the one flag both
    # aliases name; argparse counts option strings, not flags, and rejects it.
    parser = argparse.ArgumentParser()
    parser.add_argument("--speculative-draft-model-path", "--speculative-draft-model")
    with pytest.raises(SystemExit):
        parser.parse_args(["--speculative-draft", "m"])
    assert "ambiguous option: --speculative-draft" in capsys.readouterr().err
    assert abbreviated("speculative-draft", FLAG_NAMES) is None
    assert normalize_flags({"speculative-draft": "m"}) == {"speculative-draft": "m"}
    assert normalize_flags({"speculative-draft-model": "m"}) == {
        "speculative-draft-model-path": "m"
    }


def test_an_empty_name_abbreviates_nothing():
    assert abbreviated("", {"port"}) is None


# --- where the server listens ---------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "address", "url"),
    [
        ({}, ("127.0.0.1", 30000), "http://127.0.0.1:30000"),
        ({"port": 30001}, ("127.0.0.1", 30001), "http://127.0.0.1:30001"),
        ({"host": "10.1.2.3", "port": 8}, ("10.1.2.3", 8), "http://10.1.2.3:8"),
        ({"host": "0.0.0.0", "port": 30001}, ("127.0.0.1", 30001), "http://127.0.0.1:30001"),
        ({"host": ""}, ("127.0.0.1", 30000), "http://127.0.0.1:30000"),
        ({"host": "::1", "port": 8}, ("::1", 8), "http://[::1]:8"),
        ({"host": "fd00::5"}, ("fd00::5", 30000), "http://[fd00::5]:30000"),
        ({"host": "::", "port": "9"}, ("::1", 9), "http://[::1]:9"),
        ({"host": "[::1]", "port": 8}, ("::1", 8), "http://[::1]:8"),
        ({"host": "node-0.svc"}, ("node-0.svc", 30000), "http://node-0.svc:30000"),
    ],
)
def test_server_address_and_url_from_the_flags(flags, address, url):
    assert server_address(flags) == address
    assert server_url(flags) == url


def test_an_ipv6_listener_takes_no_ipv4_so_the_wildcard_is_reached_at_ipv6_loopback():
    # uvicorn binds through the event loop, which sets IPV6_V6ONLY: a server started with
    # --host :: is not reached at 127.0.0.1 (the probe's old target for ::).
    async def v6only() -> int:
        server = await asyncio.get_running_loop().create_server(asyncio.Protocol, "::1", 0)
        try:
            return server.sockets[0].getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY)
        finally:
            server.close()

    assert asyncio.run(v6only()) == 1
    assert server_address({"host": "::"})[0] == "::1"


def test_the_port_check_reads_a_bracketed_host():
    # The daemon's old copy passed "[::1]" on to getaddrinfo, which raised.
    with socket.socket(socket.AF_INET6) as sock:
        sock.bind(("::1", 0))
        port = sock.getsockname()[1]
    assert port_free(*server_address({"host": "[::1]", "port": port}))


# --- --help ---------------------------------------------------------------------------


def test_help_flags_are_the_long_options_the_text_lists():
    text = (
        "usage: launch_server.py [-h] --model-path MODEL_PATH\n"
        "  --tensor-parallel-size TP_SIZE, --tp-size TP_SIZE\n"
        "                        The tensor parallelism size (see --tp-size).\n"
        "  --enable-metrics      Enable log prometheus metrics.\n"
    )
    assert help_flags(text) == {"model-path", "tensor-parallel-size", "tp-size", "enable-metrics"}


def test_unknown_flags_follow_argparse_prefix_rules():
    known = frozenset(
        {"cuda-graph-max-bs-decode", "cuda-graph-max-bs-prefill", "speculative-algorithm", "port"}
    )
    assert unknown_flags(["port", "speculative-algo"], known) == []  # unique prefix: accepted
    assert unknown_flags(["cuda-graph-max-bs"], known) == [
        "cuda-graph-max-bs"
    ]  # ambiguous in 0.5.23
    assert unknown_flags(["no-such-flag"], known) == ["no-such-flag"]


# --- process roles --------------------------------------------------------------------


def test_roles_come_from_sglang_process_titles():
    assert role_of("python -m sglang.launch_server --tp 2", True) == ("launcher", "")
    assert role_of("sglang::scheduler_TP3 ", False) == ("scheduler", "3")
    assert role_of("sglang::scheduler", False) == ("scheduler", "0")
    assert role_of("sglang::detokenizer", False) == ("detokenizer", "")
    assert role_of("python -c pass sglang::scheduler_TP1", False) == ("other", "")
    assert {role_of(t, False)[0] for t in ("sglang::detokenizer", "x")} <= set(ROLES)
