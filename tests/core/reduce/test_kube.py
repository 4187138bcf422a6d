"""Tests of `aether.core.reduce.kube`: Services, Gateway API objects, ReferenceGrants and the MeshConfig."""

from __future__ import annotations

from typing import Any

import attrs
import immutables
import pytest

from aether.core.events import (
    KubeObject,
    KubeService,
    MeshConfig,
    ObjectMeta,
    ServicePort,
    SliceEndpoint,
    TlsSecret,
)
from aether.core.reduce.kube import GATEWAY_KINDS, canonical_json
from aether.core.state import Diagnostics, KubeState, Rejection, RejectionReason, State
from aether.testing import (
    domain_of,
    endpoint_slice_deleted,
    endpoint_slice_upserted,
    fold_events,
    gateway_object_deleted,
    gateway_object_upserted,
    kube_service_deleted,
    kube_service_upserted,
    make_endpoint_slice,
    make_kube_object,
    make_kube_service,
    make_mesh_config,
    make_meta,
    make_tls_secret,
    mesh_config_updated,
    namespace_deleted,
    namespace_upserted,
    reference_grant_deleted,
    reference_grant_upserted,
    tls_secret_deleted,
    tls_secret_upserted,
)

ROUTE = make_kube_object(
    "canary", uid="u1", generation=2, spec={"parentRefs": [{"name": "web"}], "hostnames": ["é"]}
)
GRANT = make_kube_object("allow-shop", kind="ReferenceGrant", spec={"from": [{"kind": "HTTPRoute"}]})
WEB = make_kube_service()


def _rejected(
    subject: str, reason: RejectionReason, message: str, *, seq: int, total: int = 1
) -> Diagnostics:
    rejection = Rejection(subject=subject, reason=reason, message=message, seq=seq)
    return Diagnostics(rejections=immutables.Map({subject: rejection}), rejected_total=total)


def _with_route() -> State:
    return fold_events(gateway_object_upserted(ROUTE))


# --- canonical JSON ---


def test_canonical_json_sorts_keys_drops_whitespace_and_keeps_utf8() -> None:
    """Canonical JSON: sorted keys at every level, `,`/`:` separators, non-ASCII kept as is."""
    assert (
        canonical_json({"b": [1, {"d": None, "c": True}], "a": "é"})
        == '{"a":"é","b":[1,{"c":true,"d":null}]}'
    )


# --- Gateway API objects ---


def test_a_gateway_object_is_stored_under_its_key() -> None:
    """An HTTPRoute with a canonical spec is stored under `<kind>/<namespace>/<name>`."""
    assert _with_route() == State(
        seq=1, kube=KubeState(gateway_objects=immutables.Map({"HTTPRoute/default/canary": ROUTE}))
    )


@pytest.mark.parametrize("kind", sorted(GATEWAY_KINDS))
def test_every_gateway_kind_is_folded(kind: str) -> None:
    """Each Gateway API kind the mesh knows is stored (a GatewayClass needs no namespace)."""
    item = make_kube_object("main", kind=kind, namespace="" if kind == "GatewayClass" else "default")
    state = fold_events(gateway_object_upserted(item))
    assert state.kube.gateway_objects == immutables.Map({item.meta.key: item})
    assert state.diagnostics == Diagnostics()


def test_a_newer_generation_replaces_the_object() -> None:
    """An upsert of a higher (or the same) generation replaces the stored object."""
    newer = make_kube_object("canary", uid="u1", generation=3, spec={"parentRefs": []})
    state = fold_events(gateway_object_upserted(newer), state=_with_route())
    assert state.kube.gateway_objects == immutables.Map({"HTTPRoute/default/canary": newer})


