"""Tests of `aether.core.events.kube`: Kubernetes values and the subjects of their events."""

from __future__ import annotations

from aether.core.events import MeshConfig
from aether.testing import (
    gateway_object_deleted,
    gateway_object_upserted,
    kube_service_deleted,
    kube_service_upserted,
    make_kube_object,
    make_kube_service,
    make_meta,
    mesh_config_updated,
    reference_grant_deleted,
    reference_grant_upserted,
    tls_secret_deleted,
    tls_secret_upserted,
)


def test_an_object_key_is_kind_namespace_and_name() -> None:
    """`ObjectMeta.key` is `<kind>/<namespace>/<name>` (empty namespace for cluster-scoped kinds)."""
    assert make_meta("web").key == "Service/default/web"
    assert make_meta("main", kind="GatewayClass", namespace="").key == "GatewayClass//main"


def test_the_mesh_config_defaults() -> None:
    """The MeshConfig defaults to the `aether.internal` domains and a ten-minute on-demand TTL."""
    assert MeshConfig() == MeshConfig(
        mesh_domain="aether.internal", trust_domain="aether.internal", on_demand_ttl_seconds=600, generation=0
    )


def test_kube_events_are_about_their_object() -> None:
    """Each Kubernetes event's subject is its object's key; the MeshConfig's is `meshconfig`."""
    route = make_kube_object("canary")
    grant = make_kube_object("allow", kind="ReferenceGrant")
    assert kube_service_upserted(make_kube_service()).subject == "Service/default/web"
    assert kube_service_deleted(make_meta()).subject == "Service/default/web"
    assert gateway_object_upserted(route).subject == "HTTPRoute/default/canary"
    assert gateway_object_deleted(route.meta).subject == "HTTPRoute/default/canary"
    assert reference_grant_upserted(grant).subject == "ReferenceGrant/default/allow"
    assert reference_grant_deleted(grant.meta).subject == "ReferenceGrant/default/allow"
    assert tls_secret_upserted().subject == "Secret/default/web-cert"
    assert tls_secret_deleted(make_meta("web-cert", kind="Secret")).subject == "Secret/default/web-cert"
    assert mesh_config_updated().subject == "meshconfig"
