"""The alerting rules, their promtool tests, the runbooks and the example Alertmanager config.

promtool, amtool and Alertmanager run for real (./dev test installs them). PyYAML is not a
dependency: the YAML files are read with small line scans that rely on the files' own
conventions, and each scan is cross-checked (the rule count against promtool's).
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from exporter.attempt.snapshot import Snapshot
from exporter.attempt.states import ServerState
from exporter.metrics import families
from exporter.telemetry.gpu import GpuSnapshot, gpu_families
from exporter.telemetry.health import CollectorHealth
from tests.harness.metric_names import EXPORTED_METRICS

ALERTS = Path(__file__).resolve().parents[2] / "alerts"
RULES = ALERTS / "sglang-sentinel.rules.yml"
RULE_TESTS = ALERTS / "tests" / "sglang-sentinel.test.yml"
ALERTMANAGER = ALERTS / "alertmanager.example.yml"
RUNBOOKS = ALERTS / "runbooks"
RUNBOOK_PREFIX = "https://github.com/sglang-sentinel/sglang-sentinel/blob/main/alerts/runbooks/"

SEVERITIES = {"critical", "warning", "info"}
RUNBOOK_SECTIONS = ("## Meaning", "## Impact", "## Diagnosis", "## Mitigation")
DAEMON_COMMAND = re.compile(r"sglang-sentinel (history|classify|plan|check-config)\b")

REQUIRED_ALERTS = {
    "SGLangSentinelServerDown",
    "SGLangSentinelCrashLooping",
    "SGLangSentinelGaveUp",
    "SGLangSentinelOnFallbackProfile",
    "SGLangSentinelStartupSlow",
    "SGLangSentinelHung",
    "SGLangSentinelHealthProbesFailing",
    "SGLangSentinelForeignGPUMemory",
    "SGLangSentinelGPUXidError",
    "SGLangSentinelCollectorFailing",
    "SGLangSentinelCollectorStale",
    "SGLangSentinelAbsent",
}

METRIC_NAME = re.compile(r"sglang_sentinel_[a-z_]+")
# The XIDs that must be critical (the rest of the critical list is the rules' choice).
MUST_BE_CRITICAL_XIDS = {"48", "63", "64", "74", "79", "94", "95"}


def _tool(*names: str) -> str:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    raise AssertionError(f"{names[0]} missing: ./dev test installs it (scripts/install-test-deps)")


def _run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(arg) for arg in args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
    )


# ----------------------------------------------------------------------------- the rules file


@dataclass
class Rule:
    alert: str
    line: int  # 1-based line of `- alert:`
    keys: dict[str, str] = field(default_factory=dict)  # key -> the text after "key:"
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)  # block scalars joined
    expr: str = ""
    comments: list[str] = field(default_factory=list)  # inside the rule and right above it


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _is_content(line: str) -> bool:
    return bool(line.strip()) and not line.lstrip().startswith("#")


def _value(text: str) -> str:
    """A plain or quoted scalar, its trailing comment dropped."""
    text = re.sub(r"\s+#.*$", "", text.strip())
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    return text


def parse_rules(text: str) -> list[Rule]:
    """The alerting rules of a file written in this repository's style: `- alert:` starts a
    rule, its keys one level deeper, labels and annotations one more, block scalars deeper."""
    lines = text.splitlines()
    rules = []
    for number, line in enumerate(lines):
        start = re.match(r"^( *)- alert: *(\S+) *$", line)
        if not start:
            continue
        rule = Rule(alert=start[2], line=number + 1)
        above = number - 1
        while above >= 0 and lines[above].lstrip().startswith("#"):
            rule.comments.append(lines[above].strip())
            above -= 1
        key_indent = len(start[1]) + 2
        section = key = None
        block: list[str] | None = None
        for body in lines[number + 1 :]:
            if _is_content(body) and _indent(body) < key_indent:
                break
            if not _is_content(body):
                if body.lstrip().startswith("#"):
                    rule.comments.append(body.strip())
                if block is not None:
                    block.append("")
                continue
            depth = _indent(body)
            if depth == key_indent:
                key, _, rest = body.strip().partition(":")
                rule.keys[key] = rest.strip()
                section, block = key, None
                if key == "expr" and rest.strip() in ("|", "|-", ">", ">-"):
                    block = []
                elif key == "expr":
                    rule.expr = _value(rest)
            elif depth == key_indent + 2 and section in ("labels", "annotations"):
                name, _, rest = body.strip().partition(":")
                target = rule.labels if section == "labels" else rule.annotations
                if rest.strip() in ("|", "|-", ">", ">-"):
                    target[name] = ""
                    block, key = [], name
                else:
                    target[name] = _value(rest)
                    block = None
            elif block is not None:
                block.append(body.strip())
                if section == "expr":
                    rule.expr = "\n".join(part for part in block if part)
                else:
                    (rule.labels if section == "labels" else rule.annotations)[key] = " ".join(
                        part for part in block if part
                    )
        rules.append(rule)
    return rules


@pytest.fixture(scope="module")
def rules_text() -> str:
    return RULES.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def rules(rules_text) -> list[Rule]:
    return parse_rules(rules_text)


def test_promtool_check_rules_passes_and_counts_every_rule(rules):
    done = _run(_tool("promtool"), "check", "rules", "--lint=all", "--lint-fatal", RULES)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FAILED" not in done.stdout + done.stderr, done.stdout + done.stderr
    # The line scan must see every rule promtool sees, or the checks below prove nothing.
    found = re.search(r"SUCCESS: (\d+) rules found", done.stdout)
    assert found, done.stdout
    assert int(found[1]) == len(rules)


def test_promtool_unit_tests_pass():
    done = _run(_tool("promtool"), "test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout, done.stdout + done.stderr


def test_every_required_alert_is_there(rules):
    assert {rule.alert for rule in rules} >= REQUIRED_ALERTS


def test_every_rule_has_severity_summary_description_and_runbook(rules):
    for rule in rules:
        where = f"{rule.alert} (line {rule.line})"
        assert rule.expr, where
        assert rule.labels.get("severity") in SEVERITIES, where
        assert rule.annotations.get("summary"), where
        assert "{{" not in rule.annotations["summary"], f"{where}: summary is a static headline"
        description = rule.annotations.get("description", "")
        assert DAEMON_COMMAND.search(description), f"{where}: description names no command"
        assert rule.annotations.get("runbook_url") == f"{RUNBOOK_PREFIX}{rule.alert}.md", where
        assert set(rule.annotations) == {"summary", "description", "runbook_url"}, where


def test_every_rule_explains_its_thresholds(rules):
    for rule in rules:
        assert rule.comments, f"{rule.alert} (line {rule.line}) has no comment saying why"


def test_each_runbook_exists_with_the_four_sections(rules):
    names = {rule.alert for rule in rules}
    assert {path.stem for path in RUNBOOKS.glob("*.md")} == names, "one runbook per alert"
    for name in names:
        text = (RUNBOOKS / f"{name}.md").read_text(encoding="utf-8")
        assert text.startswith(f"# {name}\n"), name
        positions = [text.find(f"\n{section}\n") for section in RUNBOOK_SECTIONS]
        assert all(p > 0 for p in positions), f"{name}: missing one of {RUNBOOK_SECTIONS}"
        assert positions == sorted(positions), f"{name}: sections out of order"
        diagnosis = text[positions[2] : positions[3]]
        assert DAEMON_COMMAND.search(diagnosis), f"{name}: Diagnosis uses no daemon command"
        assert "```" in diagnosis, f"{name}: Diagnosis shows no example"


def test_runbook_links_between_runbooks_resolve():
    for path in RUNBOOKS.glob("*.md"):
        for target in re.findall(r"\]\(([^)#]+\.md)\)", path.read_text(encoding="utf-8")):
            assert (path.parent / target).resolve().exists(), f"{path.name} -> {target}"


def test_metric_names_in_rules_and_tests_are_known(rules_text):
    for path, text in ((RULES, rules_text), (RULE_TESTS, RULE_TESTS.read_text("utf-8"))):
        unknown = set(METRIC_NAME.findall(text)) - EXPORTED_METRICS
        assert not unknown, f"{path.name}: {sorted(unknown)}"


def test_the_metric_names_are_what_the_collector_exports():
    """tests/harness/metric_names.py is exactly what the collector declares (GPU families included:
    the daemon adds them once NVML has been polled, so they are built here on their own)."""
    gpus = GpuSnapshot(taken_at=None, health=CollectorHealth(True, 0.0, None))
    exported = set()
    for family in families(Snapshot(state=ServerState.STOPPED)) + gpu_families(gpus):
        exported.add(family.exposed_name)
    assert exported - EXPORTED_METRICS == set(), "add them to tests/harness/metric_names.py"
    assert EXPORTED_METRICS - exported == set(), "no longer exported: tests/harness/metric_names.py"


def test_xid_critical_and_warning_lists_are_complementary(rules):
    xid_rules = [rule for rule in rules if rule.alert == "SGLangSentinelGPUXidError"]
    by_severity = {rule.labels["severity"]: rule.expr for rule in xid_rules}
    assert sorted(by_severity) == ["critical", "warning"], by_severity
    critical = re.search(r'xid=~"([0-9|]+)"', by_severity["critical"])
    warning = re.search(r'xid!~"([0-9|]+)"', by_severity["warning"])
    assert critical and warning, by_severity
    assert critical[1] == warning[1], "the warning rule must exclude exactly the critical XIDs"
    codes = critical[1].split("|")
    assert len(codes) == len(set(codes))
    assert set(codes) >= MUST_BE_CRITICAL_XIDS


def test_the_stale_alert_ignores_a_collector_that_never_succeeded(rules):
    (stale,) = [rule for rule in rules if rule.alert == "SGLangSentinelCollectorStale"]
    assert "collector_last_success_timestamp_seconds > 0" in stale.expr
    assert "A never-successful collector does not raise the stale alert" in RULE_TESTS.read_text(
        encoding="utf-8"
    )


def test_the_job_label_is_one_literal_only_the_absent_alert_uses(rules):
    """So that alerts/README.md's one sed renames the job everywhere it matters."""
    selectors = {}
    for rule in rules:
        for value in re.findall(r'\bjob\s*=~?\s*"([^"]*)"', rule.expr):
            selectors.setdefault(value, set()).add(rule.alert)
    assert selectors == {"sglang-sentinel": {"SGLangSentinelAbsent"}}


