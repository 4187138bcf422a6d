"""Hypothesis strategies for every value and event of the core (STYLE T4: every event type must have one here), for
the inputs of the ADS stream machines (requests, their bytes, and snapshots) and for those of the registrar watch
machine (registry mutations, stream breaks, filter changes and watch events).

Names come from small alphabets so that a sequence keeps meeting the same subjects: the same pods are added and
removed, endpoints arrive for services that are and are not in the catalog, registry versions mostly go up and
sometimes down. Most values are valid, so that folding populates the state; a minority is bad on purpose
(invalid names, annotations, specs, SPIFFE IDs, ports, versions) to exercise every rejection.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs
import immutables
from envoy.service.discovery.v3 import discovery_pb2
from hypothesis import strategies as st

from aether.core.events import (
    EVENT_TYPES,
    Endpoint,
    EndpointAdded,
    EndpointRemoved,
    EndpointSliceDeleted,
    EndpointSliceUpserted,
    EndpointsSnapshotCompleted,
    EndpointsSnapshotReceived,
    EndpointUpdated,
    Event,
    GatewayObjectDeleted,
    GatewayObjectUpserted,
    Health,
    HealthCheckMode,
    KubeEndpointSlice,
    KubeNamespace,
    KubeObject,
    KubeService,
    KubeServiceDeleted,
    KubeServiceUpserted,
    MeshConfig,
    MeshConfigUpdated,
    NamespaceDeleted,
    NamespaceUpserted,
    NodeCaptureConfigured,
    ObjectMeta,
    OnDemandClusterRequested,
    Pod,
    PodAdded,
    PodRemoved,
    PodUpdated,
    Protocol,
    Record,
    ReferenceGrantDeleted,
    ReferenceGrantUpserted,
    RegistryServiceAdded,
    RegistryServiceRemoved,
    ResourceAcked,
    ResourceNacked,
    ServicePort,
    SliceEndpoint,
    SlicePort,
    Svid,
    SvidRemoved,
    SvidRotated,
    TlsSecret,
    TlsSecretDeleted,
    TlsSecretUpserted,
    TrustBundle,
    TrustBundleRemoved,
    TrustBundleRotated,
)
from aether.core.reduce.annotations import (
    HEALTH_CHECK_MODE,
    MANAGED_LABEL,
    PORT,
    PORTS,
    PROTOCOL,
    UPSTREAMS,
    WEIGHT,
)
from aether.core.reduce.kube import GATEWAY_KINDS, canonical_json
from aether.core.snapshot import TYPE_ORDER, Resource, Snapshot
from aether.core.state import RegistryState
from aether.core.values import Redacted
from aether.proto.registrar.v1 import registrar_pb2
from aether.registrar.convert import change_to_proto
from aether.registrar.snapshot import (
    Change,
    ChangeKind,
    EndpointRegistered,
    EndpointsUnregistered,
    Mutation,
)
from aether.testing import AT
from aether.testing.xds_resources import (
    make_cluster,
    make_listener,
    make_load_assignment,
    make_route_configuration,
)

T = TypeVar("T")

MAX_EVENTS = 40
"""The longest generated sequence: long enough to add, change and remove the same subjects, short enough to keep
each property test under ten seconds at 200 examples."""

UINT32_MAX = 2**32 - 1
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


def mostly(good: st.SearchStrategy[T], bad: st.SearchStrategy[T], *, one_in: int = 6) -> st.SearchStrategy[T]:
    """Draw from `good`, and from `bad` about once in `one_in` draws (shrinking goes towards `good`)."""
    return st.integers(0, one_in - 1).flatmap(lambda n: bad if n == one_in - 1 else good)


def _among(good: tuple[T, ...], bad: tuple[T, ...], *, one_in: int = 6) -> st.SearchStrategy[T]:
    """Sample `good` values, and a `bad` one about once in `one_in` draws (one draw: cheaper than `mostly`)."""
    weighted = good * ((one_in - 1) * len(bad)) + bad * len(good)
    return st.sampled_from(weighted)


# --- names ---

NAMESPACES = ("default", "shop")
SERVICE_ACCOUNTS = ("web", "db")
POD_NAMES = ("web-1", "web-2", "db-0")
SERVICES = tuple(f"{namespace}/{account}" for namespace in NAMESPACES for account in SERVICE_ACCOUNTS)
IPS = ("10.0.0.1", "10.0.0.2", "10.0.1.7", "fd00::1")
MESH_DOMAINS = ("aether.internal", "mesh.local")
TRUST_DOMAINS = ("aether.internal", "example.org")
SPIFFE_IDS = tuple(
    f"spiffe://aether.internal/ns/{ns}/sa/{sa}" for ns in NAMESPACES for sa in SERVICE_ACCOUNTS
)
NODE_IDS = ("node-a", "node-b")
TYPE_URLS = (
    "type.googleapis.com/envoy.config.cluster.v3.Cluster",
    "type.googleapis.com/envoy.config.listener.v3.Listener",
)

namespaces = _among(NAMESPACES, ("kube-system", "spire-server", "Bad_NS", ""))
pod_names = _among(POD_NAMES, ("-web", "WEB-1", ""))
service_accounts = _among((*SERVICE_ACCOUNTS, "default"), ("Web", "", "a" * 254))
service_keys = _among(SERVICES, ("web", "default/", "Shop/web", "default/web/extra", ""))
ips = _among(IPS, ("10.0.0.256", "not-an-ip", "", "10.0.0.1 "))
spiffe_ids = _among(
    (*SPIFFE_IDS, "spiffe://example.org/ns/default/sa/web"),
    (
        "spiffe://aether.internal",
        "spiffe://aether.internal/",
        "https://aether.internal/ns/default",
        "spiffe://Aether/ns/default",
        "spiffe://aether.internal/ns/../sa",
    ),
)
trust_domains = _among(TRUST_DOMAINS, ("Bad Domain", ""))
small_text = st.text(alphabet="abz-./:é\x00 ", max_size=6)
"""Free text for fields the core stores but never checks."""
sources = mostly(
    st.sampled_from(("cni", "registrar", "kubernetes", "identity", "xds")), small_text, one_in=20
)
observed_ats = mostly(st.integers(AT - 10**9, AT + 10**12), st.sampled_from((0, 1, INT64_MAX, -1)), one_in=20)
uids = st.sampled_from(("", "uid-1", "uid-2"))


bad_versions = st.sampled_from(("", "v3", "-1", "1.5", "²", "٣", " 4"))
"""Registry versions that are no decimal counter (empty, signed, non-ASCII digits, words)."""


def versions() -> st.SearchStrategy[str]:
    """Registry versions: small decimal counters (some with leading zeros), sometimes not a counter at all."""
    return mostly(st.one_of(st.integers(0, 12).map(str), st.just("007")), bad_versions)


# --- pods ---

_ANNOTATION_VALUES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    PORT: (("8080", "9090", " 80 "), ("0", "70000", "http", "²", "")),
    PORTS: (("9090", "9090,9091=h2", " 8443 "), ("x", "0", "9090,,", "²", "70000=h2")),
    WEIGHT: (("1", "100", "1024"), ("0", "-5", "2000000", "heavy")),
    PROTOCOL: (("http", "tcp", "HTTP"), ("udp", "")),
    HEALTH_CHECK_MODE: (("eds", "active", " EDS "), ("none",)),
    UPSTREAMS: (("db", "shop/db", "db, shop/web", "", " , "), ("Bad/x", "shop/", "a/b/c")),
    "example.com/unrelated": (("x",), ("",)),
}


@st.composite
def pod_annotations(draw: st.DrawFn) -> dict[str, str]:
    """Mesh annotations, each one valid most of the time."""
    names = draw(st.lists(st.sampled_from(sorted(_ANNOTATION_VALUES)), unique=True, max_size=4))
    return {name: draw(_among(*_ANNOTATION_VALUES[name])) for name in names}


pod_labels = mostly(
    st.sampled_from(({MANAGED_LABEL: "true"}, {MANAGED_LABEL: "true", "app": "web"})),
    st.sampled_from(({}, {MANAGED_LABEL: "false"}, {MANAGED_LABEL: "True"})),
)


def pods() -> st.SearchStrategy[Pod]:
    """Pods of a few names in a few namespaces, mostly managed, with mostly valid annotations."""
    return st.builds(
        Pod,
        namespace=namespaces,
        name=pod_names,
        uid=uids,
        node_name=st.sampled_from(("node-a", "")),
        service_account=service_accounts,
        labels=pod_labels,
        annotations=pod_annotations(),
        ips=st.lists(ips, max_size=2).map(tuple),
        netns=st.sampled_from(("", "/var/run/netns/cni-1")),
        container_id=st.sampled_from(("", "containerd://abc")),
    )


# --- registry ---

_ports = mostly(st.sampled_from((80, 8080, 9090)), st.sampled_from((0, 65536, UINT32_MAX)), one_in=12)


def endpoints(*, faults: bool = True) -> st.SearchStrategy[Endpoint]:
    """Endpoints of a few services and IPs, mostly valid (bad service keys, IPs, ports and weights otherwise; all
    valid without `faults`)."""

    def among(good: tuple[T, ...], bad: tuple[T, ...], *, one_in: int) -> st.SearchStrategy[T]:
        return _among(good, bad, one_in=one_in) if faults else st.sampled_from(good)

    ports = _ports if faults else st.sampled_from((80, 8080, 9090))
    return st.builds(
        Endpoint,
        service=among(SERVICES, ("web", "default/", "Shop/web"), one_in=12),
        protocol=(
            mostly(st.sampled_from((Protocol.HTTP, Protocol.TCP)), st.just(Protocol.UNSPECIFIED))
            if faults
            else st.sampled_from((Protocol.HTTP, Protocol.TCP))
        ),
        ip=among(IPS, ("10.0.0.256", "not-an-ip", "", "10.0.0.1 "), one_in=12),
        port=ports,
        ports=st.lists(ports, max_size=1).map(tuple),
        weight=among((1, 100, 1024), (0, UINT32_MAX), one_in=12),
        region=st.sampled_from(("", "eu-west-1")),
        zone=st.sampled_from(("", "eu-west-1a")),
        metadata=st.sampled_from(({}, {"version": "v1"}, {"track": "canary", "version": "v2"})),
        labels=st.sampled_from(({}, {"app": "web", "version": "v1"}, {"app": "web", "version": "v2"})),
        health=st.sampled_from(Health),
        health_check_mode=st.sampled_from(HealthCheckMode),
        namespace=st.sampled_from(("", *NAMESPACES)),
        pod_name=st.sampled_from(("", *POD_NAMES)),
        node_name=st.sampled_from(("", "node-a")),
        node_ip=st.sampled_from(("", "192.168.1.10")),
        cluster_name=st.sampled_from(("", "kind")),
    )


_wire_uint32s = st.one_of(st.sampled_from((0, 1, 8080, UINT32_MAX)), st.integers(0, UINT32_MAX))
_wire_texts = st.one_of(
    st.sampled_from(("", "x", "é\x00", "n" * 5000)), st.text(alphabet="ab.-/é\x00", max_size=8)
)  # zero values, unusual characters, and a record far over a kilobyte
_wire_maps = st.dictionaries(_wire_texts, _wire_texts, max_size=3)


def wire_endpoints() -> st.SearchStrategy[Endpoint]:
    """Endpoints with any value each field's wire type holds (zero values, UNSPECIFIED enums, long strings, many
    ports): what a checkpoint may carry, beyond what folding valid events gives."""
    return st.builds(
        Endpoint,
        service=st.one_of(st.sampled_from(SERVICES), _wire_texts),
        protocol=st.sampled_from(Protocol),
        ip=st.one_of(st.sampled_from(IPS), _wire_texts),
        port=_wire_uint32s,
        ports=st.lists(_wire_uint32s, max_size=40).map(tuple),
        weight=_wire_uint32s,
        region=_wire_texts,
        zone=_wire_texts,
        metadata=_wire_maps,
        health=st.sampled_from(Health),
        health_check_mode=st.sampled_from(HealthCheckMode),
        namespace=_wire_texts,
        pod_name=_wire_texts,
        node_name=_wire_texts,
        node_ip=_wire_texts,
        cluster_name=_wire_texts,
        labels=_wire_maps,
    )


@st.composite
def registry_states(draw: st.DrawFn) -> RegistryState:
    """A registry as a checkpoint holds it: endpoints drawn by `wire_endpoints` (often many of one service, as a
    real registry holds them), each under its own key, every service of them in the catalog, and some without."""
    drawn: list[Endpoint] = draw(st.lists(wire_endpoints(), max_size=40))
    one_service: bool = draw(st.booleans())
    if drawn and one_service:  # one service holding them all: long runs of one service
        drawn = [attrs.evolve(endpoint, service=drawn[0].service) for endpoint in drawn]
    by_service: dict[str, dict[tuple[Protocol, str], Endpoint]] = {}
    for endpoint in drawn:
        by_service.setdefault(endpoint.service, {})[(endpoint.protocol, endpoint.ip)] = endpoint
    services = set(by_service) | set(draw(st.lists(st.sampled_from(SERVICES), max_size=3)))
    return RegistryState(
        version=draw(_wire_texts),
        synced=draw(st.booleans()),
        services=immutables.Map((service, True) for service in services),
        endpoints=immutables.Map(
            (service, immutables.Map[tuple[Protocol, str], Endpoint](items))
            for service, items in by_service.items()
        ),
    )


def _event(cls: Callable[..., T], **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[T]:
    return st.builds(cls, observed_at=observed_ats, source=sources, **fields)


@st.composite
def snapshots(draw: st.DrawFn) -> EndpointsSnapshotReceived:
    """Full registry snapshots whose catalog mostly names the service of every endpoint (plus a few others)."""
    items = draw(st.lists(endpoints(), max_size=4))
    catalog = {item.service for item in items} | set(draw(st.lists(service_keys, max_size=2)))
    if items and draw(st.integers(0, 4)) == 4:
        catalog.discard(items[0].service)
    services: list[str] = draw(st.permutations(sorted(catalog)))
    # Passed as Any: attrs types a `converter=tuple` parameter with an unsolved type variable.
    contents: dict[str, Any] = {"endpoints": tuple(items), "services": tuple(services)}
    return EndpointsSnapshotReceived(
        observed_at=draw(observed_ats), source=draw(sources), version=draw(versions()), **contents
    )


# --- Kubernetes ---

_json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.text(alphabet='ab/é"\\', max_size=4)
)
json_values = st.recursive(
    _json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(alphabet="abcé", max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)
json_objects = st.dictionaries(st.text(alphabet="abcé", max_size=3), json_values, max_size=3)


@st.composite
def _non_canonical_json(draw: st.DrawFn) -> str:
    value = draw(json_objects)
    return draw(
        st.sampled_from(
            (
                json.dumps(value),
                json.dumps(value, indent=1),
                json.dumps(dict(reversed(list(value.items()))), separators=(",", ":")),
                json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=True),
            )
        )
    )


def spec_jsons() -> st.SearchStrategy[str]:
    """Specs: mostly canonical JSON objects; otherwise non-canonical, not objects, not JSON, or nested too deep."""
    bad = st.one_of(
        _non_canonical_json(),
        st.sampled_from(
            ("", "{", "not json", "[1,2]", "null", '"text"', '{"a":NaN}', "[" * 5000 + "]" * 5000)
        ),
    )
    return mostly(json_objects.map(canonical_json), bad, one_in=4)


def object_metas(
    kinds: tuple[str, ...], *, bad_kinds: tuple[str, ...] = ("Ingress",)
) -> st.SearchStrategy[ObjectMeta]:
    """Metadata of objects of `kinds` (of `bad_kinds` sometimes), with a few names and small generations."""
    return st.builds(
        ObjectMeta,
        kind=_among(kinds, bad_kinds),
        namespace=namespaces,
        name=_among(("web", "db", "canary"), ("Bad Name", "")),
        uid=uids,
        generation=mostly(st.integers(0, 4), st.sampled_from((-1, INT64_MAX))),
        resource_version=st.sampled_from(("", "1", "42")),
        creation_timestamp=st.sampled_from(("", "2024-01-01T00:00:00Z")),
    )


_GATEWAY_KINDS = tuple(sorted(GATEWAY_KINDS))
gateway_metas = object_metas(_GATEWAY_KINDS, bad_kinds=("ReferenceGrant", "Ingress", "Service"))
reference_grant_metas = object_metas(("ReferenceGrant",), bad_kinds=("HTTPRoute", "Ingress"))
service_metas = object_metas(("Service",), bad_kinds=("Endpoints", "HTTPRoute"))
secret_metas = object_metas(("Secret",), bad_kinds=("ConfigMap",))
namespace_metas = st.builds(
    ObjectMeta,
    kind=_among(("Namespace",), ("Service",)),
    namespace=mostly(st.just(""), namespaces),
    name=_among(("default", "shop", "edge"), ("Bad Name", "")),
    uid=uids,
)


def kube_namespaces() -> st.SearchStrategy[KubeNamespace]:
    """Namespaces of a few names, with or without a `team` label."""
    return st.builds(
        KubeNamespace,
        meta=namespace_metas,
        labels=st.sampled_from(({}, {"team": "shop"}, {"team": "edge", "tier": "front"})),
    )


slice_metas = object_metas(("EndpointSlice",), bad_kinds=("Endpoints", "Service"))


def kube_endpoint_slices() -> st.SearchStrategy[KubeEndpointSlice]:
    """EndpointSlices of a few Services (or none), mostly IPv4, with good and bad ports and addresses."""
    ports = st.lists(
        st.builds(
            SlicePort,
            name=st.sampled_from(("", "http", "grpc")),
            port=mostly(st.integers(1, 65535), st.sampled_from((0, 70000))),
            protocol=_among(("TCP", "UDP"), ("HTTP", "")),
        ),
        max_size=3,
    )
    endpoints = st.lists(
        st.builds(SliceEndpoint, addresses=st.lists(ips, max_size=2).map(tuple), ready=st.booleans()),
        max_size=3,
    )
    return st.builds(
        KubeEndpointSlice,
        meta=slice_metas,
        service=_among(("web", "db", ""), ("Bad Name",)),
        address_type=_among(("IPv4",), ("IPv6", "FQDN", "")),
        ports=ports.map(tuple),
        endpoints=endpoints.map(tuple),
    )


def kube_objects(metas: st.SearchStrategy[ObjectMeta]) -> st.SearchStrategy[KubeObject]:
    """Objects with the given metadata and a (mostly canonical) spec."""
    return st.builds(KubeObject, meta=metas, spec_json=spec_jsons())


def service_ports() -> st.SearchStrategy[ServicePort]:
    """Ports of a Service, mostly in range."""
    return st.builds(
        ServicePort,
        name=st.sampled_from(("", "http", "grpc")),
        port=_ports,
        target_port=st.sampled_from(("", "8080", "http")),
        protocol=st.sampled_from(("TCP", "UDP")),
        app_protocol=st.sampled_from(("", "http", "kubernetes.io/h2c")),
    )


def kube_services() -> st.SearchStrategy[KubeService]:
    """Services of a few names, mostly valid."""
    return st.builds(
        KubeService,
        meta=service_metas,
        selector=st.dictionaries(
            st.sampled_from(("app", "track")), st.sampled_from(("web", "db")), max_size=2
        ),
        ports=st.lists(service_ports(), max_size=2).map(tuple),
        cluster_ip=st.sampled_from(("", "10.96.0.10", "None")),
    )


def mesh_configs() -> st.SearchStrategy[MeshConfig]:
    """MeshConfigs, mostly valid (a bad domain, trust domain or TTL otherwise)."""
    return st.builds(
        MeshConfig,
        mesh_domain=_among(MESH_DOMAINS, ("Bad Domain", "", "-mesh")),
        trust_domain=trust_domains,
        on_demand_ttl_seconds=mostly(st.sampled_from((1, 60, 600)), st.sampled_from((0, -5))),
        generation=st.integers(0, 3),
        tracing_enabled=st.booleans(),
        trace_sample_per_million=mostly(
            st.sampled_from((0, 10_000, 1_000_000)), st.sampled_from((-1, 1_000_001))
        ),
    )


# --- identity ---


source_problems = _among(("",), ("the private key does not match the leaf certificate",))
"""What a source reports about identity material: mostly nothing, sometimes a problem (a rejection)."""


@st.composite
def svids(draw: st.DrawFn) -> Svid:
    """SVIDs of a few SPIFFE IDs, mostly good: a chain, a key, no problem, a leaf naming the same ID (or none).

    Most expire never (0) or far after every `observed_ats`; a minority expired before they are observed.
    """
    spiffe_id = draw(spiffe_ids)
    return Svid(
        spiffe_id=spiffe_id,
        cert_chain_pem=draw(mostly(st.sampled_from((b"cert-1", b"cert-2")), st.just(b""))),
        private_key=Redacted(draw(mostly(st.sampled_from((b"key-1", b"key-2")), st.just(b"")))),
        not_after=draw(mostly(st.sampled_from((0, AT + 10**15, INT64_MAX)), st.integers(0, AT + 10**12))),
        leaf_spiffe_id=draw(mostly(st.sampled_from(("", spiffe_id)), spiffe_ids)),
        problem=draw(source_problems),
        # Mostly nothing; sometimes the DNS SANs of HTTP/3 are missing (served, no QUIC inbound).
        http3_problem=draw(_among(("",), ("the certificate lacks the DNS SANs HTTP/3 needs",))),
    )


def tls_secrets() -> st.SearchStrategy[TlsSecret]:
    """TLS Secrets of a few names, mostly with both a certificate and a key."""
    return st.builds(
        TlsSecret,
        meta=secret_metas,
        cert_chain_pem=mostly(st.sampled_from((b"cert-1", b"cert-2")), st.just(b"")),
        private_key=st.builds(Redacted, mostly(st.sampled_from((b"key-1", b"key-2")), st.just(b""))),
    )


def trust_bundles() -> st.SearchStrategy[TrustBundle]:
    """Trust bundles of a few trust domains, mostly not empty and without a problem reported by their source."""
    return st.builds(
        TrustBundle,
        trust_domain=trust_domains,
        bundle_pem=mostly(st.sampled_from((b"ca-1", b"ca-2")), st.just(b"")),
        problem=source_problems,
    )


# --- xDS feedback ---

cluster_names = _among(
    (
        "web.default.aether.internal:8080",
        "db.shop.aether.internal:5432",
        "tcp:db.shop.aether.internal:5432",
        "web.default.mesh.local",
    ),
    ("example.com", "web", "udp:web.default.other.domain:53", ""),
)
xds_versions = st.sampled_from(("", "v1", "v2", "v3"))


# --- events ---

EVENT_STRATEGIES: Mapping[type[Event], st.SearchStrategy[Any]] = {
    PodAdded: _event(PodAdded, pod=pods()),
    PodUpdated: _event(PodUpdated, pod=pods()),
    PodRemoved: _event(PodRemoved, namespace=namespaces, name=pod_names, uid=uids),
    EndpointsSnapshotReceived: snapshots(),
    EndpointAdded: _event(EndpointAdded, version=versions(), endpoint=endpoints()),
    EndpointUpdated: _event(EndpointUpdated, version=versions(), endpoint=endpoints()),
    EndpointRemoved: _event(
        EndpointRemoved, version=versions(), service=service_keys, protocol=st.sampled_from(Protocol), ip=ips
    ),
    EndpointsSnapshotCompleted: _event(EndpointsSnapshotCompleted, version=versions()),
    RegistryServiceAdded: _event(RegistryServiceAdded, version=versions(), service=service_keys),
    RegistryServiceRemoved: _event(RegistryServiceRemoved, version=versions(), service=service_keys),
    KubeServiceUpserted: _event(KubeServiceUpserted, service=kube_services()),
    KubeServiceDeleted: _event(KubeServiceDeleted, meta=service_metas),
    GatewayObjectUpserted: _event(GatewayObjectUpserted, object=kube_objects(gateway_metas)),
    GatewayObjectDeleted: _event(GatewayObjectDeleted, meta=gateway_metas),
    ReferenceGrantUpserted: _event(ReferenceGrantUpserted, object=kube_objects(reference_grant_metas)),
    ReferenceGrantDeleted: _event(ReferenceGrantDeleted, meta=reference_grant_metas),
    TlsSecretUpserted: _event(TlsSecretUpserted, secret=tls_secrets()),
    TlsSecretDeleted: _event(TlsSecretDeleted, meta=secret_metas),
    NamespaceUpserted: _event(NamespaceUpserted, namespace=kube_namespaces()),
    NamespaceDeleted: _event(NamespaceDeleted, meta=namespace_metas),
    EndpointSliceUpserted: _event(EndpointSliceUpserted, slice=kube_endpoint_slices()),
    EndpointSliceDeleted: _event(EndpointSliceDeleted, meta=slice_metas),
    MeshConfigUpdated: _event(MeshConfigUpdated, config=mesh_configs()),
    SvidRotated: _event(SvidRotated, svid=svids()),
    SvidRemoved: _event(SvidRemoved, spiffe_id=spiffe_ids),
    TrustBundleRotated: _event(TrustBundleRotated, bundle=trust_bundles()),
    TrustBundleRemoved: _event(TrustBundleRemoved, trust_domain=trust_domains),
    ResourceAcked: _event(
        ResourceAcked,
        node_id=st.sampled_from(NODE_IDS),
        type_url=st.sampled_from(TYPE_URLS),
        version=xds_versions,
        nonce=st.sampled_from(("", "1", "2")),
    ),
    ResourceNacked: _event(
        ResourceNacked,
        node_id=st.sampled_from(NODE_IDS),
        type_url=st.sampled_from(TYPE_URLS),
        version=xds_versions,
        nonce=st.sampled_from(("", "1", "2")),
        error_code=st.sampled_from((0, 3, -1, INT32_MAX)),
        error_message=st.sampled_from(("", "cluster 'web': unknown field", "bad listener")),
    ),
    OnDemandClusterRequested: _event(
        OnDemandClusterRequested, node_id=st.sampled_from(NODE_IDS), cluster_name=cluster_names
    ),
    NodeCaptureConfigured: _event(
        NodeCaptureConfigured, node_name=st.sampled_from(("node-a", "node-b", "")), captured=st.booleans()
    ),
}
"""One strategy per event type of the catalog (a property test fails when a type of `EVENT_TYPES` is missing)."""


_WEIGHTS: Mapping[type[Event], int] = {
    PodAdded: 2,
    PodUpdated: 2,
    EndpointAdded: 4,
    EndpointUpdated: 2,
    RegistryServiceAdded: 3,
    KubeServiceUpserted: 2,
    GatewayObjectUpserted: 2,
    ReferenceGrantUpserted: 2,
    SvidRotated: 2,
    TrustBundleRotated: 2,
}
"""How often an event type is drawn relative to the others (1 when absent): upserts outnumber removals, so that
a sequence builds state up faster than it tears it down."""


def events() -> st.SearchStrategy[Event]:
    """Any event of the catalog; registry versions are drawn independently (`event_sequences` orders them)."""
    return st.one_of([EVENT_STRATEGIES[cls] for cls in EVENT_TYPES for _ in range(_WEIGHTS.get(cls, 1))])


_REGISTRY_EVENTS = (
    EndpointsSnapshotReceived,
    EndpointAdded,
    EndpointUpdated,
    EndpointRemoved,
    EndpointsSnapshotCompleted,
    RegistryServiceAdded,
    RegistryServiceRemoved,
)
_VERSION_STEPS = (1, 1, 1, 1, 2, 0, 0, -1)
"""How the registry counter moves between two registry events: mostly up, sometimes repeated, sometimes down."""


@st.composite
def event_sequences(draw: st.DrawFn, *, max_size: int = MAX_EVENTS) -> tuple[Event, ...]:
    """Sequences of events whose registry versions follow a counter that mostly goes up and sometimes down.

    One registry event in ten gets a version that is no counter at all.
    """
    # Lists drawn directly average a handful of items; a drawn size spreads lengths over the whole range.
    size = draw(st.integers(0, max_size))
    drawn = draw(st.lists(events(), min_size=size, max_size=size))
    counter = 0
    sequence: list[Event] = []
    for event in drawn:
        if isinstance(event, _REGISTRY_EVENTS):
            if draw(st.integers(0, 9)) == 9:
                version = draw(bad_versions)
            else:
                counter = max(0, counter + draw(st.sampled_from(_VERSION_STEPS)))
                version = str(counter)
            event = attrs.evolve(event, version=version)
        sequence.append(event)
    return tuple(sequence)


def records(*, max_size: int = MAX_EVENTS) -> st.SearchStrategy[tuple[Record, ...]]:
    """Event sequences as log records, with consecutive sequence numbers from 1."""
    return event_sequences(max_size=max_size).map(
        lambda sequence: tuple(Record(seq=seq, event=event) for seq, event in enumerate(sequence, 1))
    )


# --- xDS requests (the ADS stream machines' inputs) ---

XDS_NODE = NODE_IDS[0]
XDS_MAX_INPUTS = 24
"""The longest input sequence of one fuzzed stream: enough to subscribe every type, see three snapshots and ACK or NACK
each, while staying inside hypothesis's buffer (longer ones overrun it and are drawn again, slowly)."""
XDS_NAMES = ("a", "b", "routes", "http")
"""Resource names the xDS snapshots hold (clusters and assignments a and b, route `routes`, listener `http`)."""
_XDS_TYPE_URLS = (*TYPE_ORDER, "type.googleapis.com/envoy.Nope", "")


