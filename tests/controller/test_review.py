"""The webhooks' answers, with no server: AdmissionReview v1 in and out (`aether.controller.review`), the route
verdict against the core's own status on every Gateway API golden case, the CRD rules of MeshConfig and EdgeConfig,
and the pod patch (deterministic, idempotent, applied with a real RFC 6902 implementation)."""

from __future__ import annotations

import base64
import copy
import functools
import json
import ssl
from http import HTTPStatus
from pathlib import Path
from typing import Any

import attrs
import jsonpatch
import pytest
import yaml

from aether.cli import main
from aether.controller import (
    IDENTITY_READY_CONTAINER,
    ROUTE_KINDS_VALIDATED,
    IdentityCheck,
    PodMutation,
    WebhookServer,
    answer_review,
    config_verdict,
    mesh_ndots,
    pod_verdict,
    route_verdict,
)
from aether.core.events import MeshConfig
from aether.kube.config_schemas import CONFIG_SCHEMAS
from tests.golden.gateway_manifests import read_documents
from tests.golden.test_gateway_golden import CASES, TESTDATA, project_case

MUTATION = PodMutation(image="registry.example/aether:1.0")
CRDS = Path(__file__).parents[2] / "manifests" / "base" / "crds"
BAD_REGEX_ROUTE: dict[str, Any] = {
    "apiVersion": "gateway.networking.k8s.io/v1",
    "kind": "HTTPRoute",
    "metadata": {"name": "bad", "namespace": "shop"},
    "spec": {
        "parentRefs": [{"name": "edge", "namespace": "edge"}],
        "rules": [{"matches": [{"path": {"type": "RegularExpression", "value": "/(unclosed"}}]}],
    },
}


def _review(
    obj: Any, *, kind: str, group: str = "", operation: str = "CREATE", namespace: str = "shop"
) -> bytes:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "0d3c7a4e-1",
                "kind": {"group": group, "version": "v1", "kind": kind},
                "namespace": namespace,
                "operation": operation,
                "object": obj,
            },
        }
    ).encode()


def _accepted_conditions(status: dict[str, Any]) -> list[dict[str, Any]]:
    conditions = [*status["conditions"], *(c for parent in status["parents"] for c in parent["conditions"])]
    return [condition for condition in conditions if condition["type"] == "Accepted"]


def test_every_golden_route_is_denied_exactly_when_the_core_drops_it_with_its_message() -> None:
    """For each route of every golden case: a denial carries the message of the core's Accepted=False condition,
    and an admitted route has no route-level refusal in its status (the core's status is the reference)."""
    denied = admitted = 0
    for case in CASES:
        statuses = {key: value for key, value in project_case(case).status.items()}
        documents = read_documents((TESTDATA / f"{case}.in.yaml").read_text())
        for document in documents:
            if document.get("kind") not in ROUTE_KINDS_VALIDATED:
                continue
            document.setdefault("metadata", {}).setdefault("namespace", "default")
            meta = document["metadata"]
            status = statuses[f"{document['kind']}/{meta['namespace']}/{meta['name']}"]
            accepted = _accepted_conditions(attrs.asdict(status))
            verdict = route_verdict(document["kind"], document)
            if not verdict.allowed:
                denied += 1
                assert accepted, (case, verdict)
                assert all(c["status"] == "False" for c in accepted), (case, verdict)
                assert verdict.message in {c["message"] for c in accepted}, (case, verdict.message, accepted)
            else:
                admitted += 1
                route_level = [
                    c for c in accepted if c["status"] == "False" and c["message"].startswith("spec")
                ]
                assert route_level == [], (case, route_level)
    assert denied >= 3, denied
    assert admitted >= 50, admitted


def test_an_uncompilable_regex_is_denied_with_the_field_and_the_rule() -> None:
    verdict = route_verdict("HTTPRoute", BAD_REGEX_ROUTE)
    assert not verdict.allowed
    assert verdict.message.startswith("spec.rules[0] dropped: spec.rules[0].matches[0].path.value: ")
    assert "'/(unclosed'" in verdict.message