def test_the_fallback_for_can_be_overridden_with_one_substitution(rules_text, tmp_path):
    # The substitution alerts/README.md documents (sed -E, in Python's syntax).
    pattern = re.compile(r"^( *for: )[0-9]+[smh]( *# SGLangSentinelOnFallbackProfile:for)$", re.M)
    fast, count = pattern.subn(r"\g<1>0s\g<2>", rules_text)
    assert count == 1
    name = "SGLangSentinelOnFallbackProfile"

    def durations(text: str) -> dict[tuple[str, int], str | None]:
        return {
            (r.alert, i): _value(r.keys.get("for", "")) for i, r in enumerate(parse_rules(text))
        }

    before, after = durations(rules_text), durations(fast)
    changed = {key: after[key] for key in after if after[key] != before[key]}
    assert list(changed.values()) == ["0s"] and next(iter(changed))[0] == name
    path = tmp_path / "fast.rules.yml"
    path.write_text(fast, encoding="utf-8")
    done = _run(_tool("promtool"), "check", "rules", path)
    assert done.returncode == 0, done.stdout + done.stderr


# ------------------------------------------------------------------------ the promtool tests


def scan_cases(text: str) -> list[tuple[str, bool, int]]:
    """(alertname, fires?, line) for each alert_rule_test case. A case without an explicit
    `exp_alerts:` is an error: the file's convention says `exp_alerts: []` for "no alert"."""
    lines = text.splitlines()
    cases = []
    for number, line in enumerate(lines):
        named = re.match(r"^\s*(?:- )?alertname:\s*(\S+)\s*$", line)
        if not named:
            continue
        for following in range(number + 1, len(lines)):
            nxt = lines[following]
            if re.match(r"^\s*(?:- )?(alertname|eval_time):", nxt) or re.match(r"^  - ", nxt):
                raise AssertionError(f"line {number + 1}: case without exp_alerts")
            expected = re.match(r"^\s*exp_alerts:\s*(.*?)\s*$", nxt)
            if not expected:
                continue
            if expected[1] == "[]":
                cases.append((named[1], False, number + 1))
            else:
                assert expected[1] == "", f"line {following + 1}: write [] or a list"
                first = next(item for item in lines[following + 1 :] if item.strip())
                assert first.strip().startswith("- exp_labels:"), f"line {following + 2}"
                cases.append((named[1], True, number + 1))
            break
        else:
            raise AssertionError(f"line {number + 1}: case without exp_alerts")
    return cases


