"""Tests of `aether.kube.convert`: Kubernetes objects (decoded JSON or YAML) to the log's events."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from aether.core.events import (
    EndpointSliceDeleted,
    EndpointSliceUpserted,
    GatewayObjectDeleted,
    GatewayObjectUpserted,
    KubeEndpointSlice,
    KubeNamespace,
    KubeObject,
    KubeService,
    KubeServiceDeleted,
    KubeServiceUpserted,
    NamespaceDeleted,
    NamespaceUpserted,
    ObjectMeta,
    Pod,
    PodAdded,
    PodRemoved,
    PodUpdated,
    ReferenceGrantDeleted,
    ReferenceGrantUpserted,
    ServicePort,
    SliceEndpoint,
    SlicePort,
    TlsSecret,
    TlsSecretDeleted,
    TlsSecretUpserted,
)
from aether.core.values import Redacted
from aether.kube.convert import ObjectError, deletion_events, object_events, object_meta

AT = 1_800_000_000_000_000_000
KW: dict[str, Any] = {"source": "directory", "observed_at": AT}

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "web-1",
        "namespace": "shop",
        "uid": "u-1",
        "labels": {"aether.io/managed": "true", "app": "web"},
        "annotations": {"endpoint.aether.io/port": "9090"},
    },
    "spec": {"nodeName": "node-a", "serviceAccountName": "web"},
    "status": {"podIP": "10.0.0.7", "podIPs": [{"ip": "10.0.0.7"}, {"ip": "fd00::7"}]},
}
EXPECTED_POD = Pod(
    namespace="shop",
    name="web-1",
    uid="u-1",
    node_name="node-a",
    service_account="web",
    labels={"aether.io/managed": "true", "app": "web"},
    annotations={"endpoint.aether.io/port": "9090"},
    ips=("10.0.0.7", "fd00::7"),
)
ROUTE = {
    "apiVersion": "gateway.networking.k8s.io/v1",
    "kind": "HTTPRoute",
    "metadata": {"name": "canary", "generation": 3, "creationTimestamp": "2026-01-01T00:00:00Z"},
    "spec": {"parentRefs": [{"name": "web", "kind": "Service"}], "hostnames": ["é.example"]},
    "status": {"parents": []},
}
ROUTE_META = ObjectMeta(
    kind="HTTPRoute",
    namespace="default",
    name="canary",
    generation=3,
    creation_timestamp="2026-01-01T00:00:00Z",
)


def _secret(**fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "cert"},
        "type": "kubernetes.io/tls",
        **fields,
    }


def test_a_pod_becomes_pod_added_with_its_placement_identity_and_ips() -> None:
    """A Pod reads node, service account, labels, annotations and IPs (podIP first); `known` makes it an update."""
    assert object_events(POD, **KW) == (PodAdded(observed_at=AT, source="directory", pod=EXPECTED_POD),)
    assert object_events(POD, known=True, **KW) == (
        PodUpdated(observed_at=AT, source="directory", pod=EXPECTED_POD),
    )


def test_a_bare_pod_takes_the_default_namespace_and_service_account() -> None:
    """A manifest Pod without namespace, service account or status is `default/<name>`, SA `default`, no IPs."""
    (event,) = object_events({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}, **KW)
    assert event == PodAdded(observed_at=AT, source="directory", pod=Pod(namespace="default", name="p"))


def test_a_service_becomes_kube_service_upserted() -> None:
    """A Service reads its selector, ports (a named targetPort kept as text) and cluster IP."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "shop", "uid": "s-1"},
        "spec": {
            "selector": {"app": "web"},
            "clusterIP": "10.96.0.10",
            "ports": [
                {"name": "http", "port": 80, "targetPort": 8080, "appProtocol": "http"},
                {"port": 81, "targetPort": "admin", "protocol": "UDP"},
            ],
        },
    }
    meta = ObjectMeta(kind="Service", namespace="shop", name="web", uid="s-1")
    assert object_events(service, **KW) == (
        KubeServiceUpserted(
            observed_at=AT,
            source="directory",
            service=KubeService(
                meta=meta,
                selector={"app": "web"},
                ports=(
                    ServicePort(name="http", port=80, target_port="8080", app_protocol="http"),
                    ServicePort(port=81, target_port="admin", protocol="UDP"),
                ),
                cluster_ip="10.96.0.10",
            ),
        ),
    )
    assert deletion_events(service, **KW) == (
        KubeServiceDeleted(observed_at=AT, source="directory", meta=meta),
    )


def test_a_gateway_api_object_keeps_its_spec_as_canonical_json_and_drops_its_status() -> None:
    """A Gateway API kind becomes `GatewayObjectUpserted` with the spec canonical (sorted, compact, UTF-8 kept)."""
    spec_json = '{"hostnames":["é.example"],"parentRefs":[{"kind":"Service","name":"web"}]}'
    assert object_events(ROUTE, **KW) == (
        GatewayObjectUpserted(
            observed_at=AT, source="directory", object=KubeObject(meta=ROUTE_META, spec_json=spec_json)
        ),
    )
    assert deletion_events(ROUTE, **KW) == (
        GatewayObjectDeleted(observed_at=AT, source="directory", meta=ROUTE_META),
    )


