"""Kubernetes events: Services, their EndpointSlices, Namespaces, Gateway API objects, ReferenceGrants, TLS Secrets
and the MeshConfig, as the watches see them."""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from aether.core.events.base import Event
from aether.core.values import EMPTY_STR_MAP, Redacted, StrMap, freeze_str_map, freeze_strs


@attrs.frozen(kw_only=True)
class ObjectMeta:
    """The identifying metadata of a Kubernetes object."""

    kind: str
    namespace: str = ""
    name: str
    uid: str = ""
    generation: int = 0
    resource_version: str = ""
    creation_timestamp: str = ""
    """RFC 3339, as the API server writes it (route precedence breaks ties on it)."""

    @property
    def key(self) -> str:
        """`<kind>/<namespace>/<name>`."""
        return f"{self.kind}/{self.namespace}/{self.name}"


@attrs.frozen(kw_only=True)
class KubeObject:
    """A Kubernetes object kept as its metadata plus its spec in canonical JSON.

    Typed models are derived from `spec_json` by the projections that need them; the log keeps what was observed.
    """

    meta: ObjectMeta
    spec_json: str
    """The spec as canonical JSON: sorted keys, `(",", ":")` separators, UTF-8."""


@attrs.frozen(kw_only=True)
class ServicePort:
    """One port of a Kubernetes Service."""

    name: str = ""
    port: int
    target_port: str = ""
    protocol: str = "TCP"
    app_protocol: str = ""


def _freeze_ports(value: Iterable[ServicePort]) -> tuple[ServicePort, ...]:
    return tuple(value)


@attrs.frozen(kw_only=True)
class KubeService:
    """A Kubernetes Service: what backendRefs name and what selects the pods behind them."""

    meta: ObjectMeta
    selector: StrMap = attrs.field(default=EMPTY_STR_MAP, converter=freeze_str_map)
    ports: tuple[ServicePort, ...] = attrs.field(default=(), converter=_freeze_ports)
    cluster_ip: str = ""


@attrs.frozen(kw_only=True)
class KubeNamespace:
    """A Namespace: its labels are what a Gateway listener's `allowedRoutes.namespaces.selector` matches."""

    meta: ObjectMeta
    """Kind `Namespace`, namespace empty."""
    labels: StrMap = attrs.field(default=EMPTY_STR_MAP, converter=freeze_str_map)
    """The Namespace's labels as observed (the API server always sets `kubernetes.io/metadata.name`)."""


SERVICE_NAME_LABEL = "kubernetes.io/service-name"
"""The label that ties an EndpointSlice to the Service it serves (the EndpointSlice API's own convention)."""


@attrs.frozen(kw_only=True)
class SlicePort:
    """One port of an EndpointSlice: it serves the Service port of the same `name` (empty matches empty)."""

    name: str = ""
    port: int
    """The port every endpoint of the slice listens on for this Service port."""
    protocol: str = "TCP"
    app_protocol: str = ""


@attrs.frozen(kw_only=True)
class SliceEndpoint:
    """One endpoint of an EndpointSlice: its addresses (one backend, however many) and whether it is ready."""

    addresses: tuple[str, ...] = attrs.field(default=(), converter=freeze_strs)
    ready: bool = True
    """`conditions.ready`; the API reads an absent condition as ready, and so does the converter."""


def _freeze_slice_ports(value: Iterable[SlicePort]) -> tuple[SlicePort, ...]:
    return tuple(value)


def _freeze_slice_endpoints(value: Iterable[SliceEndpoint]) -> tuple[SliceEndpoint, ...]:
    return tuple(value)


@attrs.frozen(kw_only=True)
class KubeEndpointSlice:
    """An EndpointSlice (discovery.k8s.io/v1): where a Service without a selector sends its traffic.

    A Service with a selector routes to the mesh pods it selects; one without (a "manual" Service whose slices a user
    writes, headless or not) has no pods to select, and its slices are its backends.
    """

    meta: ObjectMeta
    """Kind `EndpointSlice`."""
    service: str = ""
    """The name of the Service it serves, in its namespace (label `kubernetes.io/service-name`); empty: none."""
    address_type: str = "IPv4"
    """`IPv4`, `IPv6` or `FQDN`; only IP slices are routed (an FQDN slice is refused when folded)."""
    ports: tuple[SlicePort, ...] = attrs.field(default=(), converter=_freeze_slice_ports)
    endpoints: tuple[SliceEndpoint, ...] = attrs.field(default=(), converter=_freeze_slice_endpoints)


