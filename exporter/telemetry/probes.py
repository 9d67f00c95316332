"""HTTP probes of the SGLang server, in their own thread, through one reused client.

A new httpx client per request costs ~18 ms (it builds an SSL context); a reused one
~0.3 ms to localhost. Probes run apart from the daemon's main loop so an endpoint that
accepts and never answers cannot stall it; the loop reads the last snapshot.

Probes: ``health`` (``/health``: in both versions a one-token generation through the
scheduler, 503 after 20 s without detokenizer output), ``server_info`` (the pool values
SGLang reports, cross-checked against the log) and ``loads`` (``/v1/loads``: running and
waiting requests, without ``--enable-metrics``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import httpx

from exporter.telemetry.health import CollectorHealth

HEALTH_TIMEOUT_S = 25.0  # SGLang answers 503 itself after SGLANG_HEALTH_CHECK_TIMEOUT (20 s)
INFO_TIMEOUT_S = 5.0
PROBES = ("health", "server_info", "loads")


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    status: int | None  # HTTP status, None when no response
    duration_s: float
    error: str | None = None


@dataclass(frozen=True)
class ProbeSnapshot:
    taken_at: float = 0.0
    results: dict[str, ProbeResult] = field(default_factory=dict)
    health_failing_since: float | None = None  # first failure of the current failing streak
    max_total_num_tokens: int | None = None  # as /server_info reports it
    running_requests: int | None = None  # from /v1/loads
    waiting_requests: int | None = None
    health: CollectorHealth = field(default_factory=lambda: CollectorHealth(False, 0.0, None, None))


class ProbeCollector:
    def __init__(self, interval_s: float = 5.0) -> None:
        self._interval = interval_s
        self._client = httpx.Client(trust_env=False)
        self._base_url: str | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._snapshot = ProbeSnapshot()

    def target(self, base_url: str | None) -> None:
        """Probe this server from now on (None: nothing to probe); forgets the old results."""
        self._base_url = base_url.rstrip("/") if base_url else None
        self._snapshot = ProbeSnapshot(health=self._snapshot.health)

    def request(self) -> None:
        """Probe now rather than at the next interval (e.g. the log just said ready)."""
        self._wake.set()

    def snapshot(self) -> ProbeSnapshot:
        return self._snapshot

    def collect(self) -> ProbeSnapshot:
        base = self._base_url
        if base is None:
            return self._snapshot
        started = time.monotonic()
        health = self._get(base, "/health", HEALTH_TIMEOUT_S)
        results = {"health": health[0]}
        info = self._get(base, "/server_info", INFO_TIMEOUT_S)
        loads = self._get(base, "/v1/loads", INFO_TIMEOUT_S)
        results["server_info"], results["loads"] = info[0], loads[0]
        now = time.time()
        previous = self._snapshot
        failing_since = None
        if not health[0].ok:
            failing_since = previous.health_failing_since or now
        aggregate = (loads[1] or {}).get("aggregate", {})
        snapshot = ProbeSnapshot(
            taken_at=now,
            results=results,
            health_failing_since=failing_since,
            max_total_num_tokens=_int((info[1] or {}).get("max_total_num_tokens")),
            running_requests=_int(aggregate.get("total_running_reqs")),
            waiting_requests=_int(aggregate.get("total_waiting_reqs")),
            health=CollectorHealth(True, time.monotonic() - started, now, None),
        )
        if self._base_url == base:  # not retargeted meanwhile
            self._snapshot = snapshot
        return snapshot

    def _get(self, base: str, path: str, timeout_s: float) -> tuple[ProbeResult, dict | None]:
        started = time.monotonic()
        try:
            response = self._client.get(base + path, timeout=timeout_s)
        except httpx.HTTPError as error:
            return ProbeResult(False, None, time.monotonic() - started, type(error).__name__), None
        elapsed = time.monotonic() - started
        payload = None
        if response.status_code == 200 and path != "/health":
            try:
                payload = response.json()
            except ValueError:
                return ProbeResult(False, 200, elapsed, "invalid JSON"), None
        return ProbeResult(response.status_code == 200, response.status_code, elapsed), payload

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sentinel-probes", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=HEALTH_TIMEOUT_S + 5)
        self._client.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.collect()
            self._wake.wait(self._interval)
            self._wake.clear()


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def server_url(args: dict) -> str:
    """Where SGLang listens, from its flags: 0.0.0.0 and :: are reached through loopback."""
    host = str(args.get("host", "127.0.0.1"))
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{int(args.get('port', 30000))}"