def test_an_older_generation_of_the_same_object_is_stale() -> None:
    """An upsert of a lower generation with the same uid is rejected as stale; the newer object stays."""
    before = _with_route()
    older = make_kube_object("canary", uid="u1", generation=1)
    state = fold_events(gateway_object_upserted(older), state=before)
    assert domain_of(state) == domain_of(before)
    assert state.diagnostics == _rejected(
        "HTTPRoute/default/canary",
        RejectionReason.STALE_OBJECT,
        "HTTPRoute/default/canary: generation 1 is older than the applied 2",
        seq=2,
    )


def test_a_recreated_object_with_a_lower_generation_replaces_the_old_one() -> None:
    """A lower generation under another uid is a new incarnation, so it applies."""
    recreated = make_kube_object("canary", uid="u2", generation=1)
    state = fold_events(gateway_object_upserted(recreated), state=_with_route())
    assert state.kube.gateway_objects == immutables.Map({"HTTPRoute/default/canary": recreated})
    assert state.diagnostics == Diagnostics()


def test_an_unsupported_kind_is_rejected() -> None:
    """A kind outside the Gateway API kinds is rejected; nothing changes."""
    item = make_kube_object("web", kind="Ingress")
    state = fold_events(gateway_object_upserted(item))
    assert domain_of(state) == State()
    assert state.diagnostics == _rejected(
        "Ingress/default/web",
        RejectionReason.UNSUPPORTED_KIND,
        "Ingress/default/web: kind must be one of ['GRPCRoute', 'Gateway', 'GatewayClass', 'HTTPRoute', 'TCPRoute',"
        " 'TLSRoute', 'UDPRoute'] (got 'Ingress')",
        seq=1,
    )


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (
            make_kube_object(spec_json="not json"),
            "HTTPRoute/default/canary: spec must be JSON (Expecting value: line 1 column 1 (char 0))",
        ),
        (
            make_kube_object(spec_json="[1,2]"),
            "HTTPRoute/default/canary: spec must be a JSON object (got list)",
        ),
        (
            make_kube_object(spec_json="null"),
            "HTTPRoute/default/canary: spec must be a JSON object (got NoneType)",
        ),
        (
            make_kube_object(spec_json='{"b":1,"a":2}'),
            "HTTPRoute/default/canary: spec must be canonical JSON (sorted keys, no whitespace);"
            " the source must canonicalize it",
        ),
        (
            make_kube_object(spec_json='{"a": 1}'),
            "HTTPRoute/default/canary: spec must be canonical JSON (sorted keys, no whitespace);"
            " the source must canonicalize it",
        ),
        (
            make_kube_object(spec_json='{"a":"\\u00e9"}'),
            "HTTPRoute/default/canary: spec must be canonical JSON (sorted keys, no whitespace);"
            " the source must canonicalize it",
        ),
        (
            make_kube_object(namespace="Bad_NS"),
            "HTTPRoute/Bad_NS/canary: namespace must be an RFC 1123 label (lowercase alphanumerics and '-',"
            " at most 63) (got 'Bad_NS')",
        ),
        (
            make_kube_object("Canary"),
            "HTTPRoute/default/Canary: name must be an RFC 1123 subdomain (lowercase alphanumerics, '-' and '.',"
            " at most 253) (got 'Canary')",
        ),
        (
            make_kube_object("main", kind="GatewayClass", namespace="", spec_json="{ }"),
            "GatewayClass//main: spec must be canonical JSON (sorted keys, no whitespace);"
            " the source must canonicalize it",
        ),
    ],
    ids=[
        "not-json",
        "list",
        "null",
        "unsorted",
        "whitespace",
        "ascii-escaped",
        "namespace",
        "name",
        "class-spec",
    ],
)
def test_an_object_with_a_bad_spec_or_name_is_rejected(item: KubeObject, message: str) -> None:
    """Bad JSON, a non-object, non-canonical JSON or a bad name is rejected; the stored object stays."""
    before = _with_route() if item.meta.key == ROUTE.meta.key else State()
    state = fold_events(gateway_object_upserted(item), state=before)
    assert domain_of(state) == domain_of(before)
    assert state.diagnostics == _rejected(
        item.meta.key, RejectionReason.INVALID_SPEC, message, seq=before.seq + 1
    )