def test_every_alert_has_a_firing_and_a_silent_case(rules):
    cases = scan_cases(RULE_TESTS.read_text(encoding="utf-8"))
    alerts = {rule.alert for rule in rules}
    assert {name for name, _, _ in cases} <= alerts, "a case names an alert that does not exist"
    for alert in sorted(alerts):
        outcomes = {fires for name, fires, _ in cases if name == alert}
        assert outcomes == {True, False}, f"{alert}: firing and silent cases needed, has {outcomes}"


def test_every_severity_of_an_alert_is_tested_firing(rules):
    """An alert made of rules with different severities (the XIDs) fires at each of them."""
    text = RULE_TESTS.read_text(encoding="utf-8")
    for alert in {rule.alert for rule in rules}:
        severities = {rule.labels["severity"] for rule in rules if rule.alert == alert}
        if len(severities) > 1:
            for severity in severities:
                # Within one case: no line of another case in between.
                other_case = r"(?!\s*(?:- )?(?:alertname|eval_time):)"
                block = re.search(
                    rf"alertname: {alert}\n\s*exp_alerts:\n(?:{other_case}.*\n)*?"
                    rf"\s*- exp_labels:\n\s*severity: {severity}\n",
                    text,
                )
                assert block, f"{alert}: no firing case at severity {severity}"


