"""Builders of events and values for tests: sensible defaults, a fixed observation time, keyword-only options.

Every builder returns a plain core value, so a test reads as the events it folds (STYLE T1).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from aether.core.events import (
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
from aether.core.reduce import fold_all
from aether.core.reduce.annotations import MANAGED_LABEL
from aether.core.reduce.kube import canonical_json
from aether.core.state import EMPTY_STATE, Diagnostics, State
from aether.core.values import Redacted, StrMap, freeze_str_map

AT = 1_700_000_000_000_000_000
"""The observation time every builder stamps unless told otherwise (2023-11-14T22:13:20Z, in nanoseconds)."""

MANAGED_LABELS: StrMap = freeze_str_map({MANAGED_LABEL: "true"})
"""The labels of a pod that joins the mesh: the default of `make_pod`."""

CLUSTER_TYPE_URL = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
"""The CDS type URL, the default resource type of the xDS feedback builders."""

CERT_PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
"""A placeholder certificate (the core never parses PEM, it only requires it to be present)."""

KEY_PEM = b"-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"
"""A placeholder private key."""


def _tuple(values: Iterable[object]) -> Any:
    # attrs types a `converter=tuple` parameter as `Iterable[_T_co]` with the type variable left unsolved, so
    # strict mypy rejects every concrete argument; the converter makes it a tuple either way.
    return tuple(values)


# --- values ---


def make_pod(
    name: str = "web-1",
    *,
    namespace: str = "default",
    service_account: str = "web",
    uid: str = "",
    node_name: str = "node-a",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    ips: Iterable[str] = ("10.0.0.1",),
    netns: str = "",
    container_id: str = "",
) -> Pod:
    """Return a pod of this node; `labels` default to the managed label, so the pod joins the mesh."""
    return Pod(
        namespace=namespace,
        name=name,
        uid=uid,
        node_name=node_name,
        service_account=service_account,
        labels=MANAGED_LABELS if labels is None else labels,
        annotations={} if annotations is None else annotations,
        ips=_tuple(ips),
        netns=netns,
        container_id=container_id,
    )


def make_endpoint(
    ip: str = "10.0.0.1",
    *,
    service: str = "default/web",
    protocol: Protocol = Protocol.HTTP,
    port: int = 8080,
    ports: Iterable[int] = (),
    weight: int = 1024,
    region: str = "",
    zone: str = "",
    metadata: Mapping[str, str] | None = None,
    health: Health = Health.HEALTHY,
    health_check_mode: HealthCheckMode = HealthCheckMode.EDS,
    namespace: str = "",
    pod_name: str = "",
    node_name: str = "",
    node_ip: str = "",
    cluster_name: str = "",
    labels: Mapping[str, str] | None = None,
) -> Endpoint:
    """Return a healthy HTTP endpoint of mesh service `service` (`<namespace>/<serviceAccount>`)."""
    return Endpoint(
        service=service,
        protocol=protocol,
        ip=ip,
        port=port,
        ports=_tuple(ports),
        weight=weight,
        region=region,
        zone=zone,
        metadata={} if metadata is None else metadata,
        health=health,
        health_check_mode=health_check_mode,
        namespace=namespace,
        pod_name=pod_name,
        node_name=node_name,
        node_ip=node_ip,
        cluster_name=cluster_name,
        labels={} if labels is None else labels,
    )


def make_meta(
    name: str = "web",
    *,
    kind: str = "Service",
    namespace: str = "default",
    uid: str = "",
    generation: int = 1,
    resource_version: str = "",
    creation_timestamp: str = "",
) -> ObjectMeta:
    """Return the metadata of a Kubernetes object (by default: Service `default/web`, generation 1)."""
    return ObjectMeta(
        kind=kind,
        namespace=namespace,
        name=name,
        uid=uid,
        generation=generation,
        resource_version=resource_version,
        creation_timestamp=creation_timestamp,
    )


def make_kube_service(
    name: str = "web",
    *,
    namespace: str = "default",
    meta: ObjectMeta | None = None,
    selector: Mapping[str, str] | None = None,
    ports: Iterable[ServicePort] | None = None,
    cluster_ip: str = "10.96.0.10",
) -> KubeService:
    """Return a Service selecting `app=<name>` on port 80 (a given `meta` wins over name and namespace)."""
    return KubeService(
        meta=make_meta(name, namespace=namespace) if meta is None else meta,
        selector={"app": name} if selector is None else selector,
        ports=_tuple([ServicePort(name="http", port=80, target_port="8080")] if ports is None else ports),
        cluster_ip=cluster_ip,
    )


def make_kube_object(
    name: str = "canary",
    *,
    kind: str = "HTTPRoute",
    namespace: str = "default",
    uid: str = "",
    generation: int = 1,
    spec: Mapping[str, object] | None = None,
    spec_json: str | None = None,
) -> KubeObject:
    """Return a Gateway API object (an HTTPRoute by default).

    Args:
        spec: The spec as a mapping, written as canonical JSON (default: an empty object).
        spec_json: The spec's exact text, used as is (a non-canonical or invalid spec); wins over `spec`.
    """
    text = spec_json if spec_json is not None else canonical_json(dict(spec or {}))
    meta = make_meta(name, kind=kind, namespace=namespace, uid=uid, generation=generation)
    return KubeObject(meta=meta, spec_json=text)


def make_tls_secret(
    name: str = "web-cert",
    *,
    namespace: str = "default",
    uid: str = "",
    cert_chain_pem: bytes = CERT_PEM,
    private_key: bytes = KEY_PEM,
) -> TlsSecret:
    """Return a `kubernetes.io/tls` Secret (placeholder PEM unless given)."""
    return TlsSecret(
        meta=make_meta(name, kind="Secret", namespace=namespace, uid=uid),
        cert_chain_pem=cert_chain_pem,
        private_key=Redacted(private_key),
    )


def make_mesh_config(
    *,
    mesh_domain: str = "aether.internal",
    trust_domain: str = "aether.internal",
    on_demand_ttl_seconds: int = 600,
    generation: int = 1,
    tracing_enabled: bool = False,
    trace_sample_per_million: int = 0,
) -> MeshConfig:
    """Return a MeshConfig (the defaults of the mesh, at generation 1)."""
    return MeshConfig(
        mesh_domain=mesh_domain,
        trust_domain=trust_domain,
        on_demand_ttl_seconds=on_demand_ttl_seconds,
        generation=generation,
        tracing_enabled=tracing_enabled,
        trace_sample_per_million=trace_sample_per_million,
    )


def make_svid(
    spiffe_id: str = "spiffe://aether.internal/ns/default/sa/web",
    *,
    cert_chain_pem: bytes = CERT_PEM,
    private_key: bytes = KEY_PEM,
    not_after: int = AT + 3_600 * 1_000_000_000,
    leaf_spiffe_id: str = "",
    problem: str = "",
    http3_problem: str = "",
) -> Svid:
    """Return an SVID for `spiffe_id`, valid for an hour after `AT`."""
    return Svid(
        spiffe_id=spiffe_id,
        cert_chain_pem=cert_chain_pem,
        private_key=Redacted(private_key),
        not_after=not_after,
        leaf_spiffe_id=leaf_spiffe_id,
        problem=problem,
        http3_problem=http3_problem,
    )


def make_trust_bundle(
    trust_domain: str = "aether.internal", *, bundle_pem: bytes = CERT_PEM, problem: str = ""
) -> TrustBundle:
    """Return the trust bundle of `trust_domain`."""
    return TrustBundle(trust_domain=trust_domain, bundle_pem=bundle_pem, problem=problem)


# --- pod events ---


def pod_added(pod: Pod, *, at: int = AT, source: str = "cni") -> PodAdded:
    """Return the event of `pod` being added on this node."""
    return PodAdded(observed_at=at, source=source, pod=pod)


def pod_updated(pod: Pod, *, at: int = AT, source: str = "kubernetes") -> PodUpdated:
    """Return the event of `pod` having changed."""
    return PodUpdated(observed_at=at, source=source, pod=pod)


def pod_removed(
    name: str = "web-1", *, namespace: str = "default", uid: str = "", at: int = AT, source: str = "cni"
) -> PodRemoved:
    """Return the event of pod `<namespace>/<name>` leaving this node (only incarnation `uid` when given)."""
    return PodRemoved(observed_at=at, source=source, namespace=namespace, name=name, uid=uid)


def node_capture_configured(
    node_name: str = "node-a", *, captured: bool = True, at: int = AT, source: str = "agent"
) -> NodeCaptureConfigured:
    """Return the event of `node_name`'s agent starting with its CNI service (`captured`) or without it."""
    return NodeCaptureConfigured(observed_at=at, source=source, node_name=node_name, captured=captured)


