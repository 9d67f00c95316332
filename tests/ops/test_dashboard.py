"""The Grafana dashboard (grafana/sglang-sentinel.json), checked without a Grafana server.

No Grafana server can run here, so the dashboard is validated the honest way (see
shared/reference/testing-notes.md, "Grafana"): every query is parsed by a real PromQL parser
(the PyPI package promql-parser) after Grafana's macros and variables are substituted, the
metric names found by walking its AST are checked against what the daemon exports, and the
dashboard's structure is linted with the rules of grafana/dashboard-linter (datasource
variable, job/instance filters, $__rate_interval, units, descriptions) plus layout checks.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator, Mapping

import pytest

from tests.harness.dashboard_tools import (
    ALL_VALUE,
    DASHBOARD,
    GRAFANA,
    Query,
    dashboard_queries,
    dashboard_targets,
    iter_panels,
    load,
    query_variables,
    referenced_variables,
    substitute,
)
from tests.harness.metric_names import EXPORTED_METRICS

try:
    import promql_parser
except ImportError:  # reported by the `promql` fixture, with what to install
    promql_parser = None

# A query may use only the names in tests/harness/metric_names.py, and each of them on some panel.
# Series that carry the gpu label: every selector of one must filter on $gpu.
GPU_METRIC_PREFIX = "sglang_sentinel_gpu_"

UID = "sglang-sentinel"
MIN_SCHEMA_VERSION = 39  # Grafana 10.x; legacy dashboards (schemaVersion 22) are what we avoid
ALLOWED_PANEL_TYPES = {"row", "stat", "timeseries", "state-timeline", "table", "bargauge", "text"}
LEGACY_PANEL_TYPES = {"graph", "singlestat", "table-old", "grafana-piechart-panel"}
# Grafana unit ids used here (a typo such as "byte" silently renders as a plain number).
KNOWN_UNITS = {
    "none", "short", "bytes", "decbytes", "s", "ms", "percentunit", "percent",
    "dateTimeAsIso", "dateTimeFromNow", "cps", "reqps", "ops",
}  # fmt: skip
DATASOURCE_REF = {"type": "prometheus", "uid": "${datasource}"}
EXPECTED_ROWS = [
    "The server now",
    "Attempts and failures",
    "Memory pools",
    "GPUs",
    "Health and runtime",
    "The exporter itself",
]
GRID_COLUMNS = 24

# Plausible values for the variables: a single selection, Grafana's "All" (allValue), and a
# multi-selection (Grafana joins the values as a regex alternation). All are regex-safe.
SINGLE = {"job": "sglang-sentinel", "instance": "gpu-node-1:9464", "gpu": "0"}
ALL = {"job": ALL_VALUE, "instance": ALL_VALUE, "gpu": ALL_VALUE}
MULTI = {
    "job": "(sglang-sentinel|sglang-sentinel-canary)",
    "instance": "(gpu-node-1:9464|gpu-node-2:9464)",
    "gpu": "(0|1)",
}
# Distinct durations for the macros, so the AST tells which macro a range came from.
RATE_INTERVAL, INTERVAL, RANGE = "4m59s", "1m1s", "1h1m1s"
RATE_INTERVAL_TD = dt.timedelta(minutes=4, seconds=59)
MACRO_RANGES = {
    RATE_INTERVAL_TD,
    dt.timedelta(minutes=1, seconds=1),
    dt.timedelta(hours=1, minutes=1, seconds=1),
}
COUNTER_FUNCTIONS = {"rate", "irate", "increase", "delta", "idelta", "deriv", "resets"}
# Aggregations whose output keeps the input's labels.
LABEL_KEEPING_AGGREGATIONS = {"topk", "bottomk", "limitk", "limit_ratio"}


def _load_or_none() -> dict | None:
    try:
        return load(DASHBOARD)
    except (OSError, ValueError):
        return None


_DASHBOARD = _load_or_none()
QUERIES: list[Query] = dashboard_targets(_DASHBOARD) if _DASHBOARD else []


def _query_id(query: Query) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", query.where.lower()).strip("-")
    return f"{slug}-{query.ref_id}"


per_query = pytest.mark.parametrize("query", QUERIES, ids=[_query_id(q) for q in QUERIES])


@pytest.fixture(scope="module")
def dashboard() -> dict:
    assert _DASHBOARD is not None, f"{DASHBOARD} is missing or not valid JSON"
    return _DASHBOARD


@pytest.fixture(scope="module")
def promql():
    if promql_parser is None:
        pytest.fail(
            "the PyPI package promql-parser is not installed: `pip install promql-parser` "
            "(it belongs in pyproject.toml's [project.optional-dependencies].test)",
            pytrace=False,
        )
    return promql_parser


# ------------------------------------------------------------------------------ helpers


def _visual_panels(dashboard: Mapping) -> list[Mapping]:
    return [p for p in iter_panels(dashboard) if p.get("type") != "row"]


def _parse(promql, query: Query, values: Mapping[str, str]):
    try:
        expr = substitute(
            query.expr, values, rate_interval=RATE_INTERVAL, interval=INTERVAL, range_=RANGE
        )
    except KeyError as error:
        pytest.fail(
            f"{query.where} {query.ref_id}: undefined variable ${error.args[0]}", pytrace=False
        )
    try:
        return promql.parse(expr)
    except ValueError as error:
        pytest.fail(f"{query.where} {query.ref_id}: {error}\n{expr}", pytrace=False)


def _nodes(promql, expr) -> list:
    found: list = []
    promql.walk(expr, lambda node: found.append(node))
    return found


def _metric_name(selector) -> str | None:
    if selector.name:
        return selector.name
    for matcher in selector.matchers.matchers:
        if matcher.name == "__name__" and matcher.op == promql_parser.MatchOp.Equal:
            return matcher.value
    return None


def _is_scalar(promql, node) -> bool:
    kind = type(node).__name__
    if kind == "NumberLiteral":
        return True
    if kind == "Call":
        return node.func.return_type == promql.ValueType.Scalar
    if kind in {"ParenExpr", "UnaryExpr"}:
        return _is_scalar(promql, node.expr)
    if kind == "BinaryExpr":
        return _is_scalar(promql, node.lhs) and _is_scalar(promql, node.rhs)
    return False


def _output_labels(promql, node) -> frozenset[str] | None:
    """The labels every series of node's result is sure to carry; None when unknown (any)."""
    kind = type(node).__name__
    if kind in {"VectorSelector", "MatrixSelector"}:
        return None
    if kind in {"NumberLiteral", "StringLiteral"}:
        return frozenset()
    if kind in {"ParenExpr", "UnaryExpr", "SubqueryExpr"}:
        return _output_labels(promql, node.expr)
    if kind == "AggregateExpr":
        inner = _output_labels(promql, node.expr)
        if str(node.op) in LABEL_KEEPING_AGGREGATIONS:
            return inner
        extra = {node.param.val} if str(node.op) == "count_values" else set()
        if node.modifier is None:
            return frozenset(extra)
        if node.modifier.type == promql.AggModifierType.By:
            return frozenset(node.modifier.labels) | extra
        return None if inner is None else (inner - set(node.modifier.labels)) | extra
    if kind == "Call":
        if node.func.return_type == promql.ValueType.Scalar or not node.args:
            return frozenset()
        name = node.func.name
        vectors = [
            a for a in node.args if type(a).__name__ not in {"NumberLiteral", "StringLiteral"}
        ]
        inner = _output_labels(promql, vectors[0]) if vectors else frozenset()
        if name in {"label_replace", "label_join"} and inner is not None:
            return inner | {node.args[1].val}
        if name in {"vector", "absent", "absent_over_time"}:
            return frozenset() if name == "vector" else None
        return inner
    if kind == "BinaryExpr":
        lhs, rhs = node.lhs, node.rhs
        if _is_scalar(promql, lhs):
            return _output_labels(promql, rhs)
        if _is_scalar(promql, rhs):
            return _output_labels(promql, lhs)
        left, right = _output_labels(promql, lhs), _output_labels(promql, rhs)
        op = str(node.op)
        if op in {"and", "unless"}:
            return left
        if op == "or":
            if left is None or right is None:
                return right if left is None else left
            return left & right
        modifier = node.modifier
        card = modifier.card if modifier else promql.VectorMatchCardinality.OneToOne
        matching = modifier.matching if modifier else None
        group = set(modifier.group_labels or []) if modifier else set()
        if card == promql.VectorMatchCardinality.ManyToOne:
            return None if left is None else left | group
        if card == promql.VectorMatchCardinality.OneToMany:
            return None if right is None else right | group
        if matching is not None and matching.type == promql.LabelModifierType.Include:
            return frozenset(matching.labels)
        if matching is not None and left is not None:
            return left - set(matching.labels)
        return left
    return None


