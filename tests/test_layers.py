"""Layer rules: which package of exporter/ may import which, and no import cycle between
packages (README "Architecture"; shared/reference/architecture-review.md, section 4.4).

The import graph is read from the source with ast: every ``import`` and ``from`` form,
relative ones too, wherever they sit (a function-level import counts). Imports under
``if TYPE_CHECKING:`` are left out: they never run, they only name a type for readers.
A package is the first path part under exporter/ (``exporter/attempt/progress.py`` is in
``attempt``, ``exporter/metrics.py`` is ``metrics``; the package root is ``exporter``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "exporter"

ONLY = "imports only"  # besides itself
NEVER = "never imports"
ONLY_BY = "is imported only by"  # besides itself


@dataclass(frozen=True)
class Rule:
    package: str  # a package, or one module of it ("attempt.progress")
    kind: str  # ONLY, NEVER or ONLY_BY
    others: tuple[str, ...]
    why: str


# A new rule is one line. A name may be a package that does not exist yet (see PLANNED).
RULES = (
    Rule("exporter", ONLY, (), "the package root holds the version, nothing else"),
    Rule("identity", ONLY, (), "a process named by pid and start time: under all process code"),
    Rule("exposition", ONLY, (), "the text format and its server know no metric of ours"),
    Rule("logs", ONLY, (), "lines -> events: the bottom of the pipeline"),
    Rule("sglang", ONLY, ("logs",), "what SGLang is and says, apart from our machinery"),
    Rule("attempt", ONLY, ("logs", "sglang"), "pure folds of one attempt's log: no I/O, no policy"),
    Rule("diagnosis", ONLY, ("logs", "sglang"), "one log -> one classification, pure"),
    Rule(
        "config",
        ONLY,
        ("sglang", "diagnosis.taxonomy", "termination"),
        "a file -> typed values: it names flags and failure classes, it runs nothing",
    ),
    Rule("config.positions", ONLY, (), "where keys sit in TOML text: the text alone"),
    Rule(
        "telemetry",
        NEVER,
        ("supervisor", "attempt", "policy", "metrics"),
        "a source is read beside the log: it never acts, knows the attempt's state or exports",
    ),
    Rule("metrics", NEVER, ("supervisor", "policy"), "families come from the Snapshot alone"),
    Rule("supervisor", NEVER, ("metrics",), "the loop fills the Snapshot; a scrape renders it"),
    *(
        Rule(f"supervisor.{step}", NEVER, ("supervisor.daemon",), "it returns what the daemon does")
        for step in ("attempt", "ladder", "launch", "watch", "conclude", "resume", "reload", "host")
    ),
    Rule("redact", ONLY, (), "masking is text in, text out: a classification is handed in"),
    Rule("app", ONLY_BY, ("commands",), "the composition root is wired by run and demo only"),
    Rule("commands", ONLY_BY, ("cli",), "a command is an entry point, never a library"),
    Rule("cli", ONLY_BY, (), "the command line is the top: nothing builds on it"),
)
# Packages the rules may name before they exist (issue 14 brings them).
PLANNED = {"sglang", "policy"}


def module_files(package: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``package`` (a package's
    ``__init__.py`` is the package's own name)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_graph(package: Path) -> dict[str, dict[str, str]]:
    """Module -> {module of ours it imports: where ("file:line")}, type-only imports left out."""
    files = module_files(package)
    graph: dict[str, dict[str, str]] = {}
    for module, path in files.items():
        here = module if path.name == "__init__.py" else module.rpartition(".")[0]
        edges = graph.setdefault(module, {})
        tree = ast.parse(path.read_text(), str(path))
        for node in sorted(_run_time_imports(tree), key=lambda node: node.lineno):
            for target in _targets(node, here, files):
                if target != module:
                    where = f"{path.relative_to(package.parent)}:{node.lineno}"
                    edges.setdefault(target, where)
    return graph


def _run_time_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)  # the else branch does run
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _is_type_checking(test: ast.expr) -> bool:
    name = test.attr if isinstance(test, ast.Attribute) else getattr(test, "id", None)
    return name == "TYPE_CHECKING"


def _targets(node: ast.Import | ast.ImportFrom, here: str, files: Mapping) -> Iterator[str]:
    """The modules of ours that one import statement loads, as named in ``files``."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names if alias.name in files)
        return
    source = node.module or ""
    if node.level:  # relative: level 1 is this module's package, 2 its parent, ...
        base = here.split(".")[: len(here.split(".")) - node.level + 1]
        source = ".".join([*base, *([node.module] if node.module else [])])
    for alias in node.names:
        submodule = f"{source}.{alias.name}"
        if submodule in files:  # from exporter import exposition: the module itself
            yield submodule
        elif source in files:  # a name defined in (or re-exported by) ``source``
            yield source


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _within(module: str, name: str) -> bool:
    """True when ``module`` (dotted, from the root) is the package or module ``name``
    (relative to the root: "attempt", "attempt.progress"; "exporter" is the root alone)."""
    relative = module.partition(".")[2] or module
    return relative == name or relative.startswith(name + ".")