# --- registry events ---


def endpoints_snapshot_received(
    *endpoints: Endpoint,
    version: str = "1",
    services: Iterable[str] | None = None,
    at: int = AT,
    source: str = "registrar",
) -> EndpointsSnapshotReceived:
    """Return a full registry snapshot; `services` default to the distinct services of `endpoints`, sorted."""
    catalog = sorted({endpoint.service for endpoint in endpoints}) if services is None else services
    return EndpointsSnapshotReceived(
        observed_at=at, source=source, version=version, endpoints=_tuple(endpoints), services=_tuple(catalog)
    )


def endpoints_snapshot_completed(
    version: str = "1", *, at: int = AT, source: str = "registrar"
) -> EndpointsSnapshotCompleted:
    """Return the end of a registry (re)sync at `version`."""
    return EndpointsSnapshotCompleted(observed_at=at, source=source, version=version)


def endpoint_added(
    endpoint: Endpoint, *, version: str = "1", at: int = AT, source: str = "registrar"
) -> EndpointAdded:
    """Return the event of `endpoint` appearing in the registry at `version`."""
    return EndpointAdded(observed_at=at, source=source, version=version, endpoint=endpoint)


def endpoint_updated(
    endpoint: Endpoint, *, version: str = "1", at: int = AT, source: str = "registrar"
) -> EndpointUpdated:
    """Return the event of `endpoint` having changed at `version`."""
    return EndpointUpdated(observed_at=at, source=source, version=version, endpoint=endpoint)