def test_a_route_with_one_rule_of_two_dropped_is_admitted_with_a_warning() -> None:
    route = copy.deepcopy(BAD_REGEX_ROUTE)
    route["spec"]["rules"].append({"matches": [{"path": {"type": "PathPrefix", "value": "/ok"}}]})
    verdict = route_verdict("HTTPRoute", route)
    assert verdict.allowed
    assert len(verdict.warnings) == 1
    assert verdict.warnings[0].startswith("spec.rules[0] dropped: ")


def test_the_config_schemas_are_the_crds_schemas() -> None:
    """The webhook's rules equal the CRDs' openAPIV3Schema `spec` (descriptions aside): they cannot drift."""

    def without_descriptions(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: without_descriptions(item) for key, item in value.items() if key != "description"}
        return value

    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        kind = crd["spec"]["names"]["kind"]
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        assert json.loads(json.dumps(CONFIG_SCHEMAS[kind])) == without_descriptions(schema), kind


@pytest.mark.parametrize(
    ("kind", "obj", "message"),
    [
        (
            "MeshConfig",
            {"metadata": {"name": "default", "namespace": "shop"}, "spec": {"proxy": {"traceSampleRate": 2}}},
            "MeshConfig shop/default: spec.proxy.traceSampleRate: must be <= 1 (got 2)",
        ),
        (
            "MeshConfig",
            {"metadata": {"name": "other", "namespace": "shop"}, "spec": {}},
            "MeshConfig shop/other: metadata.name: must be 'default' (got 'other')",
        ),
        (
            "MeshConfig",
            {"metadata": {"name": "default", "namespace": "shop"}, "spec": {"meshDomain": "Bad_Domain"}},
            "MeshConfig shop/default: spec.meshDomain: must match",
        ),
        (
            "MeshConfig",
            {"metadata": {"name": "default", "namespace": "shop"}, "spec": {"onDemandTtlSeconds": True}},
            "MeshConfig shop/default: spec.onDemandTtlSeconds: must be of type integer (got True)",
        ),
        (
            "EdgeConfig",
            {
                "metadata": {"name": "edge", "namespace": "edge"},
                "spec": {"headersWithUnderscoresAction": "KEEP"},
            },
            "EdgeConfig edge/edge: spec.headersWithUnderscoresAction: must be one of",
        ),
        (
            "EdgeConfig",
            {"metadata": {"name": "edge", "namespace": "edge"}, "spec": {"http2": {"windowSize": 1}}},
            "EdgeConfig edge/edge: spec.http2.windowSize: unknown field",
        ),
        (
            "EdgeConfig",
            {"metadata": {"name": "edge", "namespace": "edge"}},
            "EdgeConfig edge/edge: spec: Required",
        ),
    ],
)
def test_a_config_breaking_its_crd_is_denied_naming_the_field_and_rule(
    kind: str, obj: Any, message: str
) -> None:
    verdict = config_verdict(kind, obj)
    assert not verdict.allowed
    assert verdict.message.startswith(message), verdict.message


def test_the_samples_are_admitted() -> None:
    samples = Path(__file__).parents[2] / "manifests" / "samples"
    for name in ("meshconfig.yaml", "edgeconfig.yaml"):
        for document in read_documents((samples / name).read_text()):
            assert config_verdict(document["kind"], document).allowed, name


def _pod(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "shop", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "web", "image": "web:1"}], **spec},
    }


def test_the_pod_patch_meshes_the_pod_and_is_idempotent() -> None:
    """Label, ndots for the mesh domain, the init container first; the patched pod patches to nothing."""
    pod = _pod(initContainers=[{"name": "migrate", "image": "web:1"}])
    verdict = pod_verdict(pod, namespace="shop", mutation=MUTATION)
    assert verdict == pod_verdict(copy.deepcopy(pod), namespace="shop", mutation=MUTATION)
    patched = jsonpatch.apply_patch(pod, list(verdict.patch))
    assert patched["metadata"]["labels"] == {"app": "web", "aether.io/managed": "true"}
    assert patched["spec"]["dnsConfig"] == {"options": [{"name": "ndots", "value": "3"}]}
    assert [c["name"] for c in patched["spec"]["initContainers"]] == [IDENTITY_READY_CONTAINER, "migrate"]
    ready = patched["spec"]["initContainers"][0]
    assert ready["image"] == MUTATION.image
    assert ready["command"][-1] == "identity-ready"
    # By default it checks the pod's own mesh inbound: its pod, service account and IP from the Downward API, as
    # `aether identity-ready --inbound` reads them, and no volume (Pod Security "baseline" refuses hostPath).
    assert ready["args"] == ["--inbound", "--trust-domain=aether.internal"]  # the core's default MeshConfig
    assert {item["name"]: item["valueFrom"]["fieldRef"]["fieldPath"] for item in ready["env"]} == {
        "POD_NAMESPACE": "metadata.namespace",
        "POD_NAME": "metadata.name",
        "POD_SERVICE_ACCOUNT": "spec.serviceAccountName",
        "POD_IP": "status.podIP",
    }
    assert "volumeMounts" not in ready
    assert "volumes" not in patched["spec"]
    assert _restricted(ready["securityContext"])
    assert pod_verdict(patched, namespace="shop", mutation=MUTATION).patch == ()