@pytest.mark.parametrize("depth", [65, 100_000])
def test_a_spec_nested_deeper_than_the_limit_is_rejected_before_parsing(depth: int) -> None:
    """Nesting past MAX_SPEC_DEPTH is an invalid spec, decided before the parser could hit a recursion limit."""
    item = make_kube_object(spec_json='{"a":' + "[" * (depth - 1) + "]" * (depth - 1) + "}")
    state = fold_events(gateway_object_upserted(item))
    assert domain_of(state) == State()
    rejection = state.diagnostics.rejections["HTTPRoute/default/canary"]
    assert (rejection.reason, rejection.message) == (
        RejectionReason.INVALID_SPEC,
        "HTTPRoute/default/canary: spec must nest at most 64 levels of arrays and objects",
    )


def test_a_spec_nested_to_the_limit_is_accepted_and_brackets_in_strings_do_not_count() -> None:
    """64 levels pass; brackets and escaped quotes inside strings are not nesting."""
    spec = '{"a":' + "[" * 63 + '"[[\\"{{"' + "]" * 63 + "}"
    state = fold_events(gateway_object_upserted(make_kube_object(spec_json=spec)))
    assert state.diagnostics.rejections == immutables.Map()
    assert state.kube.gateway_objects["HTTPRoute/default/canary"].spec_json == spec


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_a_spec_with_a_non_json_number_is_rejected(constant: str) -> None:
    """NaN and Infinity are not JSON (RFC 8259), even though Python's parser reads them."""
    state = fold_events(gateway_object_upserted(make_kube_object(spec_json=f'{{"a":{constant}}}')))
    rejection = state.diagnostics.rejections["HTTPRoute/default/canary"]
    assert rejection.reason is RejectionReason.INVALID_SPEC
    assert f"{constant.lstrip('-')} is not JSON (RFC 8259)" in rejection.message


def test_a_later_valid_object_lifts_its_rejection() -> None:
    """A rejected spec followed by a canonical one: the object is stored and the rejection lifted."""
    state = fold_events(
        gateway_object_upserted(make_kube_object(spec_json="{")), gateway_object_upserted(ROUTE)
    )
    assert state == State(
        seq=2,
        kube=KubeState(gateway_objects=immutables.Map({"HTTPRoute/default/canary": ROUTE})),
        diagnostics=Diagnostics(rejected_total=1),
    )


def test_a_gateway_object_is_deleted() -> None:
    """Deleting a stored object forgets it."""
    state = fold_events(gateway_object_deleted(ROUTE.meta), state=_with_route())
    assert state == State(seq=2)


def test_deleting_an_unknown_gateway_object_is_rejected_then_lifted() -> None:
    """Deleting an object never stored is rejected; a later upsert of it lifts the rejection."""
    state = fold_events(gateway_object_deleted(ROUTE.meta))
    assert domain_of(state) == State()
    assert state.diagnostics == _rejected(
        "HTTPRoute/default/canary",
        RejectionReason.UNKNOWN_OBJECT,
        "HTTPRoute/default/canary deleted but not known",
        seq=1,
    )
    assert fold_events(gateway_object_upserted(ROUTE), state=state).diagnostics == Diagnostics(
        rejected_total=1
    )


# --- ReferenceGrants ---


def test_a_reference_grant_is_stored_and_deleted() -> None:
    """A ReferenceGrant is stored under its key, apart from the Gateway API objects, and deleted."""
    stored = fold_events(reference_grant_upserted(GRANT))
    assert stored == State(
        seq=1, kube=KubeState(reference_grants=immutables.Map({"ReferenceGrant/default/allow-shop": GRANT}))
    )
    assert fold_events(reference_grant_deleted(GRANT.meta), state=stored) == State(seq=2)


