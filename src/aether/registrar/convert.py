"""The registrar's wire formats: requests to validated mutations (`*_from_proto`), changes to responses (`*_to_proto`).

Validation happens here, once, at the edge: a mutation that reaches the core is well formed.
"""

from __future__ import annotations

import ipaddress
import re

from aether.core.events.registry import Endpoint, Health, HealthCheckMode, Protocol
from aether.proto.registrar.v1 import registrar_pb2
from aether.proto.registry.v1 import registry_pb2
from aether.registrar.errors import InvalidRequestError
from aether.registrar.snapshot import (
    Change,
    ChangeKind,
    EndpointRegistered,
    EndpointsUnregistered,
    ServiceFilter,
)

__all__ = [
    "DEFAULT_WEIGHT",
    "MAX_FILTER_SERVICES",
    "change_from_proto",
    "change_to_proto",
    "check_ip",
    "check_service_key",
    "endpoint_from_proto",
    "endpoint_to_proto",
    "filter_from_proto",
    "list_protocol_from_proto",
    "registration_from_proto",
    "registration_to_proto",
    "unregistration_from_proto",
    "unregistration_to_proto",
    "version_from_proto",
]

DEFAULT_WEIGHT = 1024
"""The weight of an endpoint registered without one (the `endpoint.aether.io/weight` default)."""

MAX_FILTER_SERVICES = 10_000
"""The most services one watch filter may name.

An agent's filter is its node's dependency set: hundreds at most. Ten thousand leaves room for a node that calls
much of a large mesh, while a filter of 100,000 names (a few MB, checked for every change) is refused; a watcher
that wants everything leaves the filter unset.
"""

_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def check_service_key(key: str, *, field: str = "service_name") -> str:
    """Return `key` if it is `<namespace>/<serviceAccount>` (a DNS-1123 label, then a DNS-1123 subdomain).

    Raises:
        InvalidRequestError: It is not.
    """
    namespace, slash, account = key.partition("/")
    rule = "must be '<namespace>/<serviceAccount>' in DNS-1123 lowercase form"
    if not slash or not _LABEL.match(namespace) or len(account) > 253 or not _SUBDOMAIN.match(account):
        raise InvalidRequestError(field, rule=rule, value=key)
    return key


def check_ip(ip: str, *, field: str) -> str:
    """Return `ip` if it is an IPv4 or IPv6 address in canonical form (as `ipaddress` prints it), with no zone.

    Raises:
        InvalidRequestError: It is not.
    """
    try:
        parsed = ipaddress.ip_address(ip)
    except ValueError:
        raise InvalidRequestError(field, rule="must be an ipv4 or ipv6 address", value=ip) from None
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.scope_id is not None:
        # A zone (`%eth0`) names an interface of the host that wrote it: no other node can reach it.
        raise InvalidRequestError(field, rule="must be an ipv6 address without a zone ('%...')", value=ip)
    if str(parsed) != ip:
        raise InvalidRequestError(field, rule=f"must be in canonical form {str(parsed)!r}", value=ip)
    return ip


def _check_port(port: int, *, field: str) -> int:
    if not 1 <= port <= 65535:
        raise InvalidRequestError(field, rule="must be 1..65535", value=port)
    return port


def _protocol(value: int, *, field: str) -> Protocol:
    if value == Protocol.UNSPECIFIED:
        return Protocol.HTTP
    try:
        return Protocol(value)
    except ValueError:
        raise InvalidRequestError(field, rule="must be PROTOCOL_HTTP or PROTOCOL_TCP", value=value) from None