def _restricted(context: dict[str, Any]) -> bool:
    """What the Pod Security "restricted" level asks of a container."""
    return (
        context["allowPrivilegeEscalation"] is False
        and context["capabilities"] == {"drop": ["ALL"]}
        and context["runAsNonRoot"] is True
        and context["seccompProfile"] == {"type": "RuntimeDefault"}
    )


EXPECTED_CORP_PATCH: list[dict[str, Any]] = [
    {"op": "add", "path": "/metadata/labels/aether.io~1managed", "value": "true"},
    {"op": "add", "path": "/spec/dnsConfig", "value": {"options": [{"name": "ndots", "value": "3"}]}},
    {
        "op": "add",
        "path": "/spec/initContainers",
        "value": [
            {
                "name": "aether-identity-ready",
                "image": "registry.example/aether:1.0",
                "imagePullPolicy": "IfNotPresent",
                "command": ["/opt/aether/bin/aether", "identity-ready"],
                "args": ["--inbound", "--trust-domain=corp.example"],
                "env": [
                    {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {
                        "name": "POD_SERVICE_ACCOUNT",
                        "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}},
                    },
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                ],
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                    "readOnlyRootFilesystem": True,
                    "runAsNonRoot": True,
                    "runAsUser": 10001,
                    "runAsGroup": 10001,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
            }
        ],
    },
]
"""The whole patch of `_pod()` with the mesh's trust domain `corp.example` (written out: a change to the patch must
change this too)."""


def test_the_inbound_check_expects_the_trust_domain_in_force() -> None:
    """The injected `--inbound` check expects `spiffe://<td>/ns/<ns>/sa/<sa>` of the mesh's trust domain: the
    mutation's own, or the one the server's source says is in force at each review (the projected MeshConfig's)."""
    corp = PodMutation(image=MUTATION.image, trust_domain="corp.example")
    assert list(pod_verdict(_pod(), namespace="shop", mutation=corp).patch) == EXPECTED_CORP_PATCH
    in_force: list[MeshConfig | None] = [None]
    server = WebhookServer(
        ssl_context=ssl.create_default_context(), mutation=MUTATION, mesh_config=lambda: in_force[0]
    )
    assert server.current_mutation() is MUTATION  # no MeshConfig projected yet: the default stands
    in_force[0] = MeshConfig()
    assert server.current_mutation() is MUTATION  # the defaults are in force: nothing to change
    in_force[0] = MeshConfig(trust_domain="corp.example")
    assert server.current_mutation() == corp
    _, answer = answer_review("/mutate-pod", _review(_pod(), kind="Pod"), mutation=server.current_mutation())
    assert json.loads(base64.b64decode(answer["response"]["patch"])) == EXPECTED_CORP_PATCH


def test_ndots_follows_the_mesh_domain_in_force() -> None:
    """The projected MeshConfig's meshDomain sets the pods' ndots (as its trustDomain sets the inbound check's)."""
    server = WebhookServer(
        ssl_context=ssl.create_default_context(),
        mutation=MUTATION,
        mesh_config=lambda: MeshConfig(mesh_domain="mesh"),
    )
    mutation = server.current_mutation()
    assert mutation == PodMutation(image=MUTATION.image, mesh_domain="mesh")
    patched = jsonpatch.apply_patch(
        _pod(), list(pod_verdict(_pod(), namespace="shop", mutation=mutation).patch)
    )
    assert {"name": "ndots", "value": "2"} in patched["spec"]["dnsConfig"]["options"]


def test_the_admin_socket_check_mounts_the_agents_run_directory() -> None:
    """`IdentityCheck.ADMIN_SOCKET`: the init container asks the node agent's admin socket, through the hostPath
    of /run/aether (read-only) in the agent's group; the patched pod patches to nothing."""
    mutation = PodMutation(image=MUTATION.image, identity_check=IdentityCheck.ADMIN_SOCKET)
    pod = _pod(volumes=[{"name": "data", "emptyDir": {}}])
    patched = jsonpatch.apply_patch(pod, list(pod_verdict(pod, namespace="shop", mutation=mutation).patch))
    ready = patched["spec"]["initContainers"][0]
    assert ready["args"] == ["--admin=/run/aether/admin.sock"]
    assert [item["name"] for item in ready["env"]] == ["POD_NAMESPACE", "POD_NAME"]
    assert ready["volumeMounts"] == [
        {"name": "aether-agent-run", "mountPath": "/run/aether", "readOnly": True}
    ]
    assert (ready["securityContext"]["runAsGroup"], ready["securityContext"]["runAsNonRoot"]) == (10001, True)
    assert patched["spec"]["volumes"] == [
        {"name": "data", "emptyDir": {}},
        {"name": "aether-agent-run", "hostPath": {"path": "/run/aether", "type": "Directory"}},
    ]
    assert pod_verdict(patched, namespace="shop", mutation=mutation).patch == ()


def test_ndots_follows_the_mesh_domain_and_replaces_a_different_value() -> None:
    assert mesh_ndots("aether.internal") == 3
    assert mesh_ndots("mesh") == 2
    pod = _pod(dnsConfig={"options": [{"name": "edns0"}, {"name": "ndots", "value": "5"}]})
    patched = jsonpatch.apply_patch(pod, list(pod_verdict(pod, namespace="shop", mutation=MUTATION).patch))
    assert patched["spec"]["dnsConfig"]["options"] == [{"name": "edns0"}, {"name": "ndots", "value": "3"}]


def test_an_opted_out_or_never_meshed_pod_is_left_alone() -> None:
    opted_out = _pod()
    opted_out["metadata"]["labels"]["aether.io/managed"] = "false"
    assert pod_verdict(opted_out, namespace="shop", mutation=MUTATION).patch == ()
    assert pod_verdict(_pod(), namespace="kube-system", mutation=MUTATION).patch == ()
    assert pod_verdict(_pod(), namespace="spire-server", mutation=MUTATION).patch == ()


def test_a_review_answer_carries_the_uid_the_patch_and_the_denial() -> None:
    status, answer = answer_review("/mutate-pod", _review(_pod(), kind="Pod"), mutation=MUTATION)
    assert status is HTTPStatus.OK
    response = answer["response"]
    assert response["uid"] == "0d3c7a4e-1"
    assert response["allowed"]
    assert response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == [
        dict(op) for op in pod_verdict(_pod(), namespace="shop", mutation=MUTATION).patch
    ]
    body = _review(BAD_REGEX_ROUTE, kind="HTTPRoute", group="gateway.networking.k8s.io")
    _, denied = answer_review("/validate-route", body, mutation=MUTATION)
    assert denied["response"]["allowed"] is False
    assert denied["response"]["status"]["message"] == route_verdict("HTTPRoute", BAD_REGEX_ROUTE).message
    # Same input, same bytes.
    assert answer_review("/validate-route", body, mutation=MUTATION) == answer_review(
        "/validate-route", body, mutation=MUTATION
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "body: must be JSON"),
        (b"[]", "body: must be a JSON object"),
        (b'{"kind": "Pod", "apiVersion": "v1"}', "kind: must be 'AdmissionReview' (got 'Pod')"),
        (
            b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1beta1", "request": {}}',
            "apiVersion: must be 'admission.k8s.io/v1' (got 'admission.k8s.io/v1beta1')",
        ),
        (b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}', "request: must be an object"),
    ],
)
def test_a_body_that_is_not_a_review_is_400_naming_the_field(body: bytes, message: str) -> None:
    status, answer = answer_review("/validate-route", body, mutation=MUTATION)
    assert status is HTTPStatus.BAD_REQUEST
    assert message in answer["error"], answer


