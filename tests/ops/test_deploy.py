"""The container image recipe and the Kubernetes manifests (deploy/), validated offline.

Nothing here builds an image or talks to a cluster. Core kinds are validated against the
Kubernetes schemas that kubernetes-validate ships (strict: an unknown field is an error, as
the API server's strict field validation makes it); the custom resources against the real
CRD schemas copied into tests/data/k8s-crds/, made strict the same way. Then the files are
checked against each other and against the daemon: probe paths and ports against the
config in the ConfigMap (parsed by the project's own loader), the grace period against the
daemon's longest stop, GPUs against tensor parallelism, the PrometheusRule and ConfigMaps
against their sources.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from exporter.config import Config, load_config, parse_config
from tests.harness.daemon_timing import longest_loop_stall_s, longest_stop_s

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
DOCKERFILE = DEPLOY / "container" / "Dockerfile"
CONTAINER_CONFIG = DEPLOY / "container" / "config.toml"
LWS_ENTRYPOINT = DEPLOY / "container" / "sglang-sentinel-lws"
MANIFESTS = DEPLOY / "kubernetes"
GROUP_CONFIG = MANIFESTS / "multi-node" / "config.toml"
RULES = REPO / "alerts" / "sglang-sentinel.rules.yml"
GENERATOR = REPO / "scripts" / "gen-manifests"
CRDS = Path(__file__).resolve().parents[1] / "data" / "k8s-crds"
SHARED_CRDS = REPO.parent / "shared" / "reference" / "k8s-crds"

# The oldest Kubernetes the manifests promise to work on (kubernetes-validate ships 1.25+).
KUBERNETES_VERSION = "1.33.0"
CONFIG_PATH = "/etc/sglang-sentinel/config.toml"  # the image's ENTRYPOINT --config
DEFAULT_TERMINATION_LOG = "/dev/termination-log"  # paths.termination_log's default
LIVENESS, READINESS = "/healthz", "/readyz"
MARGIN_S = 10.0
EXPECTED_KINDS = {
    "ConfigMap": 2,
    "PersistentVolumeClaim": 1,
    "Deployment": 1,
    "LeaderWorkerSet": 1,
    "Service": 2,
    "PodMonitor": 1,
    "PrometheusRule": 1,
}


# --- reading the files -------------------------------------------------------------------------


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys; kubectl rejects the file. So do we."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml_documents(path: Path, loader: type = _UniqueKeyLoader) -> list[dict]:
    with path.open(encoding="utf-8") as handle:
        return [doc for doc in yaml.load_all(handle, Loader=loader) if doc is not None]


@cache
def manifests() -> tuple[tuple[str, dict], ...]:
    """(file relative to deploy/kubernetes, document) for every document of every manifest."""
    found = []
    for path in sorted(MANIFESTS.rglob("*.yaml")):
        for doc in load_yaml_documents(path):
            found.append((str(path.relative_to(MANIFESTS)), doc))
    return tuple(found)


def the(kind: str, name: str | None = None) -> dict:
    docs = [d for _, d in manifests() if d["kind"] == kind]
    if name is not None:
        docs = [d for d in docs if d["metadata"]["name"] == name]
    assert len(docs) == 1, f"expected one {kind} {name or ''}, found {len(docs)}"
    return copy.deepcopy(docs[0])


@dataclass(frozen=True)
class Instruction:
    line: int
    keyword: str
    value: str


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions with continuation lines joined; refuses the syntax it does not know."""
    instructions = []
    pending: str | None = None
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#") or (pending is None and not stripped):
            continue  # comments, also inside a continued instruction (as Docker reads them)
        assert "<<" not in stripped, f"Dockerfile:{number}: heredocs are not understood here"
        if pending is None:
            pending, start = "", number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        keyword, _, value = (pending + stripped).partition(" ")
        instructions.append(Instruction(start, keyword.upper(), value.strip()))
        pending = None
    assert pending is None, "the Dockerfile ends inside a continued instruction"
    return instructions


def dockerfile(keyword: str) -> list[Instruction]:
    return [i for i in parse_dockerfile(DOCKERFILE.read_text()) if i.keyword == keyword]