def endpoint_from_proto(
    message: registry_pb2.ServiceEndpoint, *, service: str, protocol: Protocol
) -> Endpoint:
    """Return the endpoint `message` describes for `service` and `protocol`.

    A weight of 0 (unset) means `DEFAULT_WEIGHT`; `ports` are sorted, without duplicates.

    Raises:
        InvalidRequestError: The ip is no canonical IP address, a port is out of 1..65535, or an enum value is unknown.
    """
    ip = check_ip(message.ip, field="endpoint.ip")
    port = _check_port(message.port, field="endpoint.port")
    ports = sorted({_check_port(one, field="endpoint.ports") for one in message.ports})
    try:
        health = Health(message.health)
    except ValueError:
        raise InvalidRequestError(
            "endpoint.health", rule="must be a known Health", value=message.health
        ) from None
    try:
        mode = HealthCheckMode(message.health_check_mode)
    except ValueError:
        raise InvalidRequestError(
            "endpoint.health_check_mode",
            rule="must be a known HealthCheckMode",
            value=message.health_check_mode,
        ) from None
    kubernetes = message.kubernetes_metadata
    return Endpoint(
        service=service,
        protocol=protocol,
        ip=ip,
        port=port,
        ports=tuple(ports),
        weight=message.weight or DEFAULT_WEIGHT,
        region=message.locality.region,
        zone=message.locality.zone,
        metadata=dict(message.metadata),
        health=health,
        health_check_mode=mode,
        namespace=kubernetes.namespace,
        pod_name=kubernetes.pod_name,
        node_name=kubernetes.node_name,
        node_ip=kubernetes.node_ip,
        cluster_name=message.cluster_name,
        labels=dict(message.labels),
    )


def endpoint_to_proto(endpoint: Endpoint) -> registry_pb2.ServiceEndpoint:
    """Return the wire form of `endpoint` (service and protocol travel beside it)."""
    message = registry_pb2.ServiceEndpoint(
        ip=endpoint.ip,
        cluster_name=endpoint.cluster_name,
        port=endpoint.port,
        weight=endpoint.weight,
        health=endpoint.health.value,  # type: ignore[arg-type]
        health_check_mode=endpoint.health_check_mode.value,  # type: ignore[arg-type]
        ports=endpoint.ports,
    )
    if endpoint.region or endpoint.zone:
        message.locality.region = endpoint.region
        message.locality.zone = endpoint.zone
    for key in sorted(endpoint.metadata.keys()):
        message.metadata[key] = endpoint.metadata[key]
    for key in sorted(endpoint.labels.keys()):
        message.labels[key] = endpoint.labels[key]
    if endpoint.namespace or endpoint.pod_name or endpoint.node_name or endpoint.node_ip:
        kubernetes = message.kubernetes_metadata
        kubernetes.namespace = endpoint.namespace
        kubernetes.pod_name = endpoint.pod_name
        kubernetes.node_name = endpoint.node_name
        kubernetes.node_ip = endpoint.node_ip
    return message


def registration_from_proto(request: registrar_pb2.RegisterEndpointRequest) -> EndpointRegistered:
    """Return the validated mutation of a RegisterEndpoint request.

    Raises:
        InvalidRequestError: A field breaks its rule; the message names the field and shows the value.
    """
    service = check_service_key(request.service_name)
    protocol = _protocol(request.protocol, field="protocol")
    if not request.HasField("endpoint"):
        raise InvalidRequestError("endpoint", rule="must be set", value=None)
    return EndpointRegistered(
        endpoint=endpoint_from_proto(request.endpoint, service=service, protocol=protocol)
    )


def registration_to_proto(endpoint: Endpoint) -> registrar_pb2.RegisterEndpointRequest:
    """Return the RegisterEndpoint request that registers `endpoint` (what the embedded store persists)."""
    return registrar_pb2.RegisterEndpointRequest(
        service_name=endpoint.service,
        protocol=endpoint.protocol.value,  # type: ignore[arg-type]
        endpoint=endpoint_to_proto(endpoint),
    )


def unregistration_from_proto(request: registrar_pb2.UnregisterEndpointRequest) -> EndpointsUnregistered:
    """Return the validated mutation of an UnregisterEndpoint request.

    Raises:
        InvalidRequestError: The service key or an IP is invalid, or no IP is given.
    """
    service = check_service_key(request.service_name)
    if not request.ips:
        raise InvalidRequestError("ips", rule="must name at least one ip", value=[])
    ips = tuple(check_ip(ip, field="ips") for ip in request.ips)
    return EndpointsUnregistered(service=service, ips=ips)