def endpoint_removed(
    endpoint: Endpoint, *, version: str = "1", at: int = AT, source: str = "registrar"
) -> EndpointRemoved:
    """Return the event of `endpoint` (its service, protocol and IP) leaving the registry at `version`."""
    return EndpointRemoved(
        observed_at=at,
        source=source,
        version=version,
        service=endpoint.service,
        protocol=endpoint.protocol,
        ip=endpoint.ip,
    )


def registry_service_added(
    service: str = "default/web", *, version: str = "1", at: int = AT, source: str = "registrar"
) -> RegistryServiceAdded:
    """Return the event of `service` entering the mesh catalog at `version`."""
    return RegistryServiceAdded(observed_at=at, source=source, version=version, service=service)


def registry_service_removed(
    service: str = "default/web", *, version: str = "1", at: int = AT, source: str = "registrar"
) -> RegistryServiceRemoved:
    """Return the event of `service` leaving the mesh catalog at `version`."""
    return RegistryServiceRemoved(observed_at=at, source=source, version=version, service=service)


# --- Kubernetes events ---


def kube_service_upserted(
    service: KubeService, *, at: int = AT, source: str = "kubernetes"
) -> KubeServiceUpserted:
    """Return the event of `service` being created or changed."""
    return KubeServiceUpserted(observed_at=at, source=source, service=service)


def kube_service_deleted(meta: ObjectMeta, *, at: int = AT, source: str = "kubernetes") -> KubeServiceDeleted:
    """Return the event of the Service `meta` names being deleted."""
    return KubeServiceDeleted(observed_at=at, source=source, meta=meta)


def gateway_object_upserted(
    item: KubeObject, *, at: int = AT, source: str = "kubernetes"
) -> GatewayObjectUpserted:
    """Return the event of Gateway API object `item` being created or changed."""
    return GatewayObjectUpserted(observed_at=at, source=source, object=item)


def gateway_object_deleted(
    meta: ObjectMeta, *, at: int = AT, source: str = "kubernetes"
) -> GatewayObjectDeleted:
    """Return the event of the Gateway API object `meta` names being deleted."""
    return GatewayObjectDeleted(observed_at=at, source=source, meta=meta)


def reference_grant_upserted(
    item: KubeObject, *, at: int = AT, source: str = "kubernetes"
) -> ReferenceGrantUpserted:
    """Return the event of ReferenceGrant `item` being created or changed."""
    return ReferenceGrantUpserted(observed_at=at, source=source, object=item)


def reference_grant_deleted(
    meta: ObjectMeta, *, at: int = AT, source: str = "kubernetes"
) -> ReferenceGrantDeleted:
    """Return the event of the ReferenceGrant `meta` names being deleted."""
    return ReferenceGrantDeleted(observed_at=at, source=source, meta=meta)


def tls_secret_upserted(
    secret: TlsSecret | None = None, *, at: int = AT, source: str = "kubernetes"
) -> TlsSecretUpserted:
    """Return the event of TLS Secret `secret` being created or changed (default: `make_tls_secret()`)."""
    return TlsSecretUpserted(
        observed_at=at, source=source, secret=make_tls_secret() if secret is None else secret
    )


