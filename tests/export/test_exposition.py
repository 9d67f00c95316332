"""Our text writer against prometheus_client's, and the /metrics server's HTTP behaviour."""

from __future__ import annotations

import gzip
import math
import threading
import time
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from exporter.exposition import CONTENT_TYPE, counter, gauge, render, serve
from tests.conftest import free_port

LABEL_NAMES = ("gpu", "tp_rank", "pool")
values = st.one_of(
    st.integers(min_value=0, max_value=2**53),
    st.floats(allow_nan=True, allow_infinity=True),
)
# Label values with everything that needs escaping (quotes, backslashes, newlines, unicode).
label_values = st.text(alphabet=st.sampled_from('ab0_"\\\n é{},='), max_size=8)
family_specs = st.lists(
    st.tuples(
        st.sampled_from(["gauge", "counter"]),
        st.integers(min_value=0, max_value=len(LABEL_NAMES)),
        st.lists(st.tuples(st.lists(label_values, min_size=3, max_size=3), values), max_size=4),
    ),
    min_size=1,
    max_size=4,
)


def parsed(text: str) -> list[tuple[str, str, str, list[tuple[str, dict, float]]]]:
    """Families as a scraper reads them; NaN made comparable."""
    return [
        (
            family.name,
            family.type,
            family.documentation,
            [(s.name, s.labels, "NaN" if math.isnan(s.value) else s.value) for s in family.samples],
        )
        for family in text_string_to_metric_families(text)
    ]


def both_ways(specs) -> tuple[str, str]:
    """The same families rendered by our writer and by prometheus_client's."""
    ours, theirs = [], []
    for i, (kind, label_count, samples) in enumerate(specs):
        name, doc, labels = (
            f"sglang_sentinel_m{i}",
            f'help "{i}" \\ with\nnewline',
            LABEL_NAMES[:label_count],
        )
        ours.append((counter if kind == "counter" else gauge)(name, doc, labels))
        make = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
        theirs.append(make(name, doc, labels=list(labels)))
        seen = set()
        for label_values_, value in samples:
            key = tuple(label_values_[:label_count])
            if key in seen:
                continue  # one sample per label set, as a collector makes them
            seen.add(key)
            if kind == "counter" and not value >= 0:
                value = 0  # a counter is never negative or NaN
            ours[-1].add(key, value)
            theirs[-1].add_metric(list(key), value)

    class Collector:
        def collect(self):
            return theirs

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector())
    return render(ours).decode(), generate_latest(registry).decode()


@settings(max_examples=300, deadline=None)
@given(family_specs)
def test_a_scraper_reads_from_ours_what_it_reads_from_prometheus_clients(specs):
    ours, theirs = both_ways(specs)
    assert parsed(ours) == parsed(theirs)
    # Same HELP and TYPE lines, byte for byte (counters named _total in both).
    assert [line for line in ours.splitlines() if line.startswith("#")] == [
        line for line in theirs.splitlines() if line.startswith("#")
    ]


def test_samples_format_as_the_text_format_says():
    family = counter("sglang_sentinel_restarts", "Relaunches.", ["reason"])
    family.add(['say "hi"\\\n'], 3)
    up = gauge("sglang_sentinel_server_up", "Up.")
    up.add([], float("inf"))
    assert render([family, up]).decode() == (
        "# HELP sglang_sentinel_restarts_total Relaunches.\n"
        "# TYPE sglang_sentinel_restarts_total counter\n"
        'sglang_sentinel_restarts_total{reason="say \\"hi\\"\\\\\\n"} 3.0\n'
        "# HELP sglang_sentinel_server_up Up.\n"
        "# TYPE sglang_sentinel_server_up gauge\n"
        "sglang_sentinel_server_up +Inf\n"
    )


def test_a_sample_with_the_wrong_number_of_label_values_is_refused():
    family = gauge("sglang_sentinel_x", "X.", ["gpu", "uuid"])
    with pytest.raises(TypeError):
        family.add(["0"], 1)
    with pytest.raises(TypeError):
        family.add(["0", "a", "b"], 1)
    assert family.lines == []


def up() -> list:
    family = gauge("sglang_sentinel_server_up", "Up.")
    family.add([], 1)
    return [family]


@pytest.fixture
def metrics_server():
    port = free_port()
    server, thread = serve("127.0.0.1", port, up)
    yield f"http://127.0.0.1:{port}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def context_switches(thread: threading.Thread) -> int:
    """How often the kernel has switched the thread out (voluntarily or not), so far."""
    status = Path(f"/proc/self/task/{thread.native_id}/status").read_text()
    return sum(int(line.split()[1]) for line in status.splitlines() if "ctxt_switches:" in line)


def test_the_server_sleeps_while_nobody_scrapes_and_stops_at_once():
    """No periodic wake-up (socketserver's loop would wake twice a second): the serving
    thread is not scheduled at all over 1.5 idle seconds; shutdown() still ends it."""
    port = free_port()
    server, thread = serve("127.0.0.1", port, up)
    with httpx.Client(trust_env=False) as client:
        assert client.get(f"http://127.0.0.1:{port}/metrics").status_code == 200
    time.sleep(0.2)
    before = context_switches(thread)
    time.sleep(1.5)
    assert context_switches(thread) == before
    started = time.monotonic()
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)
    assert not thread.is_alive() and time.monotonic() - started < 5.0


def test_metrics_served_plain_or_gzipped_as_the_scraper_asks(metrics_server):
    with httpx.Client(trust_env=False) as client:
        plain = client.get(metrics_server + "/metrics", headers={"Accept-Encoding": "identity"})
        zipped = client.get(metrics_server + "/metrics", headers={"Accept-Encoding": "gzip"})
    assert plain.headers["content-type"] == CONTENT_TYPE
    assert "content-encoding" not in plain.headers
    assert plain.content.endswith(b"sglang_sentinel_server_up 1.0\n")
    assert zipped.headers["content-encoding"] == "gzip"
    assert zipped.content == plain.content  # httpx decoded it
    assert int(zipped.headers["content-length"]) == len(gzip.compress(plain.content, 1))


def test_other_paths_are_not_found(metrics_server):
    with httpx.Client(trust_env=False) as client:
        response = client.get(metrics_server + "/debug")
    assert response.status_code == 404
    assert b"/metrics" in response.content