def exec_form(instruction: Instruction) -> list[str]:
    value = json.loads(instruction.value)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), instruction
    return value


# --- the LeaderWorkerSet rank entrypoint, run for real ------------------------------------------


@dataclass(frozen=True)
class EntrypointRun:
    result: subprocess.CompletedProcess[str]
    pid: int
    config: Path
    recorded: list[str] | None  # the stub daemon's pid and arguments, if it ran


def run_lws_entrypoint(
    tmp_path: Path, template: str, lws_env: dict[str, str], *args: str
) -> EntrypointRun:
    """Runs deploy/container/sglang-sentinel-lws with a stub `sglang-sentinel` on PATH that
    records its pid and arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stub = bin_dir / "sglang-sentinel"
    stub.write_text('#!/bin/sh\nprintf "%s\\n" "$$" "$@" > "$STUB_RECORD"\n')
    stub.chmod(0o755)
    template_path = tmp_path / "template.toml"
    template_path.write_text(template)
    record = tmp_path / "record"
    record.unlink(missing_ok=True)
    config = tmp_path / "run" / "config.toml"
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "SGLANG_SENTINEL_CONFIG_TEMPLATE": str(template_path),
        "SGLANG_SENTINEL_CONFIG": str(config),
        "STUB_RECORD": str(record),
        **lws_env,
    }
    with subprocess.Popen(
        [str(LWS_ENTRYPOINT), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        stdout, stderr = process.communicate(timeout=30)
    result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    recorded = record.read_text().splitlines() if record.exists() else None
    return EntrypointRun(result, process.pid, config, recorded)


def lws_env(size: int, index: int) -> dict[str, str]:
    return {
        "LWS_GROUP_SIZE": str(size),
        "LWS_WORKER_INDEX": str(index),
        "LWS_LEADER_ADDRESS": "deepseek-r1-0.deepseek-r1.default",
    }


# --- the workloads, with the config each one runs ----------------------------------------------


@dataclass(frozen=True)
class Workload:
    name: str
    pod: dict  # the pod template: metadata and spec
    config: Config  # as the daemon in that pod loads it
    raw_config: dict  # the same, as TOML (keys the loader of this branch may not know yet)
    pods_per_server: int  # 1, or the group's size
    state_claims: frozenset[str]  # volume names backed by a PersistentVolumeClaim
    serves_api: bool  # SGLang's API is reached here (not on a worker rank)

    @property
    def container(self) -> dict:
        (container,) = self.pod["spec"]["containers"]
        return container


def config_map_text(pod: dict) -> str:
    (volume,) = [v for v in pod["spec"]["volumes"] if "configMap" in v]
    config_map = the("ConfigMap", volume["configMap"]["name"])
    return config_map["data"]["config.toml"]


def single_node() -> Workload:
    deployment = the("Deployment")
    pod = deployment["spec"]["template"]
    text = config_map_text(pod)
    claims = frozenset(v["name"] for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v)
    return Workload(
        deployment["metadata"]["name"],
        pod,
        parse_config(text, "<configmap>"),
        tomllib.loads(text),
        1,
        claims,
        serves_api=True,
    )


def group_ranks(tmp_path: Path) -> list[Workload]:
    """The leader and a worker, each with the config sglang-sentinel-lws renders for it."""
    lws = the("LeaderWorkerSet")
    template = lws["spec"]["leaderWorkerTemplate"]
    size = template["size"]
    claims = frozenset(t["metadata"]["name"] for t in template["volumeClaimTemplates"])
    ranks = []
    for index, key in ((0, "leaderTemplate"), (size - 1, "workerTemplate")):
        pod = template[key]
        directory = tmp_path / key
        directory.mkdir()
        run = run_lws_entrypoint(directory, config_map_text(pod), lws_env(size, index))
        assert run.result.returncode == 0, run.result.stderr
        ranks.append(
            Workload(
                f"{lws['metadata']['name']} {key}",
                pod,
                load_config(run.config),
                tomllib.loads(run.config.read_text()),
                size,
                claims,
                serves_api=index == 0,
            )
        )
    return ranks


@pytest.fixture
def workloads(tmp_path: Path) -> list[Workload]:
    return [single_node(), *group_ranks(tmp_path)]


def port_number(container: dict, port: int | str) -> int:
    if isinstance(port, int):
        return port
    (number,) = [p["containerPort"] for p in container.get("ports", []) if p.get("name") == port]
    return number


# --- schemas -----------------------------------------------------------------------------------


def strict(schema: Any) -> Any:
    """A CRD's OpenAPI schema with unknown fields rejected wherever Kubernetes would prune or
    (with strict field validation, kubectl's default) reject them."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@cache
def crd_validators() -> dict[tuple[str, str], jsonschema.protocols.Validator]:
    """(apiVersion, kind) -> a validator for every served version of every copied CRD."""
    validators = {}
    for path in sorted(CRDS.glob("*.yaml")):
        # Upstream's files, read fast (the LWS CRD is 18,000 lines; libyaml is 10x quicker).
        (crd,) = load_yaml_documents(path, getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version.get("served"):
                # OpenAPI v3 schemas are JSON Schema but for a few keywords jsonschema ignores
                # (nullable, x-kubernetes-*). Not checked against the metaschema: some patterns
                # are Go's regular expressions, which Python's do not all compile; only those
                # of the fields a manifest sets are used.
                schema = strict(version["schema"]["openAPIV3Schema"])
                api_version = f"{group}/{version['name']}"
                validators[(api_version, kind)] = jsonschema.Draft202012Validator(schema)
    return validators


def validate(doc: dict) -> None:
    """Raises on a manifest that its schema (core or CRD) rejects."""
    key = (doc["apiVersion"], doc["kind"])
    if key in crd_validators():
        crd_validators()[key].validate(doc)
    else:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def as_pod_template(name: str, pod: dict) -> dict:
    """A LeaderWorkerSet's pod template as a core PodTemplate, for the core schema."""
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name}, "template": pod}


