"""GAMMA frontends: the ClusterIP and port of each Service that HTTP or gRPC routes name as their parent, where the
node routes a captured request by its destination address whatever its Host says.

A GAMMA route applies to the Service it names, its *frontend*: the Gateway API's mesh conformance asks that a
client sending to the Service (by its name, which resolves to the ClusterIP, or by the ClusterIP itself) gets the
route (`MeshFrontend` "send to service"; `MeshFrontendHostname`, the `MeshClusterIPMatching` feature: the Service's
address decides, not the Host header), and that one dialling a pod's IP directly does not (`MeshFrontend` "send to
pod IP": no route, the request goes to the pod as it would without the mesh). So the node matches captured HTTP by
original destination for these frontends (`aether.core.project.frontends`), and anything else keeps matching by
Host in `cap_http` (a mesh name, or the passthrough to where it was going).

The frontends of a route are its accepted Service parents with an IPv4 ClusterIP, on the parentRef's port, or
every TCP port of the Service when it names none.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence

import attrs

from aether.core.events.kube import KubeService
from aether.core.gateway import ir
from aether.core.gateway.attach import Resolved
from aether.core.gateway.contract import MESH_CONTROLLER
from aether.core.gateway.memo import Memo
from aether.core.gateway.mesh import caller_routes, mesh_services

__all__ = ["MeshFrontend", "mesh_frontends", "service_frontends"]


@attrs.frozen(kw_only=True)
class MeshFrontend:
    """One Service port that GAMMA HTTP or gRPC routes apply to, by where a client sends."""

    address: str
    """The Service's ClusterIP."""
    port: int
    """The Service port (what clients connect to)."""
    service: str
    """The mesh service `<ns>/<sa>` of the Service."""
    http_routes: tuple[ir.HTTPRoute, ...] = ()
    grpc_routes: tuple[ir.HTTPRoute, ...] = ()
    """The routes of the routes naming this Service (on this port, or on none) in precedence order, decided among
    them alone: other Services of the same service account have routes of their own, which do not apply here."""

    @property
    def all_routes(self) -> tuple[ir.HTTPRoute, ...]:
        """The virtual host's routes in the order Envoy evaluates them: gRPC first, then HTTP."""
        return (*self.grpc_routes, *self.http_routes)


def _ipv4(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:  # headless ("None"), not allocated yet (""), or IPv6
        return False
    return True


def mesh_frontends(
    resolved: Sequence[Resolved], *, services: Mapping[str, KubeService], memo: Memo
) -> dict[str, tuple[MeshFrontend, ...]]:
    """Return, per mesh service, the frontends of the GAMMA HTTP and gRPC routes of `resolved` (oldest first),
    sorted by address and port (each once)."""
    by_service: dict[str, list[Resolved]] = {}
    for item in resolved:
        for service in mesh_services(item):
            by_service.setdefault(service, []).append(item)
    frontends: dict[str, tuple[MeshFrontend, ...]] = {}
    for service, items in sorted(by_service.items()):
        if built := service_frontends(service, items, services=services, memo=memo):
            frontends[service] = built
    return frontends


def service_frontends(
    service: str, resolved: Sequence[Resolved], *, services: Mapping[str, KubeService], memo: Memo
) -> tuple[MeshFrontend, ...]:
    """Return the frontends of mesh service `service` from the GAMMA routes `resolved` (oldest first) that apply
    to it, sorted by address and port (each once)."""
    found: dict[tuple[ipaddress.IPv4Address, int], list[Resolved]] = {}
    for item in resolved:
        for result in item.parents:
            if not result.accepted or result.controller != MESH_CONTROLLER or result.service != service:
                continue
            kube = services.get(f"Service/{result.ref.namespace}/{result.ref.name}")
            if kube is None or not _ipv4(kube.cluster_ip):
                continue
            tcp = sorted({port.port for port in kube.ports if port.protocol == "TCP"})
            ports = [result.ref.port] if result.ref.port else tcp
            address = ipaddress.IPv4Address(kube.cluster_ip)
            for port in ports:
                if port not in tcp:
                    continue
                contributors = found.setdefault((address, port), [])
                if not contributors or contributors[-1] is not item:  # two parentRefs of one route
                    contributors.append(item)
    built = []
    for (address, port), contributors in sorted(found.items()):
        http, grpc = caller_routes(service, contributors, memo=memo)
        built.append(
            MeshFrontend(address=str(address), port=port, service=service, http_routes=http, grpc_routes=grpc)
        )
    return tuple(built)