def test_a_reference_grant_event_of_another_kind_is_rejected() -> None:
    """A ReferenceGrant event carrying another kind is an unsupported kind."""
    state = fold_events(reference_grant_upserted(ROUTE))
    assert domain_of(state) == State()
    assert state.diagnostics == _rejected(
        "HTTPRoute/default/canary",
        RejectionReason.UNSUPPORTED_KIND,
        "HTTPRoute/default/canary: kind must be one of ['ReferenceGrant'] (got 'HTTPRoute')",
        seq=1,
    )


def test_deleting_an_unknown_reference_grant_is_rejected() -> None:
    """Deleting a ReferenceGrant never stored (a Gateway object of the same name does not count) is rejected."""
    state = fold_events(reference_grant_deleted(ROUTE.meta), state=_with_route())
    assert domain_of(state) == domain_of(_with_route())
    assert state.diagnostics == _rejected(
        "HTTPRoute/default/canary",
        RejectionReason.UNKNOWN_OBJECT,
        "HTTPRoute/default/canary deleted but not known",
        seq=2,
    )


# --- Services ---


def test_a_service_is_stored_and_replaced() -> None:
    """A Service is stored under `Service/<namespace>/<name>`; a later version replaces it."""
    changed = make_kube_service(ports=[ServicePort(name="grpc", port=9090)])
    state = fold_events(kube_service_upserted(WEB), kube_service_upserted(changed))
    assert state == State(seq=2, kube=KubeState(services=immutables.Map({"Service/default/web": changed})))


@pytest.mark.parametrize(
    ("service", "subject", "message"),
    [
        (
            make_kube_service(ports=[ServicePort(name="http", port=80), ServicePort(name="admin", port=0)]),
            "Service/default/web",
            "Service/default/web: port 'admin' must be 1..65535 (got 0)",
        ),
        (
            make_kube_service("Web"),
            "Service/default/Web",
            "Service/default/Web: name must be an RFC 1123 subdomain (lowercase alphanumerics, '-' and '.', at most 253) (got 'Web')",
        ),
        (
            make_kube_service(meta=make_meta("web", kind="Endpoints")),
            "Endpoints/default/web",
            "Endpoints/default/web: kind must be 'Service' (got 'Endpoints')",
        ),
    ],
    ids=["port", "name", "kind"],
)
def test_an_invalid_service_is_rejected_and_the_previous_stays(
    service: KubeService, subject: str, message: str
) -> None:
    """A Service with a bad port, name or kind is rejected; the stored Service stays."""
    before = fold_events(kube_service_upserted(WEB))
    state = fold_events(kube_service_upserted(service), state=before)
    assert domain_of(state) == domain_of(before)
    assert state.diagnostics == _rejected(subject, RejectionReason.INVALID_SPEC, message, seq=2)


def test_a_later_valid_service_lifts_its_rejection() -> None:
    """A rejected Service followed by a valid version of it: stored, rejection lifted."""
    bad = make_kube_service(ports=[ServicePort(name="http", port=70000)])
    state = fold_events(kube_service_upserted(bad), kube_service_upserted(WEB))
    assert state == State(
        seq=2,
        kube=KubeState(services=immutables.Map({"Service/default/web": WEB})),
        diagnostics=Diagnostics(rejected_total=1),
    )


def test_a_service_is_deleted_and_an_unknown_one_is_rejected() -> None:
    """Deleting a stored Service forgets it; deleting it again is rejected."""
    state = fold_events(
        kube_service_upserted(WEB), kube_service_deleted(WEB.meta), kube_service_deleted(WEB.meta)
    )
    assert domain_of(state) == State()
    assert state.diagnostics == _rejected(
        "Service/default/web",
        RejectionReason.UNKNOWN_OBJECT,
        "Service/default/web deleted but not known",
        seq=3,
    )


# --- MeshConfig ---