# --- every manifest validates ------------------------------------------------------------------


def test_the_manifests_are_the_expected_kinds() -> None:
    kinds: dict[str, int] = {}
    for _, doc in manifests():
        kinds[doc["kind"]] = kinds.get(doc["kind"], 0) + 1
    assert kinds == EXPECTED_KINDS


@pytest.mark.parametrize(
    ("where", "doc"),
    [(f"{path}: {d['kind']} {d['metadata']['name']}", d) for path, d in manifests()],
)
def test_manifest_validates_against_its_schema(where: str, doc: dict) -> None:
    validate(doc)


def test_group_pod_templates_validate_as_core_pod_templates() -> None:
    """The CRD copies the pod schema of its own Kubernetes release; check them against ours."""
    template = the("LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    for key in ("leaderTemplate", "workerTemplate"):
        kubernetes_validate.validate(
            as_pod_template(key.lower(), template[key]), KUBERNETES_VERSION, strict=True
        )


@pytest.mark.parametrize(
    ("kind", "edit"),
    [
        # A misspelt field in each kind of schema: core, core inside a CRD, CRD's own.
        ("Deployment", lambda d: d["spec"]["template"]["spec"]["containers"][0].update(
            livenesProbe={"httpGet": {"path": LIVENESS, "port": "metrics"}})),
        ("Service", lambda d: d["spec"]["ports"][0].update(port="thirty")),
        ("LeaderWorkerSet", lambda d: d["spec"]["leaderWorkerTemplate"].update(sizes=2)),
        ("LeaderWorkerSet", lambda d: d["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
            ["containers"][0].update(termintionMessagePath="/dev/termination-log")),
        ("LeaderWorkerSet", lambda d: d["spec"].update(startupPolicy="LeaderStarted")),
        ("PodMonitor", lambda d: d["spec"]["podMetricsEndpoints"][0].update(prot="metrics")),
        ("PrometheusRule", lambda d: d["spec"]["groups"][0]["rules"][0].update(fro="5m")),
    ],
)  # fmt: skip
def test_validation_rejects_a_broken_manifest(kind: str, edit) -> None:
    """Why the test above means something: each schema, made strict, catches a typo."""
    (doc,) = [copy.deepcopy(d) for _, d in manifests() if d["kind"] == kind][:1]
    edit(doc)
    with pytest.raises(jsonschema.ValidationError):
        validate(doc)


def test_duplicate_keys_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text("kind: Service\nkind: Pod\n")
    with pytest.raises(yaml.constructor.ConstructorError, match="duplicate key 'kind'"):
        load_yaml_documents(path)


def test_validation_needs_no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    def refuse(*args, **kwargs):
        raise AssertionError("a schema was fetched from the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    crd_validators.cache_clear()
    for _, doc in manifests():
        validate(doc)


def test_crd_copies_equal_the_shared_reference() -> None:
    if not SHARED_CRDS.is_dir():
        pytest.skip(f"no shared reference at {SHARED_CRDS} to compare the copies with")
    for path in sorted(CRDS.glob("*.yaml")):
        assert path.read_bytes() == (SHARED_CRDS / path.name).read_bytes(), path.name


# --- generated manifests -----------------------------------------------------------------------


def gen_manifests(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(GENERATOR), *map(str, args)], capture_output=True, text=True, timeout=60
    )


def test_generated_manifests_are_up_to_date() -> None:
    result = gen_manifests("--check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_generator_check_fails_when_the_rules_change(tmp_path: Path) -> None:
    for relative in (
        "alerts/sglang-sentinel.rules.yml",
        "deploy/container/config.toml",
        "deploy/kubernetes/multi-node/config.toml",
        "deploy/kubernetes/monitoring/prometheusrule.yaml",
        "deploy/kubernetes/single-node/configmap.yaml",
        "deploy/kubernetes/multi-node/configmap.yaml",
    ):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / relative, tmp_path / relative)
    assert gen_manifests("--check", "--root", tmp_path).returncode == 0
    rules = tmp_path / "alerts" / "sglang-sentinel.rules.yml"
    rules.write_text(rules.read_text().replace("\n        for: 5m\n", "\n        for: 6m\n", 1))
    result = gen_manifests("--check", "--root", tmp_path)
    assert result.returncode == 1
    assert "deploy/kubernetes/monitoring/prometheusrule.yaml" in result.stderr
    assert re.search(r"^\+ +for: 6m$", result.stdout, re.MULTILINE), result.stdout


def test_prometheus_rule_holds_exactly_the_rules_file() -> None:
    rules = load_yaml_documents(RULES)[0]
    assert the("PrometheusRule")["spec"] == {"groups": rules["groups"]}


@pytest.mark.parametrize(
    ("config_map", "source"),
    [("qwen3-8b-sentinel-config", CONTAINER_CONFIG), ("deepseek-r1-sentinel-config", GROUP_CONFIG)],
)
def test_config_maps_hold_exactly_their_config(config_map: str, source: Path) -> None:
    text = the("ConfigMap", config_map)["data"]["config.toml"]
    assert text == source.read_text()
    parse_config(text, f"<ConfigMap {config_map}>")  # the daemon's loader accepts it


# --- the image ---------------------------------------------------------------------------------


def test_image_is_the_official_sglang_image_pinned_by_tag() -> None:
    (base,) = dockerfile("FROM")  # one stage: nothing built elsewhere is copied in
    assert "$" not in base.value, "the base image must be written out, not an ARG"
    image, _, tag = base.value.partition(":")
    assert image == "lmsysorg/sglang"
    assert re.fullmatch(r"v0\.5\.\d+(\.post\d+)?(-[a-z0-9]+)*", tag), tag
    assert "latest" not in tag


def test_entrypoint_is_the_daemon_in_exec_form() -> None:
    (entrypoint,) = dockerfile("ENTRYPOINT")
    assert exec_form(entrypoint) == ["sglang-sentinel", "run", "--config", CONFIG_PATH]
    assert not dockerfile("CMD"), "arguments belong to the ENTRYPOINT; CMD would be appended"
    (signal,) = dockerfile("STOPSIGNAL")
    assert signal.value == "SIGTERM"


def test_image_installs_the_project_and_the_rank_entrypoint() -> None:
    copies = [i.value.split() for i in dockerfile("COPY")]
    sources = {source for *sources, _ in copies for source in sources}
    assert {"pyproject.toml", "exporter", "deploy/container/sglang-sentinel-lws"} <= sources
    for source in sources:
        assert (REPO / source).exists(), source
    assert any("pip install" in i.value and "/tmp/sglang-sentinel" in i.value
               for i in dockerfile("RUN"))  # fmt: skip
    (lws,) = [c for c in copies if c[0] == "deploy/container/sglang-sentinel-lws"]
    assert lws[-1] == "/usr/local/bin/sglang-sentinel-lws"  # on PATH: the manifest's command
    assert os.access(LWS_ENTRYPOINT, os.X_OK)


def test_build_context_keeps_what_the_image_copies() -> None:
    """.dockerignore excludes everything, then lets the copied sources back in."""
    lines = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()]
    patterns = [line for line in lines if line and not line.startswith("#")]
    assert patterns[0] == "*"
    allowed = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    for instruction in dockerfile("COPY"):
        *sources, _ = instruction.value.split()
        for source in sources:
            path = PurePosixPath(source)
            assert any(path == PurePosixPath(a) or PurePosixPath(a) in path.parents
                       for a in allowed), source  # fmt: skip


def test_image_ports_volumes_and_health_check_match_the_container_config() -> None:
    config = load_config(CONTAINER_CONFIG)
    (expose,) = dockerfile("EXPOSE")
    assert {int(p) for p in expose.value.split()} == {
        config.sglang.args["port"],
        config.metrics.port,
    }
    (volume,) = dockerfile("VOLUME")
    assert set(exec_form(volume)) == {str(config.paths.state_dir), str(config.paths.log_dir)}
    (health,) = dockerfile("HEALTHCHECK")
    _, _, command = health.value.partition(" CMD ")
    url = re.search(r"http://127\.0\.0\.1:(\d+)(/\w+)", " ".join(json.loads(command)))
    assert url and (int(url.group(1)), url.group(2)) == (config.metrics.port, LIVENESS)


def test_container_config_listens_where_the_pod_can_be_reached() -> None:
    config = load_config(CONTAINER_CONFIG)
    assert config.metrics.host == "0.0.0.0"
    assert config.sglang.args["host"] == "0.0.0.0"
    assert config.sglang.python == "python3"  # the image's Python, where SGLang is


def test_manifests_run_the_image_this_recipe_builds() -> None:
    """The tag says which daemon and which SGLang: 0.1.0-sglang0.5.5.post3."""
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    (base,) = dockerfile("FROM")
    sglang = re.match(r"v(\d+\.\d+\.\d+(?:\.post\d+)?)", base.value.partition(":")[2])[1]
    expected = f"sglang-sentinel:{version}-sglang{sglang}"
    images = {c["image"] for _, doc in manifests() for c in _pod_containers(doc)}
    assert images == {expected}
    assert expected in DOCKERFILE.read_text()  # the build command in its header


def _pod_containers(doc: dict) -> list[dict]:
    if doc["kind"] == "Deployment":
        return doc["spec"]["template"]["spec"]["containers"]
    if doc["kind"] == "LeaderWorkerSet":
        template = doc["spec"]["leaderWorkerTemplate"]
        return [c for key in ("leaderTemplate", "workerTemplate")
                for c in template[key]["spec"]["containers"]]  # fmt: skip
    return []


# --- the rank entrypoint -----------------------------------------------------------------------


def test_lws_entrypoint_renders_the_rank_and_becomes_the_daemon(tmp_path: Path) -> None:
    run = run_lws_entrypoint(
        tmp_path, GROUP_CONFIG.read_text(), lws_env(4, 3), "--log-level", "DEBUG"
    )
    assert run.result.returncode == 0, run.result.stderr
    pid, *argv = run.recorded
    assert int(pid) == run.pid  # exec: the daemon replaced the shell (PID 1 in a pod)
    assert argv == ["run", "--config", str(run.config), "--log-level", "DEBUG"]
    args = load_config(run.config).sglang.args
    assert (args["nnodes"], args["node-rank"]) == (4, 3)  # numbers, not strings
    assert args["dist-init-addr"] == "deepseek-r1-0.deepseek-r1.default:20000"
    assert "@LWS_" not in run.config.read_text()


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("LWS_GROUP_SIZE", None),
        ("LWS_GROUP_SIZE", "2x"),
        ("LWS_WORKER_INDEX", "-1"),
        ("LWS_LEADER_ADDRESS", "leader/evil"),
        ("LWS_LEADER_ADDRESS", ""),
    ],
)
def test_lws_entrypoint_refuses_a_bad_variable(
    tmp_path: Path, variable: str, value: str | None
) -> None:
    env = lws_env(2, 1)
    if value is None:
        del env[variable]
    else:
        env[variable] = value
    run = run_lws_entrypoint(tmp_path, GROUP_CONFIG.read_text(), env)
    assert run.result.returncode == 64
    assert variable in run.result.stderr
    assert run.recorded is None  # the daemon never started


