"""Read the Grafana dashboard's queries, with Grafana's macros and variables substituted.

Shared by tests/ops/test_dashboard.py (offline: parse and lint every query) and by integration
tests that run every query against a real Prometheus scraping the real daemon::

    from tests.harness.dashboard_tools import dashboard_queries
    for expr in dashboard_queries():
        result = prometheus_query(expr)  # expect a non-empty vector
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

GRAFANA = Path(__file__).resolve().parents[2] / "grafana"
DASHBOARD = GRAFANA / "sglang-sentinel.json"

# Grafana's value for "All" on our multi-value variables (their allValue).
ALL_VALUE = ".+"

# $var, ${var}, ${var:format}, [[var]] (the last is deprecated but still expanded by Grafana).
# A name must start with a letter or underscore, so label_replace's "$1" is not a variable.
VARIABLE_RE = re.compile(
    r"\$\{(?P<braced>[A-Za-z_]\w*)(?::[^}]*)?\}"
    r"|\$(?P<plain>[A-Za-z_]\w*)"
    r"|\[\[(?P<bracketed>[A-Za-z_]\w*)(?::[^\]]*)?\]\]"
)


@dataclass(frozen=True)
class Query:
    """One PromQL query of the dashboard, as written (macros not substituted)."""

    where: str  # "panel 12 'Failures by class'" or "annotation 'Relaunches'"
    ref_id: str
    expr: str
    legend: str
    panel: Mapping | None  # the panel holding the target; None for an annotation


def load(path: Path = DASHBOARD) -> dict:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def iter_panels(dashboard: Mapping) -> Iterator[Mapping]:
    """Every panel, rows included, and the panels nested in collapsed rows."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def referenced_variables(text: str) -> set[str]:
    """Names of the Grafana variables and macros (``__rate_interval``...) used in text."""
    return {
        match.group("braced") or match.group("plain") or match.group("bracketed")
        for match in VARIABLE_RE.finditer(text)
    }


def substitute(
    expr: str,
    values: Mapping[str, str],
    *,
    rate_interval: str = "5m",
    interval: str = "1m",
    range_: str = "1h",
) -> str:
    """Expand Grafana's macros and variables the way Grafana would before sending the query.

    Raises KeyError naming the variable when the query uses one that ``values`` lacks.
    """
    table = {
        "__rate_interval": rate_interval,
        "__interval": interval,
        "__range": range_,
        **values,
    }

    def replace(match: re.Match[str]) -> str:
        name = match.group("braced") or match.group("plain") or match.group("bracketed")
        if name not in table:
            raise KeyError(name)
        return table[name]

    return VARIABLE_RE.sub(replace, expr)


def dashboard_targets(dashboard: Mapping) -> list[Query]:
    """Every PromQL query: each panel target's expr, then each annotation's expr."""
    out: list[Query] = []
    for panel in iter_panels(dashboard):
        for target in panel.get("targets", []):
            out.append(
                Query(
                    where=f"panel {panel.get('id')} {panel.get('title')!r}",
                    ref_id=target.get("refId", ""),
                    expr=target.get("expr", ""),
                    legend=target.get("legendFormat", ""),
                    panel=panel,
                )
            )
    for annotation in dashboard.get("annotations", {}).get("list", []):
        if "expr" in annotation:
            out.append(
                Query(
                    where=f"annotation {annotation.get('name')!r}",
                    ref_id=annotation.get("name", ""),
                    expr=annotation["expr"],
                    legend=annotation.get("textFormat", ""),
                    panel=None,
                )
            )
    return out


def query_variables(dashboard: Mapping) -> list[Mapping]:
    """The dashboard's label-filter variables (type query): job, instance, gpu."""
    return [v for v in dashboard.get("templating", {}).get("list", []) if v.get("type") == "query"]


def dashboard_queries(
    path: Path = DASHBOARD,
    values: Mapping[str, str] | None = None,
    *,
    rate_interval: str = "5m",
    interval: str = "1m",
    range_: str = "1h",
) -> list[str]:
    """Every query of the dashboard, ready to send to Prometheus.

    Variables default to their "All" value (``.+``): the queries then select every job,
    instance and GPU the Prometheus knows, as the dashboard does with everything selected.
    Pass ``values`` (e.g. ``{"job": "sentinel-test"}``) to narrow some of them.
    """
    dashboard = load(path)
    table = {v["name"]: v.get("allValue") or ALL_VALUE for v in query_variables(dashboard)}
    table.update(values or {})
    return [
        substitute(q.expr, table, rate_interval=rate_interval, interval=interval, range_=range_)
        for q in dashboard_targets(dashboard)
    ]