def _xds_snapshot(
    seq: int, *, clusters: tuple[str, ...], timeout_ms: int, not_found: tuple[str, ...]
) -> Snapshot:
    resources = [
        Resource.from_message(make_cluster(name, connect_timeout_ms=timeout_ms)) for name in clusters
    ]
    resources += [
        Resource.from_message(make_load_assignment(name, [("127.0.0.1", 8000 + seq)])) for name in clusters
    ]
    resources.append(Resource.from_message(make_route_configuration("routes", routes=[("/", clusters[0])])))
    resources.append(Resource.from_message(make_listener("http", port=18081, route_config_name="routes")))
    return Snapshot.build(node_id=XDS_NODE, seq=seq, resources=resources, not_found=not_found)


XDS_SNAPSHOTS = (
    _xds_snapshot(1, clusters=("a",), timeout_ms=250, not_found=()),
    _xds_snapshot(2, clusters=("a", "b"), timeout_ms=250, not_found=("ghost",)),
    _xds_snapshot(3, clusters=("b",), timeout_ms=900, not_found=()),
)
"""The snapshots a fuzzed stream is published: clusters come, change and go, and one name is known not to exist."""

XDS_LAST_NONCE = "<last>"
"""A nonce the fuzz driver replaces with the nonce of the stream's last response of the request's type (so ACKs and
NACKs answer something); with no such response yet it becomes the empty nonce."""
_xds_names = _among((*XDS_NAMES, "*", "ghost"), ("", "é\x00"), one_in=25)
_xds_nonces = _among(("", XDS_LAST_NONCE, XDS_LAST_NONCE), ("1", "0", "99", "x", "٣", " 1"), one_in=20)
_xds_versions = st.sampled_from(
    (
        "",
        *(snapshot.version(type_url) for snapshot in XDS_SNAPSHOTS for type_url in TYPE_ORDER),
        *(
            resource.digest
            for snapshot in XDS_SNAPSHOTS
            for items in snapshot.resources.values()
            for resource in items.values()
        ),
        "stale",
    )
)