def tls_secret_deleted(meta: ObjectMeta, *, at: int = AT, source: str = "kubernetes") -> TlsSecretDeleted:
    """Return the event of the TLS Secret `meta` names being deleted."""
    return TlsSecretDeleted(observed_at=at, source=source, meta=meta)


def namespace_upserted(
    name: str = "default",
    labels: Mapping[str, str] | None = None,
    *,
    at: int = AT,
    source: str = "kubernetes",
) -> NamespaceUpserted:
    """Return the event of Namespace `name` with `labels` being created or changed (the API server's
    `kubernetes.io/metadata.name` label is added, as it always is)."""
    meta = ObjectMeta(kind="Namespace", name=name, uid=f"uid-namespace-{name}", generation=1)
    every = {"kubernetes.io/metadata.name": name, **(labels or {})}
    return NamespaceUpserted(observed_at=at, source=source, namespace=KubeNamespace(meta=meta, labels=every))


def namespace_deleted(name: str, *, at: int = AT, source: str = "kubernetes") -> NamespaceDeleted:
    """Return the event of Namespace `name` being deleted."""
    return NamespaceDeleted(observed_at=at, source=source, meta=ObjectMeta(kind="Namespace", name=name))


def make_endpoint_slice(
    name: str = "legacy-1",
    *,
    namespace: str = "shop",
    service: str = "legacy",
    addresses: Sequence[str] = ("10.9.0.1",),
    ports: Sequence[tuple[str, int]] = (("http", 8080),),
    address_type: str = "IPv4",
    not_ready: Sequence[str] = (),
) -> KubeEndpointSlice:
    """Return EndpointSlice `name` of Service `service`: one endpoint per address (ready unless in `not_ready`)
    and the `(name, port)` ports."""
    return KubeEndpointSlice(
        meta=ObjectMeta(kind="EndpointSlice", namespace=namespace, name=name, uid=f"uid-slice-{name}"),
        service=service,
        address_type=address_type,
        ports=tuple(SlicePort(name=port_name, port=port) for port_name, port in ports),
        endpoints=tuple(
            SliceEndpoint(addresses=(address,), ready=address not in not_ready) for address in addresses
        ),
    )


def endpoint_slice_upserted(
    endpoint_slice: KubeEndpointSlice | None = None, *, at: int = AT, source: str = "kubernetes"
) -> EndpointSliceUpserted:
    """Return the event of EndpointSlice `endpoint_slice` (default: `make_endpoint_slice()`) being created or
    changed."""
    return EndpointSliceUpserted(observed_at=at, source=source, slice=endpoint_slice or make_endpoint_slice())


def endpoint_slice_deleted(
    name: str = "legacy-1", *, namespace: str = "shop", at: int = AT, source: str = "kubernetes"
) -> EndpointSliceDeleted:
    """Return the event of EndpointSlice `namespace/name` being deleted."""
    meta = ObjectMeta(kind="EndpointSlice", namespace=namespace, name=name)
    return EndpointSliceDeleted(observed_at=at, source=source, meta=meta)


def mesh_config_updated(
    config: MeshConfig | None = None, *, at: int = AT, source: str = "kubernetes"
) -> MeshConfigUpdated:
    """Return the event of the MeshConfig changing to `config` (default: `make_mesh_config()`)."""
    return MeshConfigUpdated(
        observed_at=at, source=source, config=make_mesh_config() if config is None else config
    )


# --- identity events ---


def svid_rotated(svid: Svid | None = None, *, at: int = AT, source: str = "identity") -> SvidRotated:
    """Return the event of `svid` being issued (default: `make_svid()`)."""
    return SvidRotated(observed_at=at, source=source, svid=make_svid() if svid is None else svid)


def svid_removed(
    spiffe_id: str = "spiffe://aether.internal/ns/default/sa/web", *, at: int = AT, source: str = "identity"
) -> SvidRemoved:
    """Return the event of the SVID of `spiffe_id` no longer being issued."""
    return SvidRemoved(observed_at=at, source=source, spiffe_id=spiffe_id)


def trust_bundle_rotated(
    bundle: TrustBundle | None = None, *, at: int = AT, source: str = "identity"
) -> TrustBundleRotated:
    """Return the event of `bundle` changing (default: `make_trust_bundle()`)."""
    return TrustBundleRotated(
        observed_at=at, source=source, bundle=make_trust_bundle() if bundle is None else bundle
    )


