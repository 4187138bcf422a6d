"""Builders shared by the registrar tests."""

from __future__ import annotations

from aether.core.events.registry import Endpoint, Protocol
from aether.registrar.snapshot import EndpointRegistered, EndpointsUnregistered

WEB = "shop/web"
DB = "shop/db"


def endpoint(
    ip: str, *, service: str = WEB, protocol: Protocol = Protocol.HTTP, weight: int = 1024
) -> Endpoint:
    return Endpoint(service=service, protocol=protocol, ip=ip, port=8080, ports=(8080,), weight=weight)


def register(ip: str, **fields: object) -> EndpointRegistered:
    return EndpointRegistered(endpoint=endpoint(ip, **fields))  # type: ignore[arg-type]


def unregister(*ips: str, service: str = WEB) -> EndpointsUnregistered:
    return EndpointsUnregistered(service=service, ips=ips)
