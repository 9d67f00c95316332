"""HTTP probes of the SGLang server, in their own thread, through one reused connection pool.

A new httpx client per request costs ~18 ms (it builds an SSL context). A reused client
costs ~0.9 ms of CPU a request to localhost, its transport alone ~0.6 ms: the probes use
httpx's transport directly, since they need none of the client's layer (redirects, auth,
cookies, event hooks), and an idle daemon spends most of its CPU on them. Probes run apart
from the daemon's main loop so an endpoint that accepts and never answers cannot stall it;
the loop reads the last snapshot.

Probes: ``health`` (``/health``: in both versions a one-token generation through the
scheduler, 503 after 20 s without detokenizer output), ``server_info`` (the pool values
SGLang reports, cross-checked against the log; asked until it answers, once per server,
since they are fixed at startup), ``loads`` (``/v1/loads``: running and waiting requests,
without ``--enable-metrics``; asked until it answers, then when the owner's
``wants_loads`` says so: the daemon, while the scheduler logs no batch lines) and, when
SGLang runs with ``--enable-metrics``, ``sglang_metrics`` (its own ``/metrics``: the queue
and the generated token counter, whose standstill tells a hang from a quiet log).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

from exporter.exposition import Family, sentinel_gauge
from exporter.telemetry.health import NEVER_COLLECTED, CollectorHealth
from exporter.telemetry.source import Host, PeriodicSource, Source

HEALTH_TIMEOUT_S = 25.0  # SGLang answers 503 itself after SGLANG_HEALTH_CHECK_TIMEOUT (20 s)
INFO_TIMEOUT_S = 5.0
PROBES = ("health", "server_info", "loads", "sglang_metrics")


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
    generated_tokens: float | None = None  # sglang:generation_tokens_total (--enable-metrics)
    generated_changed_at: float | None = None  # when that counter last moved
    health: CollectorHealth = NEVER_COLLECTED


class ProbeCollector(PeriodicSource[ProbeSnapshot]):
    name = "probes"

    def __init__(
        self,
        interval_s: float = 5.0,
        health_timeout_s: float = HEALTH_TIMEOUT_S,
        info_timeout_s: float = INFO_TIMEOUT_S,
        on_snapshot: Callable[[], None] = lambda: None,
        wants_loads: Callable[[], bool] = lambda: True,
    ) -> None:
        """``on_snapshot`` is called (from the probes' thread) after each new snapshot;
        ``wants_loads`` says whether /v1/loads is worth asking this time."""
        # A stop waits for the probes in flight: health, then the two others at most.
        join_s = health_timeout_s + 2 * info_timeout_s + 5
        super().__init__(ProbeSnapshot(), interval_s, join_s=join_s, on_snapshot=on_snapshot)
        self._wants_loads = wants_loads
        self._health_timeout = health_timeout_s
        self._info_timeout = info_timeout_s
        self._transport = httpx.HTTPTransport()  # no proxies from the environment either
        self._base_url: str | None = None
        self._sglang_metrics = False

    @classmethod
    def build(cls, host: Host, built: Mapping[str, Source]) -> ProbeCollector:
        """Each snapshot wakes the daemon's loop; /v1/loads only while its scheduler is quiet."""
        return cls(
            host.config.policy.health_interval_s,
            on_snapshot=host.wake,
            wants_loads=host.scheduler_quiet,
        )

    @staticmethod
    def families(snapshot: ProbeSnapshot | None) -> list[Family]:
        return probe_families(snapshot)

    def target(self, base_url: str | None, sglang_metrics: bool = False) -> None:
        """Probe this server from now on (None: nothing to probe); forgets the old results.
        ``sglang_metrics``: SGLang runs with --enable-metrics, so read its /metrics too."""
        self._base_url = base_url.rstrip("/") if base_url else None
        self._sglang_metrics = sglang_metrics
        self._snapshot = ProbeSnapshot(health=self._snapshot.health)

    def _read(self, previous: ProbeSnapshot) -> ProbeSnapshot | None:
        base = self._base_url
        if base is None:  # nothing to probe: the last snapshot, its health too, stands
            return None
        health = self._get(base, "/health", self._health_timeout)
        results = {"health": health[0]}
        # What /server_info reports is fixed at startup: one answer per server will do.
        info = self._unless_answered(base, previous, "server_info", "/server_info", False)
        results["server_info"] = info[0]
        if info[0] is previous.results.get("server_info"):  # the last answer, kept
            max_tokens = previous.max_total_num_tokens
        else:
            max_tokens = _int((info[1] or {}).get("max_total_num_tokens"))
        loads = self._unless_answered(base, previous, "loads", "/v1/loads", self._wants_loads())
        results["loads"] = loads[0]
        now = time.time()
        failing_since = None
        if not health[0].ok:
            failing_since = previous.health_failing_since or now
        aggregate = (loads[1] or {}).get("aggregate", {})
        generated, changed_at = None, previous.generated_changed_at
        if self._sglang_metrics:
            started_metrics = time.monotonic()
            results["sglang_metrics"], generated = self._sglang_counters(base, started_metrics)
            if generated is not None and generated != previous.generated_tokens:
                changed_at = now
        if self._base_url != base:  # retargeted meanwhile: these results are the old server's
            return None
        return ProbeSnapshot(
            results=results,
            health_failing_since=failing_since,
            max_total_num_tokens=max_tokens,
            running_requests=_int(aggregate.get("total_running_reqs")),
            waiting_requests=_int(aggregate.get("total_waiting_reqs")),
            generated_tokens=generated,
            generated_changed_at=changed_at,
        )

    def _unless_answered(
        self, base: str, previous: ProbeSnapshot, name: str, path: str, wanted: bool
    ) -> tuple[ProbeResult, dict | None]:
        """Ask ``path`` unless its last answer was fine and it is not wanted now: then that
        answer stays the probe's result, with no payload (its numbers are not current)."""
        asked = previous.results.get(name)
        if asked is not None and asked.ok and not wanted:
            return asked, None
        return self._get(base, path, self._info_timeout)

    def _get(self, base: str, path: str, timeout_s: float) -> tuple[ProbeResult, dict | None]:
        started = time.monotonic()
        try:
            response = self._request(base + path, timeout_s)
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

    def _request(self, url: str, timeout_s: float) -> httpx.Response:
        timeout = httpx.Timeout(timeout_s).as_dict()
        request = httpx.Request("GET", url, extensions={"timeout": timeout})
        response = self._transport.handle_request(request)
        try:
            response.read()
        finally:
            response.close()
        return response

    def _sglang_counters(self, base: str, started: float) -> tuple[ProbeResult, float | None]:
        """SGLang's own /metrics: the generated-token counter, summed over its label sets."""
        try:
            response = self._request(base + "/metrics", self._info_timeout)
            families = list(text_string_to_metric_families(response.text))
        except (httpx.HTTPError, ValueError) as error:
            return ProbeResult(False, None, time.monotonic() - started, type(error).__name__), None
        elapsed = time.monotonic() - started
        generated = [
            sample.value
            for family in families
            for sample in family.samples
            if sample.name == "sglang:generation_tokens_total"
        ]
        ok = response.status_code == 200 and bool(generated)
        return ProbeResult(ok, response.status_code, elapsed), (sum(generated) if ok else None)

    def _close(self) -> None:
        self._transport.close()


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def probe_families(probes: ProbeSnapshot | None) -> list[Family]:
    success = sentinel_gauge("health_probe_success", "1 when the last probe succeeded.", ["probe"])
    duration = sentinel_gauge(
        "health_probe_duration_seconds", "How long the last probe took.", ["probe"]
    )
    for name in PROBES:
        result = probes.results.get(name) if probes else None
        if result is not None:
            success.add([name], 1.0 if result.ok else 0.0)
            duration.add([name], result.duration_s)
    return [success, duration]
