"""The mesh's names for its services and their clusters (DESIGN.md section 4), below every view and projection.

A mesh service is `<namespace>/<serviceAccount>`; its FQDN is `<sa>.<ns>.<meshDomain>` and its clusters are named
after it: `<fqdn>`, `<fqdn>:<port>`, `tcp:<fqdn>`, `udp:<fqdn>`, and the per-caller HTTP/3 clusters
`quic:<caller sa>.<caller ns>@<fqdn>[:<port>]` (`aether.core.project.quic`). The Gateway API view names the clusters its
routes reach, the projections build them: both spell them here.
"""

from __future__ import annotations

import attrs

from aether.core.validation import dns_label_problem, dns_subdomain_problem, port_problem


def split_service(service: str) -> tuple[str, str]:
    """Return `(namespace, service_account)` of a mesh service key `<namespace>/<serviceAccount>`."""
    namespace, _, account = service.partition("/")
    return namespace, account


def service_fqdn(service: str, *, mesh_domain: str) -> str:
    """Return the mesh FQDN `<sa>.<ns>.<meshDomain>` of a service key."""
    namespace, account = split_service(service)
    return f"{account}.{namespace}.{mesh_domain}"


def http_cluster_name(service: str, *, mesh_domain: str, port: int | None = None) -> str:
    """Return `<sa>.<ns>.<meshDomain>` (the service's own ports) or `<sa>.<ns>.<meshDomain>:<port>`."""
    fqdn = service_fqdn(service, mesh_domain=mesh_domain)
    return fqdn if port is None else f"{fqdn}:{port}"


def tcp_cluster_name(service: str, *, mesh_domain: str) -> str:
    """Return `tcp:<sa>.<ns>.<meshDomain>`, the cluster of a TCP service."""
    return f"tcp:{service_fqdn(service, mesh_domain=mesh_domain)}"


def udp_cluster_name(service: str, *, mesh_domain: str, port: int | None = None) -> str:
    """Return `udp:<sa>.<ns>.<meshDomain>`, or `udp:<sa>.<ns>.<meshDomain>:<port>`: datagrams to the service's
    endpoints at their UDP `port` (a Service's target port)."""
    return f"udp:{http_cluster_name(service, mesh_domain=mesh_domain, port=port)}"


@attrs.frozen(kw_only=True)
class ClusterName:
    """A mesh cluster name taken apart: `[tcp:|udp:|quic:<caller>@]<sa>.<ns>.<meshDomain>[:<port>]`."""

    service: str
    """The service key `<namespace>/<serviceAccount>`."""
    protocol: str
    """`http`, `tcp`, `udp` or `quic` (the prefix; none means http)."""
    port: int | None
    """The port suffix, or None."""
    source: str = ""
    """`quic` only: the calling service `<namespace>/<serviceAccount>` whose SVID the cluster presents."""


QUIC_PREFIX = "quic:"


def quic_cluster_name(source: str, target: str) -> str:
    """Return `quic:<caller sa>.<caller ns>@<target>`: HTTP/3 from the local service `source` to the HTTP cluster
    `target` (`<fqdn>` or `<fqdn>:<port>`), presenting `source`'s own SVID."""
    namespace, account = split_service(source)
    return f"{QUIC_PREFIX}{account}.{namespace}@{target}"


def parse_cluster_name(name: str, *, mesh_domain: str) -> ClusterName | None:
    """Return the parts of a mesh cluster name, or None when `name` names no mesh service under `mesh_domain`.

    The account is everything left of the last label before the domain (a service account may hold dots, a
    namespace cannot): the same split `aether.core.reduce.xds` checks requests with.
    """
    protocol, source = "http", ""
    for prefix in ("tcp", "udp"):
        if name.startswith(f"{prefix}:"):
            protocol, name = prefix, name[len(prefix) + 1 :]
    if name.startswith(QUIC_PREFIX):
        caller, at, name = name[len(QUIC_PREFIX) :].partition("@")
        caller_account, dot, caller_namespace = caller.rpartition(".")
        if not (at and dot) or (
            dns_subdomain_problem(caller_account, what="account")
            or dns_label_problem(caller_namespace, what="namespace")
        ):
            return None
        protocol, source = "quic", f"{caller_namespace}/{caller_account}"
        # The destination half is the request's Host, which matched its virtual host without regard to case.
        name = name.lower()
    host, colon, port_text = name.partition(":")
    rest = host.removesuffix(f".{mesh_domain}")
    account, dot, namespace = rest.rpartition(".")
    if rest == host or not dot:
        return None
    if dns_subdomain_problem(account, what="account") or dns_label_problem(namespace, what="namespace"):
        return None
    port: int | None = None
    if colon:
        if not (port_text.isascii() and port_text.isdigit()) or port_problem(int(port_text), what="port"):
            return None
        port = int(port_text)
    return ClusterName(service=f"{namespace}/{account}", protocol=protocol, port=port, source=source)


SLICE_CLUSTER_PREFIX = "slices:"


def slice_cluster_name(namespace: str, service: str, *, port: int) -> str:
    """Return `slices:<service>.<namespace>:<port>`: the cluster of Service port `port` of a Service without a
    selector, whose endpoints are its EndpointSlices' ready addresses (no mesh service: no mesh domain)."""
    return f"{SLICE_CLUSTER_PREFIX}{service}.{namespace}:{port}"


@attrs.frozen(kw_only=True)
class SliceClusterName:
    """A slice cluster name taken apart: `slices:<service>.<namespace>:<port>`."""

    namespace: str
    service: str
    """The Service's name."""
    port: int
    """The Service port."""


def parse_slice_cluster_name(name: str) -> SliceClusterName | None:
    """Return the parts of a slice cluster name, or None when `name` is not one."""
    if not name.startswith(SLICE_CLUSTER_PREFIX):
        return None
    host, colon, port_text = name[len(SLICE_CLUSTER_PREFIX) :].rpartition(":")
    service, dot, namespace = host.rpartition(".")
    if not (colon and dot and port_text.isascii() and port_text.isdigit()):
        return None
    if dns_label_problem(service, what="service") or dns_label_problem(namespace, what="namespace"):
        return None
    port = int(port_text)
    if port_problem(port, what="port"):
        return None
    return SliceClusterName(namespace=namespace, service=service, port=port)