@st.composite
def _xds_common(draw: st.DrawFn, request: Any) -> Any:
    """Fill what both request kinds share: node (mostly ours), type, nonce, and sometimes an error (a NACK)."""
    # A node id may be left out after the first request; leaving it out of the first ends the stream.
    node = draw(_among((XDS_NODE,), ("", NODE_IDS[1]), one_in=12))
    if node:
        request.node.id = node
    request.type_url = draw(_among(TYPE_ORDER, _XDS_TYPE_URLS[len(TYPE_ORDER) :], one_in=60))
    request.response_nonce = draw(_xds_nonces)
    if draw(st.integers(0, 4)) == 4:
        request.error_detail.code = 3
        request.error_detail.message = draw(small_text)
    return request


@st.composite
def sotw_requests(draw: st.DrawFn) -> discovery_pb2.DiscoveryRequest:
    """SotW requests: subscriptions (wildcard, by name, changing names), ACKs and NACKs, with mistakes."""
    request = draw(_xds_common(discovery_pb2.DiscoveryRequest()))
    request.resource_names.extend(draw(st.lists(_xds_names, max_size=3)))
    request.version_info = draw(_xds_versions)
    return request


@st.composite
def delta_requests(draw: st.DrawFn) -> discovery_pb2.DeltaDiscoveryRequest:
    """Delta requests: (un)subscriptions, reconnects stating held versions, ACKs and NACKs, with mistakes."""
    request = draw(_xds_common(discovery_pb2.DeltaDiscoveryRequest()))
    request.resource_names_subscribe.extend(draw(st.lists(_xds_names, max_size=3)))
    # Unsubscribing a name never subscribed ends the stream: keep it rare enough that streams run on.
    request.resource_names_unsubscribe.extend(
        draw(mostly(st.just([]), st.lists(_xds_names, max_size=2), one_in=10))
    )
    # A reconnect states versions of what it subscribes (the wildcard types: of anything), old, current or made up.
    subscribed: list[str] = list(request.resource_names_subscribe)
    held: st.SearchStrategy[str] = _xds_names
    stated_subscribed: bool = draw(st.booleans())
    if subscribed and stated_subscribed:
        held = st.sampled_from(subscribed)
    for name, version in draw(st.dictionaries(held, _xds_versions, max_size=3)).items():
        request.initial_resource_versions[name] = version
    return request