def test_a_mesh_config_is_adopted() -> None:
    """A valid MeshConfig replaces the one in force."""
    config = make_mesh_config(mesh_domain="mesh.local", trust_domain="example.org", on_demand_ttl_seconds=60)
    assert fold_events(mesh_config_updated(config)) == State(seq=1, kube=KubeState(mesh_config=config))


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            make_mesh_config(mesh_domain="Mesh Local"),
            "meshconfig: mesh domain must be an RFC 1123 subdomain (got 'Mesh Local')",
        ),
        (
            make_mesh_config(trust_domain="Example.org"),
            "meshconfig: trust domain must be lowercase letters, digits, '.', '-' or '_' (got 'Example.org')",
        ),
        (
            make_mesh_config(on_demand_ttl_seconds=0),
            "meshconfig: on-demand ttl must be positive seconds (got 0)",
        ),
        (
            make_mesh_config(tracing_enabled=True, trace_sample_per_million=1_000_001),
            "meshconfig: trace sample rate must be 0 to 1000000 per million (got 1000001)",
        ),
    ],
    ids=["mesh-domain", "trust-domain", "ttl", "trace-rate"],
)
def test_an_invalid_mesh_config_is_rejected_and_the_one_in_force_stays(
    config: MeshConfig, message: str
) -> None:
    """An invalid MeshConfig is rejected; the one in force stays."""
    state = fold_events(mesh_config_updated(config))
    assert state.kube.mesh_config == MeshConfig()
    assert state.diagnostics == _rejected("meshconfig", RejectionReason.INVALID_MESH_CONFIG, message, seq=1)


def test_a_later_valid_mesh_config_lifts_the_rejection() -> None:
    """A valid MeshConfig after an invalid one applies and lifts the rejection."""
    state = fold_events(
        mesh_config_updated(make_mesh_config(on_demand_ttl_seconds=-1)), mesh_config_updated()
    )
    assert state == State(
        seq=2, kube=KubeState(mesh_config=make_mesh_config()), diagnostics=Diagnostics(rejected_total=1)
    )


def test_a_delete_of_another_incarnation_is_stale_and_keeps_the_object() -> None:
    """A delete whose uid differs from the stored object's (an older object of the same name) changes nothing."""
    current = make_kube_object(uid="new")
    state = fold_events(
        gateway_object_upserted(current),
        gateway_object_deleted(make_meta("canary", kind="HTTPRoute", uid="old")),
    )
    assert state.kube.gateway_objects == immutables.Map({"HTTPRoute/default/canary": current})
    rejection = state.diagnostics.rejections["HTTPRoute/default/canary"]
    assert (rejection.reason, rejection.message) == (
        RejectionReason.STALE_OBJECT,
        "HTTPRoute/default/canary deleted with uid 'old' but the known object has uid 'new'",
    )


def test_an_older_mesh_config_generation_is_rejected_and_the_newer_stays() -> None:
    """A MeshConfig at a lower generation than the applied one is stale: the one in force stays."""
    newer = make_mesh_config(mesh_domain="mesh.example", generation=5)
    state = fold_events(mesh_config_updated(newer), mesh_config_updated(make_mesh_config(generation=2)))
    assert state.kube.mesh_config == newer
    rejection = state.diagnostics.rejections["meshconfig"]
    assert (rejection.reason, rejection.message) == (
        RejectionReason.INVALID_MESH_CONFIG,
        "meshconfig: generation 2 is older than the applied 5",
    )


# --- Namespaces ---