def _walk_json(node, path="$") -> Iterator[tuple[str, object, object]]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            yield f"{path}.{key}", key, value
            yield from _walk_json(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _walk_json(value, f"{path}[{index}]")


# ------------------------------------------------------------------------------ dashboard


def test_dashboard_has_stable_uid_and_current_schema(dashboard):
    assert dashboard["uid"] == UID
    assert isinstance(dashboard["schemaVersion"], int)
    assert dashboard["schemaVersion"] >= MIN_SCHEMA_VERSION
    assert dashboard.get("id") is None, "an exported id makes imports overwrite other dashboards"
    assert "rows" not in dashboard, "pre-schema-16 'rows' layout"
    assert dashboard["title"] and dashboard["tags"]
    assert any(link.get("type") == "dashboards" for link in dashboard.get("links", []))


def test_uid_is_unique_among_the_shipped_dashboards():
    uids = [load(path)["uid"] for path in sorted(GRAFANA.glob("*.json"))]
    assert len(uids) == len(set(uids)), uids
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,40}", uid) for uid in uids), uids


def test_panel_types_are_current(dashboard):
    types = {panel["type"] for panel in iter_panels(dashboard)}
    assert not types & LEGACY_PANEL_TYPES
    assert types <= ALLOWED_PANEL_TYPES, types - ALLOWED_PANEL_TYPES