def broken_rules(graph: Mapping[str, Mapping[str, str]], rules: Sequence[Rule]) -> list[str]:
    """One line per import that breaks a rule: who imports what, where, and the rule's why."""
    broken = []
    for module, edges in sorted(graph.items()):
        for target, where in sorted(edges.items()):
            for rule in rules:
                if _breaks(rule, module, target):
                    broken.append(
                        f"{module} imports {target} ({where}): {rule.package} {rule.kind} "
                        f"{', '.join(rule.others) or 'nothing else of ours'}: {rule.why}"
                    )
    return broken


def _breaks(rule: Rule, module: str, target: str) -> bool:
    if rule.kind == ONLY_BY:
        inside = _within(target, rule.package) and not _within(module, rule.package)
        return inside and not any(_within(module, other) for other in rule.others)
    if not _within(module, rule.package) or _within(target, rule.package):
        return False
    named = any(_within(target, other) for other in rule.others)
    return named if rule.kind == NEVER else not named


def package_cycles(graph: Mapping[str, Mapping[str, str]]) -> list[list[str]]:
    """The cycles between packages, each as the packages it goes through (Tarjan's strongly
    connected components of more than one package), with one import per step."""
    edges: dict[str, dict[str, str]] = {}
    for module, targets in graph.items():
        for target, where in targets.items():
            a, b = package_of(module), package_of(target)
            if a != b:
                edges.setdefault(a, {}).setdefault(b, where)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(edges.get(node, {})):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                members = sorted(component)
                cycles.append(
                    [
                        f"{a} -> {b} ({where})"
                        for a in members
                        for b, where in sorted(edges.get(a, {}).items())
                        if b in component
                    ]
                )

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return cycles


# --- the tree as it is --------------------------------------------------------------------


@pytest.fixture(scope="module")
def graph() -> dict[str, dict[str, str]]:
    return import_graph(PACKAGE)


def test_no_import_cycle_between_packages(graph):
    assert package_cycles(graph) == []


def test_every_layer_rule_holds(graph):
    assert broken_rules(graph, RULES) == []


def test_every_rule_names_a_package_that_exists_or_is_planned(graph):
    # A misspelt name would make its rule hold vacuously.
    for rule in RULES:
        for name in (rule.package, *rule.others):
            if name.partition(".")[0] not in PLANNED:
                assert any(_within(module, name) for module in graph), (rule, name)


def test_the_graph_holds_the_imports_the_rules_are_about(graph):
    # The rules above hold only if the graph is real: these imports exist today.
    assert "exporter.attempt.progress" in graph["exporter.metrics"]
    assert "exporter.exposition" in graph["exporter.metrics"]  # from exporter import exposition
    assert "exporter.identity" in graph["exporter.telemetry.processes"]
    assert "exporter.telemetry.registry" in graph["exporter.metrics"]
    assert "exporter.telemetry.source" in graph["exporter.telemetry.gpu.collector"]
    assert "exporter.commands.run" in graph["exporter.cli"]  # from exporter.commands import run


# --- the checker, on graphs that break the rules on purpose --------------------------------


def test_a_forbidden_import_is_reported_with_where_and_why():
    broken = broken_rules(
        {"exporter.telemetry.processes": {"exporter.supervisor.processes": "t.py:19"}}, RULES
    )
    assert len(broken) == 1
    assert (
        "exporter.telemetry.processes imports exporter.supervisor.processes (t.py:19)"
        in (broken[0])
    )
    assert "telemetry never imports" in broken[0]


def test_an_import_outside_an_only_list_is_reported_and_one_inside_is_not():
    graph = {
        "exporter.attempt.progress": {
            "exporter.logs.events": "p.py:1",
            "exporter.sglang.versions": "p.py:2",
            "exporter.attempt.states": "p.py:3",
            "exporter.diagnosis.taxonomy": "p.py:4",
        }
    }
    broken = broken_rules(graph, RULES)
    assert [line.split(" (")[0] for line in broken] == [
        "exporter.attempt.progress imports exporter.diagnosis.taxonomy"
    ]