def _serialized_without_placeholder(request: Any) -> bytes:
    if request.response_nonce == XDS_LAST_NONCE:
        request.response_nonce = ""  # the driver cannot reach into bytes to put the last nonce there
    serialized: bytes = request.SerializeToString()
    return serialized


@st.composite
def _mangled(draw: st.DrawFn, serialized: bytes) -> bytes:
    if serialized and draw(st.booleans()):
        index = draw(st.integers(0, len(serialized) - 1))
        return serialized[:index] + bytes([draw(st.integers(0, 255))]) + serialized[index + 1 :]
    if serialized and draw(st.booleans()):
        return serialized[: draw(st.integers(0, len(serialized) - 1))]
    return draw(st.binary(max_size=40))


def request_bytes(requests: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    """What a gRPC message may carry: mostly a request serialized whole; sometimes one with a byte changed, cut
    short, or plain junk (which mostly ends the stream)."""
    return requests.map(_serialized_without_placeholder).flatmap(
        lambda serialized: mostly(st.just(serialized), _mangled(serialized), one_in=12)
    )


@st.composite
def xds_stream_inputs(draw: st.DrawFn, requests: st.SearchStrategy[Any]) -> list[Any]:
    """What one ADS stream receives, in order: requests (as messages or bytes) and snapshots of its node."""
    snapshots = st.sampled_from(XDS_SNAPSHOTS)
    items = st.one_of(requests, requests, requests, request_bytes(requests), snapshots, snapshots)
    # Lists drawn directly average a handful of items; a drawn size spreads lengths over the whole range.
    size = draw(st.integers(0, XDS_MAX_INPUTS))
    return draw(st.lists(items, min_size=size, max_size=size))


# --- snapshot changes (what `Snapshot.with_changes` is given) ---

_REF_NAMES = ("a", "b", "c")


def _referring(name: str, references: tuple[str, ...], *, listener: bool) -> Resource:
    message = (
        make_listener(name, port=18081, route_config_name="r")
        if listener
        else make_cluster(name, connect_timeout_ms=250)
    )
    return Resource.from_message(message, references=references)


SNAPSHOT_RESOURCES: tuple[Resource, ...] = (
    *(
        _referring(name, references, listener=listener)
        for name in _REF_NAMES
        for references in ((), (name,), ("a", "b"), ("c", "c"))
        for listener in (False, True)
    ),
    *(Resource.from_message(make_load_assignment(name, [("127.0.0.1", 8000)])) for name in _REF_NAMES),
    *(Resource.from_message(make_route_configuration(name, routes=[("/", "a")])) for name in _REF_NAMES),
)
"""Clusters and listeners referring to none, their namesake, two or one twice of a, b and c; and the load
assignments and route configurations of those names."""


@st.composite
def snapshot_changes(draw: st.DrawFn) -> tuple[tuple[Resource, ...], tuple[tuple[str, str], ...]]:
    """One `with_changes` call: a few upserts (replacing what a name held) and removals (some of nothing)."""
    upserted = draw(st.lists(st.sampled_from(SNAPSHOT_RESOURCES), max_size=3))
    removed = draw(
        st.lists(st.tuples(st.sampled_from(TYPE_ORDER[:4]), st.sampled_from(_REF_NAMES)), max_size=3)
    )
    return tuple(upserted), tuple(removed)


# --- the registrar watch (the agent's watch machine's inputs) ---

WATCH_SERVICES = SERVICES[:3]
"""The services a watched registry holds; the third is in no filter but the wildcard."""
WATCH_HISTORY_LIMIT = 6
"""The modelled registry's history: short, so that some resumes fall behind it and get a full resync."""
WATCH_MAX_STEPS = 30


_WATCH_ENDPOINTS = tuple(
    Endpoint(service=service, protocol=protocol, ip=ip, port=port, node_name=node_name)
    for service in WATCH_SERVICES
    for protocol in (Protocol.HTTP, Protocol.TCP)
    for ip in IPS[:3]
    for port, node_name in ((8080, ""), (9090, "node-a"))
)
"""Valid endpoints, two versions of each key (a registration that changes one): drawn from a table, since building
them field by field is most of a watch test's time."""
_BAD_WATCH_ENDPOINTS = (
    Endpoint(service="web", ip="10.0.0.1"),
    Endpoint(service=SERVICES[0], ip="not-an-ip"),
    Endpoint(service=SERVICES[0], ip="10.0.0.1", port=0),
    Endpoint(service=SERVICES[0], ip="10.0.0.1", weight=UINT32_MAX),
)


def _watch_endpoints() -> st.SearchStrategy[Endpoint]:
    """Valid endpoints only: the model checks what a correct registrar's changes become."""
    return st.sampled_from(_WATCH_ENDPOINTS)


def registry_mutations() -> st.SearchStrategy[Mutation]:
    """Registrations (new, changed, equal) and unregistrations (known and unknown IPs) of a few endpoints."""
    return st.one_of(
        st.builds(EndpointRegistered, endpoint=_watch_endpoints()),
        st.builds(
            EndpointsUnregistered,
            service=st.sampled_from(WATCH_SERVICES),
            ips=st.lists(st.sampled_from(IPS[:3]), min_size=1, max_size=2).map(tuple),
        ),
    )


@attrs.frozen
class WatchMutated:
    """The registry applies `mutation` (a live stream gets its changes)."""

    mutation: Mutation


@attrs.frozen
class WatchDelivered:
    """The registrar's next `count` pending messages reach the agent (fewer when fewer are pending)."""

    count: int


@attrs.frozen
class WatchBroken:
    """The stream breaks: what is still pending is lost; the agent reconnects."""


@attrs.frozen
class WatchRefiltered:
    """The agent's filter becomes `services` (None: all): it ends the stream and reconnects."""

    services: frozenset[str] | None


WatchStep = WatchMutated | WatchDelivered | WatchBroken | WatchRefiltered

_watch_filters = st.one_of(
    st.none(), st.frozensets(st.sampled_from(WATCH_SERVICES[:2]), min_size=0, max_size=2)
)


@st.composite
def watch_steps(draw: st.DrawFn) -> list[WatchStep]:
    """A registry that changes while the agent's stream delivers, breaks (often inside a version) and refilters."""
    step = st.one_of(
        st.builds(WatchMutated, registry_mutations()),
        st.builds(WatchMutated, registry_mutations()),
        st.builds(WatchDelivered, st.integers(1, 4)),
        st.builds(WatchDelivered, st.integers(1, 4)),
        st.just(WatchBroken()),
        st.just(WatchBroken()),
        mostly(st.builds(WatchDelivered, st.integers(1, 4)), st.builds(WatchRefiltered, _watch_filters)),
    )
    # Lists drawn directly average a handful of items; a drawn size spreads lengths over the whole range.
    size = draw(st.integers(0, WATCH_MAX_STEPS))
    return draw(st.lists(step, min_size=size, max_size=size))


def watch_filters() -> st.SearchStrategy[frozenset[str] | None]:
    """A watch's filter: every service, or some of them (maybe none)."""
    return _watch_filters


_watch_versions = st.integers(0, 3)
_watch_any_endpoint = _among(_WATCH_ENDPOINTS, _BAD_WATCH_ENDPOINTS, one_in=8)
_WATCH_KINDS = (*ChangeKind, ChangeKind.FULL_SNAPSHOT, ChangeKind.SNAPSHOT_COMPLETE)
"""Every kind, and more of those that open and close a sync: streams then get past their first event."""


@st.composite
def watch_changes(draw: st.DrawFn) -> Change:
    """Watch events of any kind at small versions, in or out of protocol: mostly with the fields their kind has
    (a FULL_SNAPSHOT with or without endpoint), sometimes with any fields (bad endpoints, missing ones)."""
    kind = draw(st.sampled_from(_WATCH_KINDS))
    version = draw(_watch_versions)
    if draw(st.integers(0, 7)) == 7:
        return Change(
            kind=kind,
            version=version,
            service=draw(st.sampled_from(("", *WATCH_SERVICES))),
            protocol=draw(st.sampled_from(Protocol)),
            ip=draw(st.sampled_from(("", *IPS[:2]))),
            endpoint=draw(st.one_of(st.none(), _watch_any_endpoint)),
        )
    if kind is ChangeKind.SNAPSHOT_COMPLETE or (kind is ChangeKind.FULL_SNAPSHOT and draw(st.booleans())):
        return Change(kind=kind, version=version)
    if kind in (ChangeKind.SERVICE_ADDED, ChangeKind.SERVICE_REMOVED):
        return Change(kind=kind, version=version, service=draw(st.sampled_from(WATCH_SERVICES)))
    endpoint = draw(_watch_any_endpoint)
    named = Change(
        kind=kind, version=version, service=endpoint.service, protocol=endpoint.protocol, ip=endpoint.ip
    )
    return named if kind is ChangeKind.ENDPOINT_REMOVED else attrs.evolve(named, endpoint=endpoint)


@st.composite
def watch_responses(draw: st.DrawFn) -> registrar_pb2.WatchEndpointsResponse:
    """Watch messages: mostly a change as the registrar encodes it, sometimes one with a made-up type or version."""
    response = change_to_proto(draw(watch_changes()))
    if draw(st.integers(0, 9)) == 9:
        response.type = draw(st.integers(0, 9))  # type: ignore[assignment]
    if draw(st.integers(0, 9)) == 9:
        response.version = draw(st.sampled_from(("", "-1", "x", "1" * 21, "٣")))
    return response


@attrs.frozen
class WatchConnected:
    """The agent opens a stream with `services` as its filter."""

    services: frozenset[str] | None


@attrs.frozen
class WatchDisconnected:
    """The stream ends."""


WatchInput = WatchConnected | WatchDisconnected | WatchRefiltered | registrar_pb2.WatchEndpointsResponse


@st.composite
def watch_inputs(draw: st.DrawFn) -> list[WatchInput]:
    """Anything the machine can be fed, in any order: streams that open and end, filter changes and messages."""
    messages = watch_responses()
    item: st.SearchStrategy[WatchInput] = st.one_of(
        st.builds(WatchConnected, _watch_filters),
        mostly(messages, st.one_of(st.just(WatchDisconnected()), st.builds(WatchRefiltered, _watch_filters))),
        messages,
        messages,
        messages,
    )
    size = draw(st.integers(0, WATCH_MAX_STEPS))
    return draw(st.lists(item, min_size=size, max_size=size))


_RUN_VERSION_STEPS = (0, 1, 1, 1, 1, 2)


@st.composite
def upsert_runs(draw: st.DrawFn, *, max_size: int = MAX_EVENTS) -> tuple[Record, ...]:
    """Records as replay meets them in a churning registry: a snapshot declaring every service, then runs of endpoint
    upserts of valid endpoints (one kind per run) under a counter that seldom goes down or breaks, now and then any
    other event (an upsert run a fold takes whole, or broken where it cannot)."""
    snapshot = draw(EVENT_STRATEGIES[EndpointsSnapshotReceived])
    sequence: list[Event] = [attrs.evolve(snapshot, version="1", services=SERVICES)]
    counter = 1
    kind: type[EndpointAdded] | type[EndpointUpdated] = EndpointUpdated
    valid = endpoints(faults=False)
    for _ in range(draw(st.integers(0, max_size))):
        roll = draw(st.integers(0, 39))
        if roll == 0:
            sequence.append(draw(events()))
            continue
        if roll == 1:
            kind = EndpointAdded if kind is EndpointUpdated else EndpointUpdated
        if roll == 2:
            version = draw(bad_versions)
        else:
            counter = max(0, counter + (-1 if roll == 3 else draw(st.sampled_from(_RUN_VERSION_STEPS))))
            version = str(counter)
        event = kind(
            observed_at=draw(observed_ats), source=draw(sources), version=version, endpoint=draw(valid)
        )
        sequence.append(event)
    return tuple(Record(seq=seq, event=event) for seq, event in enumerate(sequence, 1))