def test_a_namespace_is_stored_relabelled_and_deleted() -> None:
    """A Namespace is stored under `Namespace//<name>` with its labels, replaced when relabelled, and deleted."""
    first, relabelled = (
        namespace_upserted("shop", {"team": "shop"}),
        namespace_upserted("shop", {"team": "b"}),
    )
    state = fold_events(first, relabelled)
    assert state == State(
        seq=2, kube=KubeState(namespaces=immutables.Map({"Namespace//shop": relabelled.namespace}))
    )
    assert fold_events(namespace_deleted("shop"), state=state) == State(seq=3)


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        (ObjectMeta(kind="Service", name="shop"), "Service//shop: kind must be 'Namespace' (got 'Service')"),
        (
            ObjectMeta(kind="Namespace", namespace="default", name="shop"),
            "Namespace/default/shop: a Namespace has no namespace (got 'default')",
        ),
        (
            ObjectMeta(kind="Namespace", name="Bad_Name"),
            "Namespace//Bad_Name: name must be an RFC 1123 label (lowercase alphanumerics and '-', at most 63) (got 'Bad_Name')",
        ),
    ],
)
def test_a_bad_namespace_is_rejected_and_the_previous_one_stays(meta: ObjectMeta, message: str) -> None:
    """Another kind, a namespace on the Namespace or a name that is not a DNS label is an invalid spec."""
    stored = fold_events(namespace_upserted("shop"))
    event = namespace_upserted("shop")
    event = attrs.evolve(event, namespace=attrs.evolve(event.namespace, meta=meta))
    state = fold_events(event, state=stored)
    assert domain_of(state) == domain_of(stored)
    assert state.diagnostics == _rejected(meta.key, RejectionReason.INVALID_SPEC, message, seq=2)


# --- TLS Secrets ---


def test_a_tls_secret_is_stored_replaced_and_deleted() -> None:
    """A TLS Secret is stored under `Secret/<namespace>/<name>`, replaced by a later version, and deleted."""
    first = make_tls_secret(uid="s1")
    renewed = make_tls_secret(uid="s1", cert_chain_pem=b"renewed")
    state = fold_events(tls_secret_upserted(first), tls_secret_upserted(renewed))
    assert state == State(
        seq=2, kube=KubeState(tls_secrets=immutables.Map({"Secret/default/web-cert": renewed}))
    )
    assert fold_events(tls_secret_deleted(first.meta), state=state) == State(seq=3)


@pytest.mark.parametrize(
    ("secret", "message"),
    [
        (make_tls_secret(cert_chain_pem=b""), "Secret/default/web-cert: tls.crt must not be empty"),
        (make_tls_secret(private_key=b""), "Secret/default/web-cert: tls.key must not be empty"),
        (
            make_tls_secret("Bad_Name"),
            "Secret/default/Bad_Name: name must be an RFC 1123 subdomain (lowercase alphanumerics, '-' and '.', at most 253) (got 'Bad_Name')",
        ),
        (
            attrs.evolve(make_tls_secret(), meta=make_meta("web-cert", kind="ConfigMap")),
            "ConfigMap/default/web-cert: kind must be 'Secret' (got 'ConfigMap')",
        ),
    ],
)
def test_a_bad_tls_secret_is_rejected_and_the_previous_one_stays(secret: TlsSecret, message: str) -> None:
    """An empty certificate or key, a bad name or another kind is an invalid spec; the stored Secret stays."""
    stored = fold_events(tls_secret_upserted())
    state = fold_events(tls_secret_upserted(secret), state=stored)
    assert domain_of(state) == domain_of(stored)
    assert state.diagnostics == _rejected(secret.meta.key, RejectionReason.INVALID_SPEC, message, seq=2)


def test_deleting_an_unknown_tls_secret_is_rejected() -> None:
    """Deleting a TLS Secret never stored is an unknown object."""
    state = fold_events(tls_secret_deleted(make_meta("gone", kind="Secret")))
    assert state.diagnostics == _rejected(
        "Secret/default/gone",
        RejectionReason.UNKNOWN_OBJECT,
        "Secret/default/gone deleted but not known",
        seq=1,
    )


# --- EndpointSlices ---


