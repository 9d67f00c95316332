"""Figure 4 (scrape cost at ~500 and ~5,000 series vs node_exporter) and the scrape half of
figure 6 (500, 5,000, 50,000 series).

Ours: exporter.metrics.serve in its own process (bench/metrics_proc.py synthetic), its
collector fed a fixed state with many TP ranks / GPUs; every scrape builds the families
from a fresh snapshot, as in the daemon. node_exporter: Debian's, default collectors, on
127.0.0.1. The client is one reused httpx.Client; a scrape is timed from the request to the
last byte of the body. Ours and node_exporter's scrapes alternate, so both see the same
background load.
"""

from __future__ import annotations

import time

import httpx

from bench.common import (
    HOST,
    PYTHON,
    emit,
    free_port,
    median,
    note,
    peer_binary,
    percentile,
    start,
    wait_http,
)
from bench.metrics_proc import synthetic_state
from exporter.exposition import render
from exporter.metrics import families


def series_count(text: str) -> int:
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def ranks_for(series: int) -> int:
    """How many synthetic ranks give about ``series`` series (measured, not assumed)."""

    def count(ranks: int) -> int:
        return series_count(render(families(synthetic_state(ranks))).decode())

    one, two = count(1), count(2)
    per_rank = two - one
    return max(1, round((series - (one - per_rank)) / per_rank))


class OurServer:
    def __init__(self, ranks: int) -> None:
        self.port = free_port()
        self.child = start(
            [PYTHON, "-m", "bench.metrics_proc", "synthetic", str(ranks), str(self.port)],
            f"metrics_proc synthetic {ranks}",
        )
        self.url = f"http://{HOST}:{self.port}/metrics"
        wait_http(self.url, child=self.child)

    def stop(self) -> None:
        self.child.stop()


class NodeExporter:
    def __init__(self) -> None:
        binary = peer_binary("node_exporter")
        assert binary is not None
        self.port = free_port()
        self.child = start(
            [binary, f"--web.listen-address={HOST}:{self.port}", "--log.level=error"],
            "node_exporter",
        )
        self.url = f"http://{HOST}:{self.port}/metrics"
        wait_http(self.url, child=self.child)

    def stop(self) -> None:
        self.child.stop()


def scrape(client: httpx.Client, url: str) -> tuple[float, str]:
    started = time.perf_counter()
    response = client.get(url)
    body = response.text
    elapsed = time.perf_counter() - started
    response.raise_for_status()
    return elapsed, body


def measure(
    client: httpx.Client, urls: list[str], scrapes: int, warmup: int = 5
) -> list[list[float]]:
    """Scrape each url ``scrapes`` times, alternating; seconds per scrape per url."""
    for _ in range(warmup):
        for url in urls:
            scrape(client, url)
    times: list[list[float]] = [[] for _ in urls]
    for _ in range(scrapes):
        for i, url in enumerate(urls):
            times[i].append(scrape(client, url)[0])
    return times


def main(quick: bool = False) -> None:
    scrapes = 40 if quick else 200
    node = NodeExporter() if peer_binary("node_exporter") else None
    client = httpx.Client(trust_env=False, timeout=30.0)
    results: dict[int, tuple[int, list[float]]] = {}
    try:
        node_series = series_count(scrape(client, node.url)[1]) if node else None
        if node:
            note(f"node_exporter exposes {node_series} series here")
        for target, count in ((500, scrapes), (5000, scrapes), (50000, 20 if quick else 50)):
            ranks = ranks_for(target)
            ours = OurServer(ranks)
            try:
                series = series_count(scrape(client, ours.url)[1])
                urls = [ours.url] + ([node.url] if node and target <= 5000 else [])
                times = measure(client, urls, count)
            finally:
                ours.stop()
            results[target] = (series, times[0])
            ms = [t * 1000 for t in times[0]]
            note(
                f"ours at {series} series ({ranks} ranks): p50 {percentile(ms, 50):.2f} ms, "
                f"p99 {percentile(ms, 99):.2f} ms over {count} scrapes"
            )
            if len(times) > 1:
                node_ms = [t * 1000 for t in times[1]]
                note(
                    f"  node_exporter ({node_series} series) meanwhile: p50 "
                    f"{percentile(node_ms, 50):.2f} ms, p99 {percentile(node_ms, 99):.2f} ms"
                )
                node_p99 = percentile(node_ms, 99)
                node_p50 = percentile(node_ms, 50)
            else:
                node_p99 = node_p50 = None
            p50, p99 = percentile(ms, 50), percentile(ms, 99)
            peer = f"node_exporter 1.5.0 ({node_series} series)" if node_p99 is not None else None
            if target in (500, 5000):
                emit(
                    f"scrape_p50_{series}_series",
                    p50,
                    "ms",
                    "none (context for p99)",
                    True,
                    peer,
                    node_p50,
                    p50 / node_p50 if node_p50 else None,
                )
                if target == 500:
                    p99_target = "<= node_exporter's p99"
                    p99_met = node_p99 is not None and p99 <= node_p99
                else:
                    p99_target, p99_met = "< 30 ms", p99 < 30.0
                emit(
                    f"scrape_p99_{series}_series",
                    p99,
                    "ms",
                    p99_target,
                    p99_met,
                    peer,
                    node_p99,
                    p99 / node_p99 if node_p99 else None,
                )
    finally:
        client.close()
        if node:
            node.stop()
    # Figure 6, scrape half: cost per series as the series grow 1x / 10x / 100x.
    base_series, base_times = results[500]
    base_per = median(base_times) / base_series
    for _target, (series, times) in sorted(results.items()):
        per = median(times) / series
        emit(
            f"scrape_scaling_{series}_series",
            median(times) * 1000,
            "ms (median scrape)",
            f"linear: time per series within 1.5x of the {base_series}-series case",
            per / base_per <= 1.5,
            peer=f"ours at {base_series} series, scaled by series",
            peer_value=base_per * series * 1000,
            ratio=per / base_per,
        )