# ---------------------------------------------------------------------------- Alertmanager


def test_amtool_accepts_the_example_config():
    done = _run(_tool("amtool"), "check-config", ALERTMANAGER)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


@pytest.mark.parametrize(
    ("severity", "receiver"),
    [("critical", "pager"), ("warning", "chat"), ("info", "ticket"), ("", "chat")],
)
def test_the_example_routes_each_severity(severity, receiver):
    labels = ["alertname=SGLangSentinelGaveUp", "instance=node-1:9464"]
    if severity:
        labels.append(f"severity={severity}")
    done = _run(
        _tool("amtool"), "config", "routes", "test", f"--config.file={ALERTMANAGER}", *labels
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == receiver


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def alertmanager(tmp_path_factory):
    binary = _tool("prometheus-alertmanager", "alertmanager")
    storage = tmp_path_factory.mktemp("alertmanager")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with open(storage / "log", "wb") as log:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={ALERTMANAGER}",
                f"--storage.path={storage}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--cluster.listen-address=",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            assert process.poll() is None, (storage / "log").read_text(errors="replace")
            assert time.monotonic() < deadline, "Alertmanager did not become ready"
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _alert(name: str, instance: str, severity: str, **labels: str) -> dict:
    return {"labels": {"alertname": name, "instance": instance, "severity": severity, **labels}}


def test_the_example_inhibitions_work_in_alertmanager(alertmanager):
    sent = [
        # GaveUp silences ServerDown, CrashLooping and StartupSlow of its own instance only.
        _alert("SGLangSentinelGaveUp", "node-1:9464", "critical", state="gave_up"),
        _alert("SGLangSentinelServerDown", "node-1:9464", "critical"),
        _alert("SGLangSentinelCrashLooping", "node-1:9464", "warning"),
        _alert("SGLangSentinelStartupSlow", "node-1:9464", "warning", state="starting"),
        # ...and the probes' staleness (nothing left to probe), not another collector's.
        _alert("SGLangSentinelCollectorStale", "node-1:9464", "warning", collector="probes"),
        _alert("SGLangSentinelCollectorStale", "node-1:9464", "warning", collector="gpu"),
        _alert("SGLangSentinelServerDown", "node-2:9464", "critical"),
        # Absent silences every other alert of its instance.
        _alert("SGLangSentinelAbsent", "node-3:9464", "critical", cause="scrape_failing"),
        _alert("SGLangSentinelHung", "node-3:9464", "critical"),
        _alert("SGLangSentinelCollectorFailing", "node-3:9464", "warning", collector="gpu"),
        # Hung silences HealthProbesFailing.
        _alert("SGLangSentinelHung", "node-4:9464", "critical"),
        _alert("SGLangSentinelHealthProbesFailing", "node-4:9464", "warning", probe="health"),
        # CollectorFailing silences CollectorStale of the same collector.
        _alert("SGLangSentinelCollectorFailing", "node-5:9464", "warning", collector="gpu"),
        _alert("SGLangSentinelCollectorStale", "node-5:9464", "warning", collector="gpu"),
        _alert("SGLangSentinelCollectorStale", "node-5:9464", "warning", collector="processes"),
        # A critical XID silences warning XIDs of the same GPU.
        _alert("SGLangSentinelGPUXidError", "node-6:9464", "critical", uuid="GPU-a", xid="79"),
        _alert("SGLangSentinelGPUXidError", "node-6:9464", "warning", uuid="GPU-a", xid="45"),
        _alert("SGLangSentinelGPUXidError", "node-6:9464", "warning", uuid="GPU-b", xid="13"),
    ]
    inhibited = {
        ("SGLangSentinelServerDown", "node-1:9464", ""),
        ("SGLangSentinelCrashLooping", "node-1:9464", ""),
        ("SGLangSentinelStartupSlow", "node-1:9464", ""),
        ("SGLangSentinelCollectorStale", "node-1:9464", "probes"),
        ("SGLangSentinelHung", "node-3:9464", ""),
        ("SGLangSentinelCollectorFailing", "node-3:9464", "gpu"),
        ("SGLangSentinelHealthProbesFailing", "node-4:9464", ""),
        ("SGLangSentinelCollectorStale", "node-5:9464", "gpu"),
        ("SGLangSentinelGPUXidError", "node-6:9464", "45"),
    }
    request = urllib.request.Request(
        f"{alertmanager}/api/v2/alerts",
        data=json.dumps(sent).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200

    def key(labels: dict) -> tuple[str, str, str]:
        return (
            labels["alertname"],
            labels["instance"],
            labels.get("collector") or labels.get("xid") or "",
        )

    with urllib.request.urlopen(f"{alertmanager}/api/v2/alerts", timeout=10) as answer:
        got = json.load(answer)
    assert len(got) == len(sent)
    states = {key(alert["labels"]): bool(alert["status"]["inhibitedBy"]) for alert in got}
    assert {k for k, muted in states.items() if muted} == inhibited
