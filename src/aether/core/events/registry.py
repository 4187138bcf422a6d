"""Registry events: what the registrar's WatchEndpoints stream tells the agent about the mesh's endpoints."""

from __future__ import annotations

import enum
from collections.abc import Iterable

import attrs

from aether.core.events.base import Event
from aether.core.values import EMPTY_STR_MAP, StrMap, freeze_ints, freeze_str_map, freeze_strs


class Protocol(enum.IntEnum):
    """An endpoint's protocol (values are the wire enum's)."""

    UNSPECIFIED = 0
    HTTP = 1
    TCP = 2


class Health(enum.IntEnum):
    """An endpoint's health as registered; UNSPECIFIED counts as healthy."""

    UNSPECIFIED = 0
    HEALTHY = 1
    UNHEALTHY = 2
    DRAINING = 3


class HealthCheckMode(enum.IntEnum):
    """Who decides an endpoint's health: Envoy's active checks, or the registry (EDS)."""

    UNSPECIFIED = 0
    ACTIVE = 1
    EDS = 2


EndpointKey = tuple[str, Protocol, str]
"""An endpoint's identity in the registry: `(service, protocol, ip)`."""


@attrs.frozen(kw_only=True)
class Endpoint:
    """One endpoint of a mesh service, as the registrar holds it."""

    service: str
    """The mesh service key `<namespace>/<serviceAccount>`."""
    protocol: Protocol = Protocol.HTTP
    ip: str
    port: int = 8080
    ports: tuple[int, ...] = attrs.field(default=(), converter=freeze_ints)
    weight: int = 1024
    region: str = ""
    zone: str = ""
    metadata: StrMap = attrs.field(default=EMPTY_STR_MAP, converter=freeze_str_map)
    health: Health = Health.UNSPECIFIED
    health_check_mode: HealthCheckMode = HealthCheckMode.UNSPECIFIED
    namespace: str = ""
    pod_name: str = ""
    node_name: str = ""
    node_ip: str = ""
    cluster_name: str = ""
    labels: StrMap = attrs.field(default=EMPTY_STR_MAP, converter=freeze_str_map)
    """The pod's labels: what a Kubernetes Service's selector matches, so a backendRef reaches exactly the pods its
    Service selects (the service account above is the identity, not the routing). Added after the first release:
    an endpoint logged before it has none, and no Service selector matches it."""

    @property
    def key(self) -> EndpointKey:
        """`(service, protocol, ip)`."""
        return (self.service, self.protocol, self.ip)


def _freeze_endpoints(value: Iterable[Endpoint]) -> tuple[Endpoint, ...]:
    return tuple(value)


def endpoint_subject(service: str, protocol: Protocol, ip: str) -> str:
    """The subject of an endpoint's events (what a rejection of one is filed under)."""
    return f"endpoint/{service}/{protocol.name.lower()}/{ip}"


@attrs.frozen(kw_only=True)
class EndpointsSnapshotReceived(Event):
    """The registrar (re)synced this agent: `endpoints` is the whole filtered set and `services` the catalog.

    Replaces everything the agent knew of the registry, so endpoints that vanished while disconnected are dropped.
    """

    version: str
    endpoints: tuple[Endpoint, ...] = attrs.field(default=(), converter=_freeze_endpoints)
    services: tuple[str, ...] = attrs.field(default=(), converter=freeze_strs)

    @property
    def subject(self) -> str:
        return "registry"


@attrs.frozen(kw_only=True)
class EndpointAdded(Event):
    """An endpoint appeared in the registry at `version`."""

    version: str
    endpoint: Endpoint

    @property
    def subject(self) -> str:
        return endpoint_subject(self.endpoint.service, self.endpoint.protocol, self.endpoint.ip)


@attrs.frozen(kw_only=True)
class EndpointUpdated(Event):
    """An endpoint changed (health, weight, ports) at `version`."""

    version: str
    endpoint: Endpoint

    @property
    def subject(self) -> str:
        return endpoint_subject(self.endpoint.service, self.endpoint.protocol, self.endpoint.ip)


@attrs.frozen(kw_only=True)
class EndpointRemoved(Event):
    """An endpoint left the registry at `version`."""

    version: str
    service: str
    protocol: Protocol = Protocol.HTTP
    ip: str

    @property
    def subject(self) -> str:
        return endpoint_subject(self.service, self.protocol, self.ip)


@attrs.frozen(kw_only=True)
class EndpointsSnapshotCompleted(Event):
    """The registrar finished a (re)sync at `version`: the agent's view is complete from here on."""

    version: str

    @property
    def subject(self) -> str:
        return "registry"


@attrs.frozen(kw_only=True)
class RegistryServiceAdded(Event):
    """A service entered the mesh catalog (its first endpoint registered). Announced before its endpoints."""

    version: str
    service: str

    @property
    def subject(self) -> str:
        return f"service/{self.service}"


@attrs.frozen(kw_only=True)
class RegistryServiceRemoved(Event):
    """A service left the mesh catalog (its last endpoint unregistered); its endpoints go with it."""

    version: str
    service: str

    @property
    def subject(self) -> str:
        return f"service/{self.service}"