def test_an_unexpected_kind_or_malformed_object_is_denied_naming_the_field() -> None:
    _, answer = answer_review("/validate-meshconfig", _review(_pod(), kind="Pod"), mutation=MUTATION)
    assert answer["response"]["status"]["message"] == (
        "request.kind: /validate-meshconfig reviews MeshConfig only (got 'Pod')"
    )
    broken = {"kind": "HTTPRoute", "apiVersion": "gateway.networking.k8s.io/v1", "metadata": {"name": "x"}}
    _, answer = answer_review(
        "/validate-route", _review({**broken, "spec": []}, kind="HTTPRoute"), mutation=MUTATION
    )
    assert "spec: must be an object" in answer["response"]["status"]["message"]
    _, answer = answer_review(
        "/mutate-pod", _review({"metadata": {"name": "p"}}, kind="Pod"), mutation=MUTATION
    )
    assert answer["response"]["status"]["message"] == "pod shop/p: spec: must be an object (got None)"
    _, answer = answer_review("/mutate-pod", _review(None, kind="Pod", operation="DELETE"), mutation=MUTATION)
    assert answer["response"]["allowed"] is True
    status, _ = answer_review("/nowhere", b"{}", mutation=MUTATION)
    assert status is HTTPStatus.NOT_FOUND