def trust_bundle_removed(
    trust_domain: str = "aether.internal", *, at: int = AT, source: str = "identity"
) -> TrustBundleRemoved:
    """Return the event of the trust bundle of `trust_domain` being gone."""
    return TrustBundleRemoved(observed_at=at, source=source, trust_domain=trust_domain)


# --- xDS feedback events ---


def resource_acked(
    node_id: str = "node-a",
    *,
    type_url: str = CLUSTER_TYPE_URL,
    version: str = "v1",
    nonce: str = "1",
    at: int = AT,
    source: str = "xds",
) -> ResourceAcked:
    """Return Envoy `node_id` accepting `version` of `type_url`."""
    return ResourceAcked(
        observed_at=at, source=source, node_id=node_id, type_url=type_url, version=version, nonce=nonce
    )


def resource_nacked(
    node_id: str = "node-a",
    *,
    type_url: str = CLUSTER_TYPE_URL,
    version: str = "v2",
    nonce: str = "2",
    error_code: int = 3,
    error_message: str = "cluster 'web': unknown field",
    at: int = AT,
    source: str = "xds",
) -> ResourceNacked:
    """Return Envoy `node_id` rejecting `version` of `type_url` with `error_message`."""
    return ResourceNacked(
        observed_at=at,
        source=source,
        node_id=node_id,
        type_url=type_url,
        version=version,
        nonce=nonce,
        error_code=error_code,
        error_message=error_message,
    )


def on_demand_cluster_requested(
    cluster_name: str = "web.default.aether.internal:8080",
    *,
    node_id: str = "node-a",
    at: int = AT,
    source: str = "xds",
) -> OnDemandClusterRequested:
    """Return Envoy `node_id` asking for `cluster_name` on demand."""
    return OnDemandClusterRequested(observed_at=at, source=source, node_id=node_id, cluster_name=cluster_name)


# --- records and folding ---


def one_event_of_each_type() -> tuple[Event, ...]:
    """Return one valid event of every type of the catalog, in the catalog's order (`EVENT_TYPES`)."""
    endpoint = make_endpoint(
        ports=(9090,),
        metadata={"version": "v1"},
        namespace="default",
        pod_name="web-1",
        labels={"app": "web", "version": "v1"},
    )
    return (
        pod_added(make_pod(annotations={"endpoint.aether.io/port": "8080"})),
        pod_updated(make_pod(labels={**MANAGED_LABELS, "app": "web"})),
        pod_removed(),
        node_capture_configured(),
        endpoints_snapshot_received(endpoint, make_endpoint("10.0.0.2", protocol=Protocol.TCP)),
        endpoint_added(endpoint, version="2"),
        endpoint_updated(endpoint, version="3"),
        endpoint_removed(endpoint, version="4"),
        endpoints_snapshot_completed("4"),
        registry_service_added("shop/db", version="5"),
        registry_service_removed("shop/db", version="6"),
        kube_service_upserted(make_kube_service()),
        kube_service_deleted(make_meta()),
        gateway_object_upserted(make_kube_object(spec={"parentRefs": [{"name": "web"}]})),
        gateway_object_deleted(make_meta("canary", kind="HTTPRoute")),
        reference_grant_upserted(make_kube_object("allow-shop", kind="ReferenceGrant")),
        reference_grant_deleted(make_meta("allow-shop", kind="ReferenceGrant")),
        tls_secret_upserted(),
        tls_secret_deleted(make_meta("web-cert", kind="Secret")),
        namespace_upserted("shop", {"team": "shop"}),
        namespace_deleted("shop"),
        endpoint_slice_upserted(),
        endpoint_slice_deleted(),
        mesh_config_updated(),
        svid_rotated(),
        svid_removed(),
        trust_bundle_rotated(),
        trust_bundle_removed(),
        resource_acked(),
        resource_nacked(),
        on_demand_cluster_requested(),
    )


def records(*events: Event, start: int = 1) -> tuple[Record, ...]:
    """Return `events` as log records with consecutive sequence numbers from `start`."""
    return tuple(Record(seq=seq, event=event) for seq, event in enumerate(events, start))


def fold_events(*events: Event, state: State = EMPTY_STATE) -> State:
    """Fold `events` onto `state` as the records that follow it (sequence numbers from `state.seq + 1`)."""
    return fold_all(state, records(*events, start=state.seq + 1))


def domain_of(state: State) -> State:
    """Return the mesh `state` holds: without its log position (`seq` 0) and its rejections."""
    return attrs.evolve(state, seq=0, diagnostics=Diagnostics())