def test_a_rule_on_one_module_leaves_its_siblings_alone():
    rules = (Rule("telemetry", NEVER, ("attempt.progress",), "a rule on one module"),)
    snapshot = {"exporter.telemetry.gpu": {"exporter.attempt.snapshot": "g.py:1"}}
    writer = {"exporter.telemetry.gpu": {"exporter.attempt.progress": "g.py:1"}}
    assert broken_rules(snapshot, rules) == []
    assert len(broken_rules(writer, rules)) == 1


def test_telemetry_reaches_no_part_of_the_attempt():
    graph = {"exporter.telemetry.gpu.collector": {"exporter.attempt.snapshot": "c.py:1"}}
    assert [line.split(" (")[0] for line in broken_rules(graph, RULES)] == [
        "exporter.telemetry.gpu.collector imports exporter.attempt.snapshot"
    ]


def test_a_supervisor_step_that_calls_back_into_the_daemon_is_reported():
    graph = {
        "exporter.supervisor.daemon": {"exporter.supervisor.conclude": "d.py:1"},
        "exporter.supervisor.conclude": {"exporter.supervisor.daemon": "c.py:2"},
    }
    broken = broken_rules(graph, RULES)
    assert [line.split(" (")[0] for line in broken] == [
        "exporter.supervisor.conclude imports exporter.supervisor.daemon"
    ]


def test_importing_commands_from_anywhere_but_cli_is_reported():
    graph = {
        "exporter.cli": {"exporter.commands.run": "cli.py:10"},
        "exporter.commands.demo": {"exporter.commands.run": "demo.py:3"},
        "exporter.supervisor.daemon": {"exporter.commands.plan": "d.py:9", "exporter.cli": "d:10"},
    }
    broken = broken_rules(graph, RULES)
    assert [line.split(" (")[0] for line in broken] == [
        "exporter.supervisor.daemon imports exporter.cli",
        "exporter.supervisor.daemon imports exporter.commands.plan",
    ]


def test_a_cycle_between_packages_is_reported_with_each_step():
    graph = {
        "exporter.metrics": {"exporter.supervisor.reaper": "m.py:21"},
        "exporter.supervisor.daemon": {"exporter.metrics": "d.py:32"},
        "exporter.supervisor.reaper": {"exporter.supervisor.processes": "r.py:22"},
        "exporter.logs.reader": {},
    }
    assert package_cycles(graph) == [
        ["metrics -> supervisor (m.py:21)", "supervisor -> metrics (d.py:32)"]
    ]
    del graph["exporter.supervisor.daemon"]
    assert package_cycles(graph) == []


def test_a_longer_cycle_is_one_component():
    graph = {
        "exporter.a": {"exporter.b": "a:1"},
        "exporter.b": {"exporter.c": "b:1"},
        "exporter.c.x": {"exporter.a": "c:1"},
    }
    assert package_cycles(graph) == [["a -> b (a:1)", "b -> c (b:1)", "c -> a (c:1)"]]


def test_the_graph_reads_every_import_form_and_skips_type_only_ones(tmp_path):
    root = tmp_path / "exporter"
    (root / "pkg").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "leaf.py": "",
        "other.py": "VALUE = 1\n",
        "pkg/__init__.py": "from .mod import NAME\n",
        "pkg/mod.py": "NAME = 1\n",
        "pkg/user.py": (
            "from __future__ import annotations\n"
            "import json\n"
            "import exporter.leaf\n"
            "from exporter import other\n"
            "from . import mod\n"
            "from .. import leaf as again\n"
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n"
            "    from exporter.late import Later\n"
            "else:\n"
            "    from exporter.pkg.mod import NAME\n"
            "def later():\n"
            "    from exporter.late import Later\n"
        ),
        "late.py": "import typing\nif typing.TYPE_CHECKING:\n    from exporter.pkg import user\n",
    }
    for name, text in files.items():
        (root / name).write_text(text)
    graph = import_graph(root)
    assert graph["exporter.pkg.user"] == {
        "exporter.leaf": "exporter/pkg/user.py:3",
        "exporter.other": "exporter/pkg/user.py:4",
        "exporter.pkg.mod": "exporter/pkg/user.py:5",
        "exporter.late": "exporter/pkg/user.py:13",  # the function-level one
    }
    assert graph["exporter.pkg"] == {"exporter.pkg.mod": "exporter/pkg/__init__.py:1"}
    assert graph["exporter.late"] == {}  # typing.TYPE_CHECKING, too