@attrs.frozen(kw_only=True)
class TlsSecret:
    """A Secret of type `kubernetes.io/tls`: the certificate an edge listener serves (a Gateway's certificateRefs).

    Only TLS Secrets are observed; other Secret types never reach the log.
    """

    meta: ObjectMeta
    cert_chain_pem: bytes
    """The `tls.crt` entry: the PEM certificate chain, leaf first."""
    private_key: Redacted
    """The `tls.key` entry: kept in the log so replay reproduces the served certificate, never shown."""


@attrs.frozen(kw_only=True)
class MeshConfig:
    """The mesh-wide settings (from the MeshConfig object)."""

    mesh_domain: str = "aether.internal"
    trust_domain: str = "aether.internal"
    on_demand_ttl_seconds: int = 600
    """How long a service requested on demand stays in a node's dependency set after its last use."""
    generation: int = 0
    tracing_enabled: bool = False
    """`proxy.tracingEnabled`: Envoys whose bootstrap declares the collector send it OpenTelemetry spans."""
    trace_sample_per_million: int = 0
    """`proxy.traceSampleRate` in millionths (integers keep the log exact): the share of requests Envoy traces.
    Records written before the field existed read 0 with tracing off, as they were folded."""


@attrs.frozen(kw_only=True)
class KubeServiceUpserted(Event):
    """A Service was created or changed."""

    service: KubeService

    @property
    def subject(self) -> str:
        return self.service.meta.key


@attrs.frozen(kw_only=True)
class KubeServiceDeleted(Event):
    """A Service was deleted."""

    meta: ObjectMeta

    @property
    def subject(self) -> str:
        return self.meta.key


@attrs.frozen(kw_only=True)
class GatewayObjectUpserted(Event):
    """A Gateway API object (GatewayClass, Gateway, HTTPRoute, GRPCRoute, TCPRoute, TLSRoute, UDPRoute) changed."""

    object: KubeObject

    @property
    def subject(self) -> str:
        return self.object.meta.key


@attrs.frozen(kw_only=True)
class GatewayObjectDeleted(Event):
    """A Gateway API object was deleted."""

    meta: ObjectMeta

    @property
    def subject(self) -> str:
        return self.meta.key


@attrs.frozen(kw_only=True)
class ReferenceGrantUpserted(Event):
    """A ReferenceGrant was created or changed."""

    object: KubeObject

    @property
    def subject(self) -> str:
        return self.object.meta.key


@attrs.frozen(kw_only=True)
class ReferenceGrantDeleted(Event):
    """A ReferenceGrant was deleted."""

    meta: ObjectMeta

    @property
    def subject(self) -> str:
        return self.meta.key


@attrs.frozen(kw_only=True)
class TlsSecretUpserted(Event):
    """A TLS Secret was created or changed."""

    secret: TlsSecret

    @property
    def subject(self) -> str:
        return self.secret.meta.key


@attrs.frozen(kw_only=True)
class TlsSecretDeleted(Event):
    """A TLS Secret was deleted (or stopped being of type `kubernetes.io/tls`)."""

    meta: ObjectMeta

    @property
    def subject(self) -> str:
        return self.meta.key


@attrs.frozen(kw_only=True)
class MeshConfigUpdated(Event):
    """The MeshConfig changed (or was first read)."""

    config: MeshConfig

    @property
    def subject(self) -> str:
        return "meshconfig"


@attrs.frozen(kw_only=True)
class NamespaceUpserted(Event):
    """A Namespace was created or its labels changed.

    Added after the other Kubernetes events (wire field 46): logs written before it simply have none.
    """

    namespace: KubeNamespace

    @property
    def subject(self) -> str:
        return self.namespace.meta.key


@attrs.frozen(kw_only=True)
class NamespaceDeleted(Event):
    """A Namespace was deleted."""

    meta: ObjectMeta

    @property
    def subject(self) -> str:
        return self.meta.key


@attrs.frozen(kw_only=True)
class EndpointSliceUpserted(Event):
    """An EndpointSlice was created or changed.

    Added after the Namespace events (wire field 48): logs written before it simply have none.
    """

    slice: KubeEndpointSlice

    @property
    def subject(self) -> str:
        return self.slice.meta.key


@attrs.frozen(kw_only=True)
class EndpointSliceDeleted(Event):
    """An EndpointSlice was deleted."""

    meta: ObjectMeta

    @property
    def subject(self) -> str:
        return self.meta.key