def test_a_gateway_class_is_cluster_scoped() -> None:
    """A GatewayClass keeps an empty namespace (its key is `GatewayClass//<name>`)."""
    gateway_class = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "GatewayClass",
        "metadata": {"name": "aether"},
    }
    assert object_meta(gateway_class).key == "GatewayClass//aether"


def test_a_reference_grant_has_events_of_its_own() -> None:
    """A ReferenceGrant (any served version) becomes `ReferenceGrantUpserted` / `ReferenceGrantDeleted`."""
    grant = {
        "apiVersion": "gateway.networking.k8s.io/v1beta1",
        "kind": "ReferenceGrant",
        "metadata": {"name": "g"},
        "spec": {"from": []},
    }
    meta = ObjectMeta(kind="ReferenceGrant", namespace="default", name="g")
    assert object_events(grant, **KW) == (
        ReferenceGrantUpserted(
            observed_at=AT, source="directory", object=KubeObject(meta=meta, spec_json='{"from":[]}')
        ),
    )
    assert deletion_events(grant, **KW) == (
        ReferenceGrantDeleted(observed_at=AT, source="directory", meta=meta),
    )


def test_a_namespace_converts_to_its_labels_with_the_name_label_the_api_server_sets() -> None:
    """A Namespace (cluster-scoped) keeps its labels; `kubernetes.io/metadata.name` is its name even when a
    manifest leaves it out; its deletion carries its key."""
    obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop", "labels": {"team": "shop"}}}
    meta = ObjectMeta(kind="Namespace", name="shop")
    labels = {"kubernetes.io/metadata.name": "shop", "team": "shop"}
    assert object_events(obj, **KW) == (
        NamespaceUpserted(
            observed_at=AT, source="directory", namespace=KubeNamespace(meta=meta, labels=labels)
        ),
    )
    assert deletion_events(obj, **KW) == (NamespaceDeleted(observed_at=AT, source="directory", meta=meta),)


def test_a_tls_secret_decodes_its_data_and_string_data_wins() -> None:
    """`data` entries are base64; `stringData` (manifests only) takes precedence; the key is redacted."""
    data = {"tls.crt": base64.b64encode(b"CERT").decode(), "tls.key": base64.b64encode(b"KEY").decode()}
    meta = ObjectMeta(kind="Secret", namespace="default", name="cert")
    expected = TlsSecret(meta=meta, cert_chain_pem=b"CERT", private_key=Redacted(b"KEY"))
    assert object_events(_secret(data=data), **KW) == (
        TlsSecretUpserted(observed_at=AT, source="directory", secret=expected),
    )
    (event,) = object_events(_secret(data=data, stringData={"tls.crt": "PLAIN"}), **KW)
    assert isinstance(event, TlsSecretUpserted)
    assert event.secret.cert_chain_pem == b"PLAIN"
    assert deletion_events(_secret(), **KW) == (
        TlsSecretDeleted(observed_at=AT, source="directory", meta=meta),
    )


def test_a_tls_secret_without_entries_is_left_for_the_reducer_to_reject() -> None:
    """Missing entries convert to empty bytes: the reducer rejects them with a reason the status shows."""
    (event,) = object_events(_secret(), **KW)
    assert isinstance(event, TlsSecretUpserted)
    assert (event.secret.cert_chain_pem, event.secret.private_key) == (b"", Redacted(b""))


@pytest.mark.parametrize(
    "obj",
    [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "opaque"}, "type": "Opaque"},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": {"name": "not-gateway-api"}},
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "BackendTLSPolicy", "metadata": {"name": "p"}},
    ],
)
def test_kinds_the_mesh_does_not_read_convert_to_nothing(obj: dict[str, Any]) -> None:
    """Other kinds, Opaque Secrets and look-alike kinds of other groups give no event, upserted or deleted."""
    assert object_events(obj, **KW) == ()
    assert deletion_events(obj, **KW) == ()


