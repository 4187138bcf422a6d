"""Every rendered object passes schema validation: Kubernetes' own (kubernetes-validate, v1.32, strict) for the
built-in kinds, our CRDs' openAPIV3Schemas for our samples, the Gateway API's rules for the GatewayClass."""

from __future__ import annotations

import copy
import re
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.manifests.rendered import MANIFESTS, Object, name_of
from tests.needs import needs

pytestmark = needs("kubectl")

KUBERNETES_VERSION = "1.32.0"
"""The Kubernetes whose schemas the objects must pass (the kubectl version on our machines)."""
GATEWAY_CLASS_CONTROLLER = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/[A-Za-z0-9\/\-._~%!$&'()*+,;=:]+$"
)
"""The Gateway API's GatewayClass `spec.controllerName` pattern (its CRDs are not available offline)."""
SAMPLES = sorted((MANIFESTS / "samples").glob("*.yaml"))


def test_every_builtin_object_passes_kubernetes_strict_schema(overlay: list[Object]) -> None:
    """Every object of a built-in kind validates against v1.32's schema, unknown fields refused."""
    problems = []
    for obj in overlay:
        if obj["kind"] == "GatewayClass":
            continue
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            problems.append(f"{name_of(obj)}: {error.message} at {'.'.join(map(str, error.path))}")
    assert problems == []


def test_the_gateway_class_is_aethers(overlay: list[Object]) -> None:
    """GatewayClass `aether` names controller `gateway.aether.io/edge`, a valid controllerName."""
    [gateway_class] = [obj for obj in overlay if obj["kind"] == "GatewayClass"]
    assert gateway_class["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert "namespace" not in gateway_class["metadata"]  # cluster-scoped
    controller = gateway_class["spec"]["controllerName"]
    assert controller == "gateway.aether.io/edge"
    assert GATEWAY_CLASS_CONTROLLER.match(controller)
    assert len(controller) <= 253


def _crd_schemas(overlay: list[Object]) -> dict[tuple[str, str], dict[str, Any]]:
    """By (apiVersion, kind): each CRD version's openAPIV3Schema, as JSON Schema (x-kubernetes-* left to the
    validator, which ignores unknown keywords)."""
    schemas = {}
    for obj in overlay:
        if obj["kind"] != "CustomResourceDefinition":
            continue
        spec = obj["spec"]
        for version in spec["versions"]:
            schemas[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = version["schema"][
                "openAPIV3Schema"
            ]
    return schemas


def _refusal(schemas: dict[tuple[str, str], dict[str, Any]], document: Object) -> str | None:
    schema = schemas[(document["apiVersion"], document["kind"])]
    try:
        jsonschema.validate(document, schema, cls=jsonschema.Draft4Validator)
    except jsonschema.ValidationError as error:
        return f"{'.'.join(map(str, error.absolute_path))}: {error.message}"
    return None


def _samples() -> list[Object]:
    return [document for path in SAMPLES for document in yaml.safe_load_all(path.read_text()) if document]


def test_every_sample_passes_its_crds_schema(overlay: list[Object]) -> None:
    """Each sample object of manifests/samples validates against the schema of its CRD."""
    schemas = _crd_schemas(overlay)
    samples = _samples()
    assert sorted(sample["kind"] for sample in samples) == ["EdgeConfig", "MeshConfig"]
    assert [(name_of(sample), _refusal(schemas, sample)) for sample in samples] == [
        (name_of(sample), None) for sample in samples
    ]


def _changed(kind: str, path: str, value: Any) -> Object:
    sample = copy.deepcopy(next(sample for sample in _samples() if sample["kind"] == kind))
    *parents, leaf = path.split(".")
    target = sample
    for parent in parents:
        target = target[parent]
    target[leaf] = value
    return sample


@pytest.mark.parametrize(
    ("kind", "path", "value", "refused"),
    [
        (
            "MeshConfig",
            "spec.proxy.traceSampleRate",
            2,
            "spec.proxy.traceSampleRate: 2 is greater than the maximum of 1",
        ),
        ("MeshConfig", "spec.meshDomain", "Not_A_Domain", "spec.meshDomain: 'Not_A_Domain' does not match"),
        (
            "MeshConfig",
            "spec.meshDomains",
            "x",
            "spec: Additional properties are not allowed ('meshDomains' was unexpected)",
        ),
        ("MeshConfig", "metadata.name", "other", "metadata.name: 'other' is not one of ['default']"),
        (
            "EdgeConfig",
            "spec.headersWithUnderscoresAction",
            "DROP",
            "spec.headersWithUnderscoresAction: 'DROP' is not one of",
        ),
        ("EdgeConfig", "spec.requestTimeout", "5 minutes", "spec.requestTimeout: '5 minutes' does not match"),
        (
            "EdgeConfig",
            "spec.http2.initialStreamWindowSize",
            1024,
            "spec.http2.initialStreamWindowSize: 1024 is less than the minimum of 65535",
        ),
    ],
    ids=[
        "sample-rate-over-one",
        "mesh-domain-not-dns",
        "unknown-field",
        "not-named-default",
        "unknown-enum",
        "not-a-duration",
        "window-too-small",
    ],
)
def test_the_crd_schemas_refuse_bad_values(
    rendered: dict[str, list[Object]], kind: str, path: str, value: Any, refused: str
) -> None:
    """Our CRDs' schemas are real: each bad value is refused at the field, with the rule it breaks."""
    problem = _refusal(_crd_schemas(rendered["default"]), _changed(kind, path, value))
    assert problem is not None
    assert problem.startswith(refused)


def test_every_crd_schema_is_structural(overlay: list[Object]) -> None:
    """Every node of every schema has a type (the API server refuses non-structural schemas) but the
    metadata's, which may be left to the server."""
    untyped: list[str] = []

    def walk(node: dict[str, Any], where: str) -> None:
        if "type" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
            untyped.append(where)
        for name, child in (node.get("properties") or {}).items():
            walk(child, f"{where}.{name}")
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{where}[]")

    for (api_version, kind), schema in _crd_schemas(overlay).items():
        walk(schema, f"{kind} {api_version}")
    assert untyped == []