def test_panel_ids_are_unique_integers(dashboard):
    ids = [panel["id"] for panel in iter_panels(dashboard)]
    assert all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
    assert len(ids) == len(set(ids))


def test_rows_are_the_documented_sections_and_none_is_empty(dashboard):
    top = dashboard["panels"]
    rows = [p["title"] for p in top if p["type"] == "row"]
    assert rows == EXPECTED_ROWS
    for index, panel in enumerate(top):
        if panel["type"] == "row":
            nested = panel.get("panels", [])
            following = top[index + 1] if index + 1 < len(top) else None
            assert nested or (following and following["type"] != "row"), panel["title"]


def test_grid_positions_are_integers_inside_the_grid_and_do_not_overlap(dashboard):
    def check(panels: list[Mapping]) -> None:
        boxes = []
        for panel in panels:
            pos = panel["gridPos"]
            assert set(pos) >= {"x", "y", "w", "h"}, panel["title"]
            x, y, w, h = (pos[k] for k in ("x", "y", "w", "h"))
            for value in (x, y, w, h):
                assert isinstance(value, int) and not isinstance(value, bool), panel["title"]
            assert x >= 0 and y >= 0 and w > 0 and h > 0, panel["title"]
            assert x + w <= GRID_COLUMNS, panel["title"]
            for other_title, (ox, oy, ow, oh) in boxes:
                overlap = x < ox + ow and ox < x + w and y < oy + oh and oy < y + h
                assert not overlap, f"{panel['title']!r} overlaps {other_title!r}"
            boxes.append((panel["title"], (x, y, w, h)))

    check(dashboard["panels"])
    for row in dashboard["panels"]:
        if row.get("panels"):  # a collapsed row lays its own panels out
            check(row["panels"])


def test_every_panel_has_title_description_and_unit(dashboard):
    for panel in _visual_panels(dashboard):
        assert panel.get("title"), panel["id"]
        assert panel.get("description", "").strip(), f"{panel['title']!r} has no description"
        if panel["type"] == "text":
            continue
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
        assert unit, f"{panel['title']!r} has no unit"
        units = [unit] + [
            prop["value"]
            for override in panel["fieldConfig"].get("overrides", [])
            for prop in override.get("properties", [])
            if prop.get("id") == "unit"
        ]
        for u in units:
            assert u in KNOWN_UNITS or u.startswith("suffix:"), f"{panel['title']!r}: unit {u!r}"