def test_a_deleted_pod_is_removed_with_its_uid() -> None:
    """Deleting a Pod removes that incarnation (its uid)."""
    assert deletion_events(POD, **KW) == (
        PodRemoved(observed_at=AT, source="directory", namespace="shop", name="web-1", uid="u-1"),
    )


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (
            ["a", "list"],
            "not a kubernetes object: object must be a mapping with apiVersion, kind and metadata (got ['a', 'list'])",
        ),
        (
            {"kind": "Pod", "metadata": {"name": "p"}},
            "not a kubernetes object: apiVersion must be a non-empty string (got None)",
        ),
        (
            {"apiVersion": "v1", "metadata": {"name": "p"}},
            "not a kubernetes object: kind must be a non-empty string (got None)",
        ),
        (
            {"apiVersion": "v1", "kind": "Pod"},
            "not a kubernetes object: metadata.name must be a non-empty string (got None)",
        ),
        (
            {"apiVersion": "v1", "kind": "Pod", "metadata": ["x"]},
            "not a kubernetes object: metadata must be a mapping (got ['x'])",
        ),
        (
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"on": True}}},
            "not a kubernetes object: metadata.labels.on must be a string (quote it in YAML) (got True)",
        ),
        (
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "generation": "2"}},
            "not a kubernetes object: metadata.generation must be an integer (got '2')",
        ),
        (
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "s"},
                "spec": {"ports": {"port": 80}},
            },
            "not a kubernetes object: spec.ports must be a list (got {'port': 80})",
        ),
        (
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p"},
                "status": {"podIP": "10.0.0.1", "podIPs": True},
            },
            "not a kubernetes object: status.podIPs must be a list (got True)",
        ),
        (
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "generation": 10**27}},
            "not a kubernetes object: metadata.generation must be an integer from 0 to 9223372036854775807 "
            "(got 1000000000000000000000000000)",
        ),
        (
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "generation": -1}},
            "not a kubernetes object: metadata.generation must be an integer from 0 to 9223372036854775807 "
            "(got -1)",
        ),
        (
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "s"},
                "spec": {"ports": [{"port": -1}]},
            },
            "not a kubernetes object: spec.ports[].port must be an integer from 0 to 4294967295 (got -1)",
        ),
        (
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "s"},
                "spec": {"ports": [{"port": 2**64}]},
            },
            "not a kubernetes object: spec.ports[].port must be an integer from 0 to 4294967295 "
            "(got 18446744073709551616)",
        ),
        (
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "s"},
                "spec": {"ports": [{"port": 80, "targetPort": 10**5000}]},
            },
            "not a kubernetes object: spec.ports[].targetPort must be an integer from 0 to 4294967295 "
            "(got an integer of 16610 bits)",
        ),
        (
            {**ROUTE, "spec": "parentRefs"},
            "not a kubernetes object: spec must be a mapping (got 'parentRefs')",
        ),
        (
            _secret(data={"tls.crt": "***"}),
            "not a kubernetes object: data.tls.crt must be base64 (got '***')",
        ),
    ],
)
def test_what_is_not_a_kubernetes_object_raises_an_error_naming_the_field(obj: Any, message: str) -> None:
    """An object without apiVersion/kind/name, or with a field of the wrong type, names the field and the value."""
    with pytest.raises(ObjectError) as caught:
        object_events(obj, **KW)
    assert str(caught.value) == message


def test_an_endpoint_slice_converts_its_service_ports_and_endpoint_readiness() -> None:
    """An EndpointSlice keeps the Service it serves (label `kubernetes.io/service-name`), its ports and its
    endpoints; an absent ready condition is ready, as the API reads it; its deletion carries its key."""
    obj = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "legacy-1",
            "namespace": "shop",
            "labels": {"kubernetes.io/service-name": "legacy"},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080}, {"port": 9000, "protocol": "UDP", "appProtocol": "dns"}],
        "endpoints": [
            {"addresses": ["10.9.0.1"]},
            {"addresses": ["10.9.0.2", "10.9.0.3"], "conditions": {"ready": False}},
        ],
    }
    meta = ObjectMeta(kind="EndpointSlice", namespace="shop", name="legacy-1")
    expected = KubeEndpointSlice(
        meta=meta,
        service="legacy",
        address_type="IPv4",
        ports=(SlicePort(name="http", port=8080), SlicePort(port=9000, protocol="UDP", app_protocol="dns")),
        endpoints=(
            SliceEndpoint(addresses=("10.9.0.1",)),
            SliceEndpoint(addresses=("10.9.0.2", "10.9.0.3"), ready=False),
        ),
    )
    assert object_events(obj, **KW) == (
        EndpointSliceUpserted(observed_at=AT, source="directory", slice=expected),
    )
    assert deletion_events(obj, **KW) == (
        EndpointSliceDeleted(observed_at=AT, source="directory", meta=meta),
    )


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"addressType": None}, "addressType"),
        ({"endpoints": [{"addresses": "10.9.0.1"}]}, "endpoints[].addresses"),
        (
            {"endpoints": [{"addresses": ["10.9.0.1"], "conditions": {"ready": "yes"}}]},
            "endpoints[].conditions.ready",
        ),
        ({"ports": {"name": "http"}}, "ports"),
    ],
)
def test_an_endpoint_slice_of_the_wrong_shape_is_refused_naming_the_field(
    change: dict[str, Any], field: str
) -> None:
    """A missing address type, addresses that are not a list, a readiness that is not a boolean, ports that are
    not a list: the object is refused, naming the field."""
    obj = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "legacy-1", "namespace": "shop"},
        "addressType": "IPv4",
        **change,
    }
    with pytest.raises(ObjectError) as raised:
        object_events(obj, **KW)
    assert raised.value.field == field
