"""The deployment files validate offline: the Kubernetes manifests against the API schemas
that ``kubernetes-validate`` ships (strict: an unknown field is an error), the compose file
against the compose specification's schema that ``check-jsonschema`` vendors; and they
agree with the code: the commands they run are ``memwarden`` commands, the variables they
set are ones domain/settings.py reads, every reference (secret, config map, selector,
scale target, dependency) names something defined."""

from __future__ import annotations

import argparse
import importlib.resources
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from memwarden.api.cli.main import build_parser

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SETTINGS_SOURCE = (DEPLOY.parent / "domain" / "settings.py").read_text()
K8S_VERSIONS = ("1.30.0", "1.37.0")  # the oldest cluster still served, and the newest schemas
PROBE_PATHS = {"livenessProbe": "/healthz", "readinessProbe": "/readyz"}


def _k8s_documents() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        found += [(path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return found


def _of_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for _name, doc in _k8s_documents() if doc["kind"] == kind]


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return loaded


MIGRATE = ["memwarden", "migrate"]


def _commands() -> set[str]:
    parser = build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def _assert_memwarden_command(command: list[str]) -> None:
    """``command`` is one the ``memwarden`` parser takes (it exits on anything else); the
    migration run is checked on its own (test_the_migration_command_is_registered)."""
    assert command[0] == "memwarden", command
    if command != MIGRATE:
        build_parser().parse_args(command[1:])


def _pod_specs() -> list[tuple[str, dict[str, Any]]]:
    return [
        (doc["metadata"]["name"], doc["spec"]["template"]["spec"])
        for doc in _of_kind("Deployment") + _of_kind("Job")
    ]


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_kubernetes_manifest_validates_strictly(version: str) -> None:
    documents = _k8s_documents()
    assert {doc["kind"] for _n, doc in documents} >= {
        "Namespace",
        "Secret",
        "ConfigMap",
        "Deployment",
        "Service",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "Job",
    }
    for name, doc in documents:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(
                f"{name} {doc['kind']}/{doc['metadata']['name']}: {error.message} at {list(error.path)}"
            )


def test_a_manifest_with_an_unknown_field_is_refused() -> None:
    """The validator is strict: a misspelt field fails, it is not ignored."""
    deployment = _of_kind("Deployment")[0]
    broken = json.loads(json.dumps(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["livenessProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSIONS[-1], strict=True)


def test_kubernetes_references_name_what_is_defined() -> None:
    names = {kind: {d["metadata"]["name"] for d in _of_kind(kind)} for kind in ("Secret", "ConfigMap")}
    deployments = {d["metadata"]["name"]: d for d in _of_kind("Deployment")}
    assert {d["metadata"]["namespace"] for _n, d in _k8s_documents() if d["kind"] != "Namespace"} == {
        _of_kind("Namespace")[0]["metadata"]["name"]
    }
    for owner, spec in _pod_specs():
        for container in spec["containers"]:
            for source in container["envFrom"]:
                kind, ref = (
                    ("ConfigMap", source["configMapRef"])
                    if "configMapRef" in source
                    else ("Secret", source["secretRef"])
                )
                assert ref["name"] in names[kind], (owner, ref)
    pod_labels = [d["spec"]["template"]["metadata"]["labels"] for d in deployments.values()]
    for selector_owner in _of_kind("Service") + _of_kind("PodDisruptionBudget"):
        spec = selector_owner["spec"]
        selector = (
            spec["selector"] if selector_owner["kind"] == "Service" else spec["selector"]["matchLabels"]
        )
        assert any(selector.items() <= labels.items() for labels in pod_labels), selector_owner["metadata"]
    for autoscaler in _of_kind("HorizontalPodAutoscaler"):
        assert autoscaler["spec"]["scaleTargetRef"]["name"] in deployments
    for deployment in deployments.values():
        assert deployment["spec"]["selector"]["matchLabels"].items() <= (
            deployment["spec"]["template"]["metadata"]["labels"].items()
        )


def test_the_api_pods_are_probed_on_healthz_and_readyz() -> None:
    api = next(d for d in _of_kind("Deployment") if d["metadata"]["name"] == "memwarden-api")
    container = api["spec"]["template"]["spec"]["containers"][0]
    for probe, path in PROBE_PATHS.items():
        assert container[probe]["httpGet"]["path"] == path
        assert container[probe]["httpGet"]["port"] in {"http", 8000}
    assert api["spec"]["replicas"] >= 2


def test_every_pod_runs_a_memwarden_command_and_the_job_migrates() -> None:
    for _owner, spec in _pod_specs():
        for container in spec["containers"]:
            _assert_memwarden_command(container["command"])
    (job,) = _of_kind("Job")
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == MIGRATE


def test_the_migration_command_is_registered() -> None:
    assert "migrate" in _commands()
    assert build_parser().parse_args(MIGRATE[1:]).command == "migrate"


def _variables_named() -> set[str]:
    found: set[str] = set()
    for doc in _of_kind("ConfigMap") + _of_kind("Secret"):
        found |= set((doc.get("data") or {}) | (doc.get("stringData") or {}))
    for service in _compose()["services"].values():
        found |= set(service.get("environment") or {})
    return found


def test_every_variable_set_is_one_the_settings_read() -> None:
    deploy_variables = {v for v in _variables_named() if not v.startswith("POSTGRES_")}
    assert {"DATABASE_URL", "REDIS_URL", "MEMWARDEN_KEK", "MEMWARDEN_SIGNING_KEY"} <= deploy_variables
    for variable in deploy_variables:
        assert re.search(rf'"{variable}"', SETTINGS_SOURCE), f"{variable} is not read by domain/settings.py"


def _compose_schema() -> dict[str, Any]:
    vendor = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    schema: dict[str, Any] = json.loads(vendor.joinpath("compose-spec.json").read_text())
    return schema


def test_the_compose_file_follows_the_compose_specification() -> None:
    schema = _compose_schema()
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(_compose()), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]
    broken = _compose()
    broken["services"]["api"]["restart_policy"] = "always"  # a misplaced key is refused
    assert list(validator.iter_errors(broken))


def test_the_compose_services_agree_with_each_other_and_the_code() -> None:
    compose = _compose()
    services = compose["services"]
    assert {"postgres", "redis", "migrate", "api", "worker"} <= set(services)
    assert services["postgres"]["image"].startswith("pgvector/pgvector:")
    for name in ("api", "worker"):
        assert services[name]["deploy"]["replicas"] == 2
    for name, service in services.items():
        assert service.get("restart"), name
        for dependency in service.get("depends_on") or {}:
            assert dependency in services, (name, dependency)
        for secret in service.get("secrets") or []:
            assert secret["source"] in compose["secrets"], (name, secret)
        if service.get("command", [""])[0] == "memwarden":
            _assert_memwarden_command(service["command"])
    for name in ("postgres", "redis", "api"):
        assert services[name]["healthcheck"]["test"], name
    assert "/readyz" in " ".join(services["api"]["healthcheck"]["test"])
    assert services["migrate"]["command"] == MIGRATE
    assert services["api"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def test_the_compose_secrets_land_where_the_service_loads_its_keys() -> None:
    """Without MEMWARDEN_KEK and MEMWARDEN_SIGNING_KEY the keys are read from
    ``$MEMWARDEN_DATA_DIR/keys`` (domain/ledger/keys.py): the secrets are mounted there."""
    keys_source = (DEPLOY.parent / "domain" / "ledger" / "keys.py").read_text()
    for name in ("api", "worker", "migrate"):
        service = _compose()["services"][name]
        data_dir = service["environment"]["MEMWARDEN_DATA_DIR"]
        targets = {Path(s["target"]) for s in service["secrets"]}
        assert targets == {Path(data_dir) / "keys" / "kek.key", Path(data_dir) / "keys" / "signing.pem"}
        for target in targets:
            assert f'"{target.name}"' in keys_source