def test_endpoint_slices_are_indexed_under_their_service_moved_and_deleted() -> None:
    """A slice is stored by key and indexed under `<ns>/<service>`; relabelled to another Service it moves; a
    slice naming no Service is in no index entry; deleting the last slice of a Service drops its entry."""
    first = make_endpoint_slice("legacy-1", service="legacy")
    second = make_endpoint_slice("legacy-2", service="legacy", addresses=("10.9.0.2",))
    state = fold_events(endpoint_slice_upserted(first), endpoint_slice_upserted(second))
    assert state.kube.slices_by_service == immutables.Map(
        {"shop/legacy": frozenset({"EndpointSlice/shop/legacy-1", "EndpointSlice/shop/legacy-2"})}
    )
    assert state.kube.slices_of("shop", "legacy") == (first, second)
    moved = attrs.evolve(second, service="other")
    state = fold_events(endpoint_slice_upserted(moved), state=state)
    assert state.kube.slices_by_service == immutables.Map(
        {
            "shop/legacy": frozenset({"EndpointSlice/shop/legacy-1"}),
            "shop/other": frozenset({"EndpointSlice/shop/legacy-2"}),
        }
    )
    orphan = attrs.evolve(first, service="")
    state = fold_events(endpoint_slice_upserted(orphan), endpoint_slice_deleted("legacy-2"), state=state)
    assert state.kube.slices_by_service == immutables.Map()
    assert dict(state.kube.endpoint_slices) == {"EndpointSlice/shop/legacy-1": orphan}
    state = fold_events(endpoint_slice_deleted("legacy-1"), state=state)
    assert state.kube == KubeState()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"address_type": "FQDN"},
            "addressType FQDN is not routed (deprecated by Kubernetes): list IPv4 or IPv6 addresses instead",
        ),
        ({"address_type": "ipv4"}, "addressType must be IPv4 or IPv6 (got 'ipv4')"),
        (
            {"addresses": ("fd00::1",)},
            "endpoints[0].addresses: 'fd00::1' is not an IPv4 address (the slice's addressType is IPv4)",
        ),
        ({"addresses": ("not-an-ip",)}, "endpoints[0].addresses: 'not-an-ip' is not an IPv4 address"),
        ({"ports": (("http", 0),)}, "ports[0].port must be 1..65535 (got 0)"),
        (
            {"ports": (("http", 80), ("http", 81))},
            "ports[1]: name 'http' appears twice (a Service port is served by one slice port)",
        ),
        (
            {"service": "Bad_Name"},
            "label kubernetes.io/service-name must be an RFC 1123 label (lowercase alphanumerics and '-', at most 63) (got 'Bad_Name')",
        ),
    ],
)
def test_a_bad_endpoint_slice_is_rejected_and_the_previous_one_stays(
    change: dict[str, Any], message: str
) -> None:
    """The address type, each address, the ports and the Service label are checked; the rejection names the field
    and the fix, and the slice folded before stays in force."""
    stored = fold_events(endpoint_slice_upserted())
    state = fold_events(endpoint_slice_upserted(make_endpoint_slice(**change)), state=stored)
    assert domain_of(state) == domain_of(stored)
    key = "EndpointSlice/shop/legacy-1"
    assert state.diagnostics == _rejected(key, RejectionReason.INVALID_SPEC, f"{key}: {message}", seq=2)


def test_an_ipv6_slice_and_an_endpoint_without_addresses() -> None:
    """An IPv6 slice takes IPv6 addresses; an endpoint must have one address at least."""
    ipv6 = make_endpoint_slice(address_type="IPv6", addresses=("fd00::1",))
    assert fold_events(endpoint_slice_upserted(ipv6)).kube.endpoint_slices[ipv6.meta.key] == ipv6
    empty = attrs.evolve(ipv6, endpoints=(SliceEndpoint(addresses=()),))
    state = fold_events(endpoint_slice_upserted(empty))
    key = ipv6.meta.key
    assert state.diagnostics == _rejected(
        key,
        RejectionReason.INVALID_SPEC,
        f"{key}: endpoints[0].addresses must hold at least one address",
        seq=1,
    )
