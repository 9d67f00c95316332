"""How the daemon ends and what it answers: the termination message within Kubernetes'
limit, the exit codes the README documents, and the probe endpoints' answers."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx

from exporter.attempt.states import ServerState
from exporter.endpoints import DaemonStatus, Heartbeat, healthz, liveness_limit_s, readyz, routes
from exporter.endpoints import status as status_answer
from exporter.exposition import gauge, serve
from exporter.termination import (
    MESSAGE_LIMIT_BYTES,
    ExitCode,
    FailureReport,
    message,
    write_message,
)
from tests.conftest import free_port
from tests.export.test_exposition import context_switches

README = Path(__file__).resolve().parents[2] / "README.md"


def failure(**overrides) -> FailureReport:
    fields = {
        "attempt": 3,
        "profile": "roomy+auto",
        "failure_class": "pool_init_oom",
        "root_cause_line": "RuntimeError: Not enough memory. Please try to increase "
        "--mem-fraction-static. Current value: 0.85",
        "diagnosis": "the KV/state pool could not be sized after the weights loaded",
        "decision": "pool_init_oom: 5 failed attempts in the last 900 s reached the "
        "crash-loop limit (5); giving up",
        "log": "/var/log/sglang-sentinel/attempt-000003.log",
        "at": 1764400000.0,
    }
    return FailureReport(**{**fields, **overrides})


def test_the_message_puts_class_decision_and_root_cause_first():
    text = message(ExitCode.GAVE_UP, failure())
    assert text.splitlines() == [
        "sglang-sentinel: gave up (exit code 3)",
        "class: pool_init_oom",
        "attempt: 3 (profile roomy+auto)",
        "decision: pool_init_oom: 5 failed attempts in the last 900 s reached the crash-loop "
        "limit (5); giving up",
        "root cause: RuntimeError: Not enough memory. Please try to increase "
        "--mem-fraction-static. Current value: 0.85",
        "log: /var/log/sglang-sentinel/attempt-000003.log",
        "diagnosis: the KV/state pool could not be sized after the weights loaded",
    ]


def test_the_message_fits_kubernetes_limit_whatever_the_log_said():
    huge = failure(
        root_cause_line="Ä" * 5000,  # two bytes each: a cut must not split one
        diagnosis="ж" * 9000,
        decision="x" * 3000,
    )
    text = message(ExitCode.GROUP_MEMBER_FAILED, huge)
    data = text.encode("utf-8")
    assert len(data) <= MESSAGE_LIMIT_BYTES
    data.decode("utf-8")  # whole characters only
    assert text.startswith("sglang-sentinel: group member failed (exit code 4)\nclass: ")
    root = next(line for line in text.splitlines() if line.startswith("root cause: "))
    assert root.endswith(" [...]") and len(root.encode()) <= 1024 + len("root cause: ")
    assert "diagnosis: жж" in text and text.endswith(" [...]\n")


def test_a_root_cause_spread_over_lines_stays_one_line():
    text = message(ExitCode.GAVE_UP, failure(root_cause_line="a\nb\r\nc"))
    assert "root cause: a b c\n" in text


def test_an_internal_error_says_why_without_a_failure(tmp_path):
    text = message(ExitCode.ERROR, None, "cannot serve metrics on 127.0.0.1:9464: in use")
    assert text == (
        "sglang-sentinel: internal error (exit code 1)\n"
        "reason: cannot serve metrics on 127.0.0.1:9464: in use\n"
    )
    target = tmp_path / "termination-log"
    target.write_text("an older message, much longer than the new one\n" * 10)
    assert write_message(target, text) and target.read_text() == text
    assert not write_message(tmp_path / "missing" / "dir" / "log", text)
    assert not write_message(None, text)


def test_the_readme_documents_every_exit_code():
    readme = README.read_text()
    section = readme[readme.index("### Termination message and exit codes") :]
    section = section[: section.index("\n## ")] if "\n## " in section else section
    documented = {int(code) for code in re.findall(r"^\| `(\d+)` \|", section, re.MULTILINE)}
    assert documented == {int(code) for code in ExitCode}


# --- probe endpoints ---------------------------------------------------------------------------


def view(state: ServerState = ServerState.READY, age: float = 1.0, **overrides) -> DaemonStatus:
    fields = {
        "state": state,
        "attempt": 2,
        "profile": "default",
        "nnodes": 1,
        "node_rank": 0,
        "group": "relaunch",
        "decision": None,
        "last_failure": None,
        "loop_age_s": age,
        "loop_limit_s": liveness_limit_s(30.0),
    }
    return DaemonStatus(**{**fields, **overrides})


def test_liveness_is_the_loop_ticking_whatever_sglang_does():
    for state in ServerState:
        assert healthz(view(state)).status == 200
    stalled = healthz(view(age=liveness_limit_s(30.0) + 1))
    assert stalled.status == 503 and b"has not ticked for 121 s" in stalled.body
    assert liveness_limit_s(30.0) == 120.0


def test_readiness_is_serving_only():
    assert readyz(view(ServerState.READY)).status == 200
    for state in set(ServerState) - {ServerState.READY}:
        answer = readyz(view(state))
        assert answer.status == 503 and state.value.encode() in answer.body


def test_status_carries_the_last_failure_and_decision():
    answer = status_answer(
        view(ServerState.BACKOFF, last_failure=failure(), decision="retrying in 2 s")
    )
    document = json.loads(answer.body)
    assert answer.content_type == "application/json"
    assert document["state"] == "backoff" and document["ready"] is False
    assert document["decision"] == "retrying in 2 s"
    assert document["last_failure"]["class"] == "pool_init_oom"
    assert document["last_failure"]["root_cause_line"].startswith("RuntimeError: Not enough")


def test_heartbeat_age_follows_the_clock():
    now = [100.0]
    heartbeat = Heartbeat(lambda: now[0])
    now[0] = 130.0
    assert heartbeat.age_s() == 30.0
    heartbeat.beat()
    assert heartbeat.age_s() == 0.0


def test_probe_routes_are_served_beside_metrics_and_the_server_still_sleeps():
    family = gauge("sglang_sentinel_server_up", "Up.")
    family.add([], 1)
    current = [view(ServerState.STARTING)]
    port = free_port()
    server, thread = serve("127.0.0.1", port, lambda: [family], routes(lambda: current[0]))
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(trust_env=False) as client:
            assert client.get(base + "/healthz").status_code == 200
            assert client.get(base + "/readyz").status_code == 503
            current[0] = view(ServerState.READY)
            ready = client.get(base + "/readyz")
            assert ready.status_code == 200 and ready.headers["cache-control"] == "no-store"
            assert client.get(base + "/status").json()["state"] == "ready"
            assert client.get(base + "/metrics").text.endswith("sglang_sentinel_server_up 1.0\n")
            missing = client.get(base + "/live")
            assert missing.status_code == 404 and b"/healthz" in missing.content
        before = context_switches(thread)
        time.sleep(1.5)
        assert context_switches(thread) == before  # no wake-up while nobody asks
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