def test_datasource_is_the_variable_everywhere(dashboard):
    references = [
        (path, value) for path, key, value in _walk_json(dashboard) if key == "datasource"
    ]
    assert references
    for path, value in references:
        if isinstance(value, str):
            assert value == "${datasource}", path
        else:
            assert value == DATASOURCE_REF, f"{path}: {value}"
    for panel in _visual_panels(dashboard):
        if panel.get("targets"):
            assert panel.get("datasource") == DATASOURCE_REF, panel["title"]
            for target in panel["targets"]:
                assert target.get("datasource") == DATASOURCE_REF, panel["title"]


def test_every_target_has_a_unique_ref_id_and_an_expression(dashboard):
    for panel in _visual_panels(dashboard):
        if panel["type"] == "text":
            continue
        targets = panel.get("targets", [])
        assert targets, f"{panel['title']!r} has no query"
        ref_ids = [target.get("refId") for target in targets]
        assert all(ref_ids), panel["title"]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in targets:
            assert target.get("expr", "").strip(), f"{panel['title']!r} {target['refId']}"


def test_tables_query_instant_tables(dashboard):
    for panel in _visual_panels(dashboard):
        if panel["type"] == "table":
            for target in panel["targets"]:
                assert target.get("format") == "table" and target.get("instant"), panel["title"]


def test_every_exported_metric_has_a_panel(promql):
    used = set()
    for query in QUERIES:
        for node in _nodes(promql, _parse(promql, query, SINGLE)):
            if type(node).__name__ == "VectorSelector":
                used.add(_metric_name(node))
    assert EXPORTED_METRICS - used == set()


def test_server_state_panels_decode_every_state(dashboard):
    from exporter.attempt.states import ServerState

    panels = [
        p
        for p in _visual_panels(dashboard)
        if "sglang_sentinel_server_state" in json.dumps(p.get("targets", []))
    ]
    assert len(panels) >= 2  # the current state and the state timeline
    for panel in panels:
        texts = {
            option["text"]
            for mapping in panel["fieldConfig"]["defaults"]["mappings"]
            for option in mapping["options"].values()
        }
        for state in ServerState:
            assert state.value in texts, f"{panel['title']!r} has no mapping for {state.value}"
            for target in panel["targets"]:
                assert f'state="{state.value}"' in target["expr"], (panel["title"], state)


# ------------------------------------------------------------------------------ variables


def _variables(dashboard) -> dict[str, Mapping]:
    return {v["name"]: v for v in dashboard["templating"]["list"]}


def _variable_query(variable: Mapping) -> str:
    query = variable["query"]
    return query["query"] if isinstance(query, Mapping) else query


def test_datasource_variable_selects_prometheus(dashboard):
    variable = _variables(dashboard)["datasource"]
    assert variable["type"] == "datasource"
    assert variable["query"] == "prometheus"


@pytest.mark.parametrize(
    ("name", "metric", "filters"),
    [
        ("job", "sglang_sentinel_build_info", set()),
        ("instance", "sglang_sentinel_build_info", {"job"}),
        ("gpu", "sglang_sentinel_gpu_info", {"job", "instance"}),
    ],
)
def test_filter_variables(dashboard, promql, name, metric, filters):
    variable = _variables(dashboard)[name]
    assert variable["type"] == "query"
    assert variable["datasource"] == DATASOURCE_REF
    assert variable["multi"] and variable["includeAll"] and variable["allValue"] == ALL_VALUE
    assert variable["refresh"] in (1, 2), "refresh on load or on time range change"
    match = re.fullmatch(
        r"label_values\((?P<selector>.+),\s*(?P<label>\w+)\)", _variable_query(variable).strip()
    )
    assert match and match["label"] == name, _variable_query(variable)
    selector = promql.parse(substitute(match["selector"], SINGLE))
    assert type(selector).__name__ == "VectorSelector"
    assert _metric_name(selector) == metric
    matchers = {m.name: (m.op, m.value) for m in selector.matchers.matchers}
    for label in filters:
        assert matchers.get(label) == (promql.MatchOp.Re, SINGLE[label]), (name, label)


def test_every_variable_is_defined_once_and_used(dashboard):
    variables = dashboard["templating"]["list"]
    names = [v["name"] for v in variables]
    assert len(names) == len(set(names))
    assert {"datasource", "job", "instance", "gpu"} <= set(names)
    for variable in variables:
        elsewhere = [json.dumps(dashboard["panels"]), json.dumps(dashboard.get("annotations"))]
        elsewhere += [
            _variable_query(v) for v in variables if v is not variable and v["type"] == "query"
        ]
        assert variable["name"] in referenced_variables("\n".join(elsewhere)), variable["name"]