def test_lws_entrypoint_refuses_a_placeholder_it_cannot_fill(tmp_path: Path) -> None:
    template = GROUP_CONFIG.read_text().replace('"@LWS_GROUP_SIZE@"', "@LWS_GROUP_SIZE@ # x")
    run = run_lws_entrypoint(tmp_path, template, lws_env(2, 0))
    assert run.result.returncode == 64
    assert "placeholders left" in run.result.stderr
    assert run.recorded is None
    assert list(run.config.parent.iterdir()) == []  # nothing half-rendered left behind


@pytest.mark.parametrize("config", [CONTAINER_CONFIG, GROUP_CONFIG], ids=lambda p: p.name)
def test_check_config_accepts_the_deployed_configs(config: Path) -> None:
    """What the README tells an operator to run before deploying."""
    result = subprocess.run(
        [sys.executable, "-m", "exporter.cli", "check-config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{config}: valid")


def test_group_template_is_valid_as_it_is() -> None:
    """check-config reads the ConfigMap's template before any rank renders it."""
    args = load_config(GROUP_CONFIG).sglang.args
    assert args["nnodes"] == "@LWS_GROUP_SIZE@"
    assert args["node-rank"] == "@LWS_WORKER_INDEX@"


# --- the workloads agree with the daemon's config ----------------------------------------------


def test_probes_are_the_daemon_s_own_endpoints(workloads: list[Workload]) -> None:
    for workload in workloads:
        container = workload.container
        probes = {
            kind: container[f"{kind}Probe"]["httpGet"]
            for kind in ("startup", "liveness", "readiness")
        }
        assert {kind: probe["path"] for kind, probe in probes.items()} == {
            "startup": LIVENESS,
            "liveness": LIVENESS,
            "readiness": READINESS,
        }, workload.name
        for kind, probe in probes.items():
            # Never SGLang's port (its /health fails during long loads and prefills).
            assert port_number(container, probe["port"]) == workload.config.metrics.port, kind
        assert workload.config.metrics.host == "0.0.0.0", "the kubelet probes the pod's IP"


def test_probe_windows_outlast_the_daemon_s_longest_stall(workloads: list[Workload]) -> None:
    """Liveness may fail only once the main loop has been stuck longer than it ever blocks
    on purpose (stopping SGLang and waiting for its port before a relaunch)."""
    for workload in workloads:
        stall = longest_loop_stall_s(workload.config.policy.stop_grace_s)
        for kind in ("startup", "liveness"):
            probe = workload.container[f"{kind}Probe"]
            window = probe["periodSeconds"] * probe["failureThreshold"]
            assert window >= stall + MARGIN_S, (workload.name, kind, window, stall)
        for kind in ("startup", "liveness", "readiness"):
            probe = workload.container[f"{kind}Probe"]
            assert probe.get("timeoutSeconds", 1) < probe["periodSeconds"], (workload.name, kind)


def test_grace_period_outlasts_the_daemon_s_stop(workloads: list[Workload]) -> None:
    for workload in workloads:
        grace = workload.pod["spec"]["terminationGracePeriodSeconds"]
        needed = longest_stop_s(workload.config.policy.stop_grace_s)
        assert grace >= needed + MARGIN_S, (workload.name, grace, needed)
        assert grace > workload.config.policy.stop_grace_s + MARGIN_S


def test_sglang_port_is_the_container_s_and_the_service_s(workloads: list[Workload]) -> None:
    for workload in workloads:
        ports = {p["name"]: p["containerPort"] for p in workload.container["ports"]}
        if workload.serves_api:
            assert ports["http"] == workload.config.sglang.args["port"], workload.name
        else:
            assert "http" not in ports, workload.name
    single = the("Service", "qwen3-8b")
    assert single["spec"]["ports"][0]["targetPort"] == "http"
    assert _selects(single["spec"]["selector"], the("Deployment")["spec"]["template"])
    leader = the("Service", "deepseek-r1-api")
    lws = the("LeaderWorkerSet")
    assert leader["spec"]["selector"] == {
        "leaderworkerset.sigs.k8s.io/name": lws["metadata"]["name"],
        "leaderworkerset.sigs.k8s.io/worker-index": "0",  # set by LWS on the leader
    }
    assert leader["metadata"]["name"] != lws["metadata"]["name"], "LWS's headless Service"
    leader_pod = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    (container,) = leader_pod["spec"]["containers"]
    assert port_number(container, leader["spec"]["ports"][0]["targetPort"]) == 30000


def _selects(selector: dict[str, str], pod: dict) -> bool:
    labels = pod["metadata"]["labels"]
    return all(labels.get(key) == value for key, value in selector.items())


def test_gpus_match_tensor_parallelism(workloads: list[Workload]) -> None:
    for workload in workloads:
        gpus = int(workload.container["resources"]["limits"]["nvidia.com/gpu"])
        tp = int(workload.config.sglang.args.get("tp-size", 1))
        assert gpus * workload.pods_per_server == tp, workload.name


def test_shared_memory_is_a_memory_backed_volume(workloads: list[Workload]) -> None:
    for workload in workloads:
        (mount,) = [m for m in workload.container["volumeMounts"] if m["mountPath"] == "/dev/shm"]
        (volume,) = [v for v in workload.pod["spec"]["volumes"] if v["name"] == mount["name"]]
        assert volume["emptyDir"]["medium"] == "Memory"
        assert "sizeLimit" in volume["emptyDir"], "bounded: it counts as the pod's memory"


def test_termination_message_is_where_the_daemon_writes_it(workloads: list[Workload]) -> None:
    for workload in workloads:
        configured = workload.raw_config.get("paths", {}).get(
            "termination_log", DEFAULT_TERMINATION_LOG
        )
        assert workload.container["terminationMessagePath"] == configured
        assert workload.container["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_config_and_state_are_mounted_where_the_daemon_reads_them(
    workloads: list[Workload],
) -> None:
    for workload in workloads:
        mounts = {m["mountPath"]: m for m in workload.container["volumeMounts"]}
        config_dir = str(PurePosixPath(CONFIG_PATH).parent)
        config_volume = mounts[config_dir]["name"]
        (volume,) = [v for v in workload.pod["spec"]["volumes"] if v["name"] == config_volume]
        assert "configMap" in volume, workload.name
        assert mounts[config_dir].get("readOnly") is True
        assert "subPath" not in mounts[config_dir], "a subPath mount never sees an update"
        for directory in (workload.config.paths.state_dir, workload.config.paths.log_dir):
            mount = mounts[str(directory)]
            assert mount["name"] in workload.state_claims, (workload.name, directory)


def test_single_node_runs_the_image_s_entrypoint_and_groups_the_rank_script() -> None:
    (deployment_container,) = the("Deployment")["spec"]["template"]["spec"]["containers"]
    assert "command" not in deployment_container and "args" not in deployment_container
    template = the("LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    for key in ("leaderTemplate", "workerTemplate"):
        (container,) = template[key]["spec"]["containers"]
        assert container["command"] == [LWS_ENTRYPOINT.name]
    # The script's default template path is where the ConfigMap is mounted.
    assert f":-{CONFIG_PATH}}}" in LWS_ENTRYPOINT.read_text()


def test_pods_do_not_get_service_variables(workloads: list[Workload]) -> None:
    """A Service named sglang would put SGLANG_PORT=tcp://... into SGLang's environment."""
    for workload in workloads:
        assert workload.pod["spec"]["enableServiceLinks"] is False


def test_single_node_never_runs_two_pods_at_once() -> None:
    spec = the("Deployment")["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"]["type"] == "Recreate"


# --- the multi-node group ----------------------------------------------------------------------


def test_group_is_recreated_when_a_rank_exits(workloads: list[Workload]) -> None:
    spec = the("LeaderWorkerSet")["spec"]
    template = spec["leaderWorkerTemplate"]
    assert template["restartPolicy"] == "RecreateGroupOnPodRestart"
    # The leader is ready only once every worker joined: LeaderReady would never start them.
    assert spec.get("startupPolicy", "LeaderCreated") == "LeaderCreated"
    for rank in workloads[1:]:
        assert rank.config.sglang.args["nnodes"] == template["size"]
        # A rank exits on failure (the default with nnodes > 1); relaunching in place would
        # leave the other ranks blocked on the old NCCL group.
        assert rank.raw_config.get("policy", {}).get("group", "exit") == "exit"
        assert rank.pod["spec"].get("restartPolicy", "Always") == "Always"


def test_leader_and_worker_templates_differ_only_in_the_api_port() -> None:
    template = the("LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    leader, worker = template["leaderTemplate"], template["workerTemplate"]
    assert leader["metadata"]["labels"].pop("app.kubernetes.io/component") == "leader"
    assert worker["metadata"]["labels"].pop("app.kubernetes.io/component") == "worker"
    (leader_container,) = leader["spec"]["containers"]
    api = [p for p in leader_container["ports"] if p["name"] == "http"]
    assert len(api) == 1
    leader_container["ports"].remove(api[0])
    assert leader == worker


# --- monitoring --------------------------------------------------------------------------------


def test_pod_monitor_scrapes_every_daemon_as_the_rules_job() -> None:
    monitor = the("PodMonitor")["spec"]
    exprs = [r["expr"] for g in load_yaml_documents(RULES)[0]["groups"] for r in g["rules"]]
    jobs = {job for expr in exprs for job in re.findall(r'job="([^"]+)"', expr)}
    assert len(jobs) == 1, jobs
    pods = [the("Deployment")["spec"]["template"]] + [
        the("LeaderWorkerSet")["spec"]["leaderWorkerTemplate"][key]
        for key in ("leaderTemplate", "workerTemplate")
    ]
    (endpoint,) = monitor["podMetricsEndpoints"]
    assert endpoint["path"] == "/metrics"
    for pod in pods:
        assert _selects(monitor["selector"]["matchLabels"], pod)
        # The job name is the value of the pod label jobLabel names.
        assert {pod["metadata"]["labels"][monitor["jobLabel"]]} == jobs
        (container,) = pod["spec"]["containers"]
        assert any(p["name"] == endpoint["port"] for p in container["ports"])


def test_pod_monitor_relabels_lws_pod_labels_that_exist() -> None:
    (endpoint,) = the("PodMonitor")["spec"]["podMetricsEndpoints"]
    prefix = "__meta_kubernetes_pod_label_"
    lws_labels = ("leaderworkerset.sigs.k8s.io/name", "leaderworkerset.sigs.k8s.io/group-index",
                  "leaderworkerset.sigs.k8s.io/worker-index")  # fmt: skip
    # Prometheus' meta label for a pod label: every character outside [a-zA-Z0-9_] is "_".
    expected = {prefix + re.sub(r"[^a-zA-Z0-9_]", "_", label) for label in lws_labels}
    sources = {s for r in endpoint["relabelings"] for s in r["sourceLabels"]}
    assert sources == expected
