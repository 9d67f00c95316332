"""The HTTP probes against a local server that answers as SGLang's endpoints do."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from typing import ClassVar

import pytest

from exporter.telemetry.probes import ProbeCollector


class SGLangLike(http.server.BaseHTTPRequestHandler):
    disable_nagle_algorithm = True  # or every keep-alive request waits 40 ms
    protocol_version = "HTTP/1.1"
    state: ClassVar[dict] = {"health": 200, "generated": 10.0}  # what the server answers

    def do_GET(self) -> None:
        self.state.setdefault("asked", []).append(self.path)
        if self.path == "/health":
            self._send(self.state["health"], b"")
        elif self.path == "/server_info" and self.state.get("server_info", 200) != 200:
            self._send(self.state["server_info"], b"")
        elif self.path == "/server_info":
            self._send(200, json.dumps({"max_total_num_tokens": 4096, "version": "0.5.9"}).encode())
        elif self.path == "/v1/loads" and self.state.get("loads", 200) != 200:
            self._send(self.state["loads"], b"")
        elif self.path == "/v1/loads":
            body = {"aggregate": {"total_running_reqs": 2, "total_waiting_reqs": 3}}
            self._send(200, json.dumps(body).encode())
        elif self.path == "/metrics":
            text = (
                "# TYPE sglang:generation_tokens_total counter\n"
                f'sglang:generation_tokens_total{{model_name="m"}} {self.state["generated"]}\n'
            )
            self._send(200, text.encode())
        else:
            self._send(404, b"")

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SGLangLike)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    SGLangLike.state = {"health": 200, "generated": 10.0}
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_probes_read_health_pool_and_load(server):
    probes = ProbeCollector()
    probes.target(server)
    snap = probes.collect()
    assert {name: r.ok for name, r in snap.results.items()} == {
        "health": True,
        "server_info": True,
        "loads": True,
    }
    assert (snap.max_total_num_tokens, snap.running_requests, snap.waiting_requests) == (4096, 2, 3)
    assert snap.health_failing_since is None and snap.health.success
    probes.stop()


def test_server_info_is_asked_until_it_answers_once_per_server(server):
    """What /server_info reports is fixed at startup: asked again only while it fails, and
    for each new target; its last answer stays in every snapshot."""
    probes = ProbeCollector()
    probes.target(server)
    SGLangLike.state["server_info"] = 503
    assert not probes.collect().results["server_info"].ok
    SGLangLike.state["server_info"] = 200
    answered = probes.collect()
    again = probes.collect()
    assert again.results["server_info"] == answered.results["server_info"]
    assert again.results["server_info"].ok and again.max_total_num_tokens == 4096
    assert SGLangLike.state["asked"].count("/server_info") == 2
    assert SGLangLike.state["asked"].count("/health") == 3  # health and loads every time
    assert SGLangLike.state["asked"].count("/v1/loads") == 3
    probes.target(server)  # a new attempt's server
    assert probes.collect().results["server_info"].ok
    assert SGLangLike.state["asked"].count("/server_info") == 3
    probes.stop()


def test_loads_only_when_wanted_after_the_first_answer(server):
    """/v1/loads is asked for a new server, then only when the owner wants it; the last
    answer stays the probe's result, but its numbers are not passed off as current."""
    wanted = [False]
    probes = ProbeCollector(wants_loads=lambda: wanted[0])
    probes.target(server)
    first = probes.collect()
    assert first.results["loads"].ok and first.waiting_requests == 3
    skipped = probes.collect()
    assert skipped.results["loads"] == first.results["loads"]
    assert skipped.waiting_requests is None and skipped.running_requests is None
    assert SGLangLike.state["asked"].count("/v1/loads") == 1
    wanted[0] = True
    assert probes.collect().waiting_requests == 3
    assert SGLangLike.state["asked"].count("/v1/loads") == 2
    probes.stop()


def test_a_failed_loads_probe_is_asked_again_even_when_not_wanted(server):
    """A failure must not stick as the last result: asked until it answers."""
    probes = ProbeCollector(wants_loads=lambda: False)
    probes.target(server)
    SGLangLike.state["loads"] = 503
    assert not probes.collect().results["loads"].ok
    assert not probes.collect().results["loads"].ok
    SGLangLike.state["loads"] = 200
    assert probes.collect().results["loads"].ok
    assert probes.collect().results["loads"].ok
    assert SGLangLike.state["asked"].count("/v1/loads") == 3
    probes.stop()


def test_failing_health_keeps_the_start_of_its_streak(server):
    probes = ProbeCollector()
    probes.target(server)
    SGLangLike.state["health"] = 503
    first = probes.collect()
    second = probes.collect()
    assert first.results["health"].status == 503 and not first.results["health"].ok
    assert second.health_failing_since == first.health_failing_since is not None
    SGLangLike.state["health"] = 200
    assert probes.collect().health_failing_since is None
    probes.stop()


def test_sglang_metrics_only_with_enable_metrics_and_counter_movement(server):
    probes = ProbeCollector()
    probes.target(server)
    assert "sglang_metrics" not in probes.collect().results
    probes.target(server, sglang_metrics=True)
    first = probes.collect()
    assert first.results["sglang_metrics"].ok and first.generated_tokens == 10.0
    still = probes.collect()
    assert still.generated_changed_at == first.generated_changed_at  # frozen counter
    SGLangLike.state["generated"] = 25.0
    moved = probes.collect()
    assert (
        moved.generated_tokens == 25.0 and moved.generated_changed_at > first.generated_changed_at
    )
    probes.stop()


def test_refused_connection_is_a_failed_probe_not_an_error():
    probes = ProbeCollector(health_timeout_s=1.0, info_timeout_s=1.0)
    probes.target("http://127.0.0.1:9")  # discard port: nothing listens
    snap = probes.collect()
    assert not snap.results["health"].ok and snap.results["health"].error == "ConnectError"
    assert snap.health.success  # the collector itself worked
    probes.stop()