def test_queries_use_only_defined_variables_and_known_macros(dashboard):
    macros = {"__rate_interval", "__interval", "__range"}
    allowed = (set(_variables(dashboard)) - {"datasource"}) | macros
    for query in QUERIES:
        unknown = referenced_variables(query.expr) - allowed
        assert not unknown, f"{query.where} {query.ref_id}: {unknown}"
    for variable in query_variables(dashboard):
        assert referenced_variables(_variable_query(variable)) <= allowed


def test_plausible_values_cover_every_filter_variable(dashboard):
    names = {v["name"] for v in query_variables(dashboard)}
    assert names <= set(SINGLE) and names <= set(MULTI), "add a plausible value for the test"


# ------------------------------------------------------------------------------ each query


@per_query
@pytest.mark.parametrize("values", [SINGLE, ALL, MULTI], ids=["single", "all", "multi"])
def test_query_parses(promql, query, values):
    _parse(promql, query, values)


@per_query
def test_query_uses_only_exported_metrics(promql, query):
    names = {
        _metric_name(node)
        for node in _nodes(promql, _parse(promql, query, SINGLE))
        if type(node).__name__ == "VectorSelector"
    }
    assert names, f"{query.where} {query.ref_id} selects no metric"
    assert None not in names, "every selector names its metric"
    assert names <= EXPORTED_METRICS, names - EXPORTED_METRICS


@per_query
def test_every_selector_filters_job_and_instance_and_gpu(promql, query):
    assert {"job", "instance"} <= referenced_variables(query.expr)
    for node in _nodes(promql, _parse(promql, query, SINGLE)):
        if type(node).__name__ != "VectorSelector":
            continue
        name = _metric_name(node)
        matchers = {m.name: (m.op, m.value) for m in node.matchers.matchers}
        required = ["job", "instance"] + (["gpu"] if name.startswith(GPU_METRIC_PREFIX) else [])
        for label in required:
            assert matchers.get(label) == (promql.MatchOp.Re, SINGLE[label]), (
                f'{query.where} {query.ref_id}: {name} lacks {label}=~"${label}"'
            )


@per_query
def test_ranges_come_from_grafana_macros(promql, query):
    nodes = _nodes(promql, _parse(promql, query, SINGLE))
    for node in nodes:
        if type(node).__name__ == "MatrixSelector":
            assert node.range in MACRO_RANGES, f"{query.where}: hard-coded range {node.range}"
        if type(node).__name__ == "Call" and node.func.name in COUNTER_FUNCTIONS:
            window = node.args[0]
            assert type(window).__name__ == "MatrixSelector"
            assert window.range == RATE_INTERVAL_TD, (
                f"{query.where} {query.ref_id}: {node.func.name} must use [$__rate_interval]"
            )


@per_query
def test_legend_labels_survive_the_aggregation(promql, query):
    wanted = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", query.legend))
    available = _output_labels(promql, _parse(promql, query, SINGLE))
    if available is not None:
        assert wanted <= available, (
            f"{query.where} {query.ref_id}: legend uses {wanted - available}, "
            f"the query keeps only {sorted(available)}"
        )


@per_query
def test_queries_keep_instance_apart(promql, query):
    """With several instances selected, series must not be summed across them."""
    available = _output_labels(promql, _parse(promql, query, SINGLE))
    if available is not None:
        assert {"job", "instance"} <= available, f"{query.where} {query.ref_id}: {available}"


# ------------------------------------------------------------------------------ helper, docs


def test_dashboard_queries_are_ready_to_send(promql, dashboard):
    queries = dashboard_queries()
    assert len(queries) == len(QUERIES) > 0
    for expr in queries:
        assert "$" not in expr, expr
        promql.parse(expr)
    narrowed = dashboard_queries(values={"job": "sentinel-test"})
    assert all('job=~"sentinel-test"' in expr for expr in narrowed)


def test_readme_documents_variables_and_rows(dashboard):
    readme = (GRAFANA / "README.md").read_text(encoding="utf-8")
    for name in _variables(dashboard):
        assert f"`{name}`" in readme, name
    for title in EXPECTED_ROWS:
        assert title in readme, title
    assert UID in readme