def test_a_route_of_another_implementations_gateway_is_not_judged() -> None:
    """Only routes with a parent of ours are judged: a Gateway whose class is another controller's (the owner says
    no) admits even an uncompilable regex, which is that implementation's to refuse; a Service parent (the mesh's)
    is always judged, and so is a route whose parentRefs are malformed."""
    theirs = functools.partial(_owned_by, {("edge", "mine")})
    assert route_verdict("HTTPRoute", BAD_REGEX_ROUTE, owns_gateway=theirs).allowed
    ours = copy.deepcopy(BAD_REGEX_ROUTE)
    ours["spec"]["parentRefs"].append({"name": "mine", "namespace": "edge"})
    assert not route_verdict("HTTPRoute", ours, owns_gateway=theirs).allowed
    mesh = copy.deepcopy(BAD_REGEX_ROUTE)
    mesh["spec"]["parentRefs"] = [{"group": "", "kind": "Service", "name": "web"}]
    assert not route_verdict("HTTPRoute", mesh, owns_gateway=theirs).allowed
    malformed = copy.deepcopy(BAD_REGEX_ROUTE)
    malformed["spec"]["parentRefs"] = ["edge"]
    assert not route_verdict("HTTPRoute", malformed, owns_gateway=theirs).allowed
    status, answer = answer_review(
        "/validate-route",
        _review(BAD_REGEX_ROUTE, kind="HTTPRoute", group="gateway.networking.k8s.io"),
        mutation=MUTATION,
        owns_gateway=theirs,
    )
    assert (status, answer["response"]["allowed"]) == (200, True)


def _owned_by(ours: set[tuple[str, str]], namespace: str, name: str) -> bool:
    return (namespace, name) in ours


def test_a_bad_mesh_domain_flag_is_a_usage_error_naming_the_rule(capsys: pytest.CaptureFixture[str]) -> None:
    """`aether controller --mesh-domain` must be an RFC 1123 subdomain: else exit 2 before any API call."""
    argv = ["controller", "--kube-api", "http://127.0.0.1:1", "--pod-name", "c-0", "--mesh-domain", "Mesh_"]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "aether: error: --mesh-domain: the mesh domain must be an RFC 1123 subdomain (got 'Mesh_')\n"
    )


def test_a_bad_trust_domain_flag_is_a_usage_error_naming_the_rule(capsys: pytest.CaptureFixture[str]) -> None:
    """`aether controller --trust-domain` must be a SPIFFE trust domain: else exit 2 before any API call."""
    argv = [
        "controller",
        "--kube-api",
        "http://127.0.0.1:1",
        "--pod-name",
        "c-0",
        "--trust-domain",
        "Corp Mesh",
    ]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "aether: error: --trust-domain: trust domain must be lowercase letters, digits, '.', '-' or '_' "
        "(got 'Corp Mesh')\n"
    )