def unregistration_to_proto(mutation: EndpointsUnregistered) -> registrar_pb2.UnregisterEndpointRequest:
    """Return the UnregisterEndpoint request of `mutation`."""
    return registrar_pb2.UnregisterEndpointRequest(service_name=mutation.service, ips=mutation.ips)


def list_protocol_from_proto(value: int) -> Protocol | None:
    """Return the protocol a ListAllEndpoints request asks for, or None (unspecified) for all of them.

    Raises:
        InvalidRequestError: `value` is no known protocol.
    """
    if value == Protocol.UNSPECIFIED:
        return None
    return _protocol(value, field="protocol")


def filter_from_proto(request: registrar_pb2.WatchEndpointsRequest) -> ServiceFilter:
    """Return the watch's filter: unset is every service; set is exactly those (set but empty: none).

    Raises:
        InvalidRequestError: A service key in the filter is invalid, or it names more than `MAX_FILTER_SERVICES`.
    """
    if not request.HasField("filter"):
        return ServiceFilter()
    if len(request.filter.services) > MAX_FILTER_SERVICES:
        raise InvalidRequestError(
            "filter.services",
            rule=f"must name at most {MAX_FILTER_SERVICES} services (unset the filter to watch every service)",
            value=f"{len(request.filter.services)} services",
        )
    return ServiceFilter(
        services=frozenset(check_service_key(key, field="filter.services") for key in request.filter.services)
    )


def version_from_proto(text: str, *, field: str = "last_version") -> int | None:
    """Return the version in `text` (a decimal counter), or None for "" (never synced).

    Raises:
        InvalidRequestError: `text` is neither empty nor a decimal number.
    """
    if not text:
        return None
    if not (text.isascii() and text.isdigit()) or len(text) > 20:
        raise InvalidRequestError(field, rule="must be empty or a version this registrar sent", value=text)
    return int(text)


def change_to_proto(change: Change) -> registrar_pb2.WatchEndpointsResponse:
    """Return the watch event of `change`."""
    response = registrar_pb2.WatchEndpointsResponse(
        type=change.kind.value,  # type: ignore[arg-type]
        service_name=change.service,
        protocol=change.protocol.value,  # type: ignore[arg-type]
        version=str(change.version),
    )
    if change.endpoint is not None:
        response.endpoint.CopyFrom(endpoint_to_proto(change.endpoint))
    elif change.ip:
        response.endpoint.ip = change.ip
    return response


def change_from_proto(response: registrar_pb2.WatchEndpointsResponse) -> Change:
    """Return the change a watch event carries (what the agent's registrar client reads).

    Raises:
        InvalidRequestError: The event type, version, service key or endpoint is invalid.
    """
    try:
        kind = ChangeKind(response.type)
    except ValueError:
        raise InvalidRequestError("type", rule="must be a known EventType", value=response.type) from None
    version = version_from_proto(response.version, field="version")
    if version is None:
        raise InvalidRequestError("version", rule="must be set", value="")
    if kind is ChangeKind.SNAPSHOT_COMPLETE or (
        kind is ChangeKind.FULL_SNAPSHOT and not response.service_name
    ):
        return Change(kind=kind, version=version)
    service = check_service_key(response.service_name)
    if kind in (ChangeKind.SERVICE_ADDED, ChangeKind.SERVICE_REMOVED):
        return Change(kind=kind, version=version, service=service)
    protocol = _protocol(response.protocol, field="protocol")
    if kind is ChangeKind.ENDPOINT_REMOVED:
        ip = check_ip(response.endpoint.ip, field="endpoint.ip")
        return Change(kind=kind, version=version, service=service, protocol=protocol, ip=ip)
    endpoint = endpoint_from_proto(response.endpoint, service=service, protocol=protocol)
    return Change(
        kind=kind, version=version, service=service, protocol=protocol, ip=endpoint.ip, endpoint=endpoint
    )
