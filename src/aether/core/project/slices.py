"""The clusters of Services without a selector: their EndpointSlices' ready addresses, dialled in plaintext.

A Service with a selector routes to the mesh pods it selects (mTLS to their mesh inbound, `aether.core.project
.services`). A Service without one (a "manual" Service whose EndpointSlices a user writes, headless or not; the
Gateway API's `HTTPRouteServiceTypes`) has no pods to select: a backendRef to Service port `P` takes the cluster
`slices:<service>.<ns>:<P>` (`aether.core.mesh_names.slice_cluster_name`), whose endpoints are, for every slice of
the Service (label `kubernetes.io/service-name`), each ready endpoint's first address at the port of the slice whose
`name` is the Service port's name (the EndpointSlice API's rule, which is how a targetPort, by number or by name, is
written into a slice). A slice without that port serves none of that Service port.

Such backends are outside the mesh (no identity to pin), so they are dialled in plaintext, HTTP/1.1, or HTTP/2
without TLS when the Service port's appProtocol is `kubernetes.io/h2c`. An address that is a mesh pod's is dialled
the same way: a Service that fronts mesh pods should select them, which keeps mTLS.

The cluster is EDS over ADS like the mesh's, so a slice change sends one ClusterLoadAssignment, not a new cluster;
each cluster reads only its own Service's slices (`KubeState.slices_of`), so a projection costs what it routes to.
"""

from __future__ import annotations

from typing import Any

from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2

from aether.core.events.kube import KubeEndpointSlice, KubeService, ServicePort
from aether.core.mesh_names import SliceClusterName
from aether.core.project.clusters import HTTP_OPTIONS_KEY, eds_cluster, http_options
from aether.core.project.messages import pack, socket_address
from aether.core.state.kube import KubeState

H2C_APP_PROTOCOL = "kubernetes.io/h2c"
"""The appProtocol of a Service port that speaks HTTP/2 without TLS (Kubernetes' registered name)."""


def service_port(service: KubeService | None, port: int) -> ServicePort | None:
    """Return the port `port` of `service`, or None when either is missing."""
    if service is None:
        return None
    return next((item for item in service.ports if item.port == port), None)


def slice_addresses(slices: tuple[KubeEndpointSlice, ...], port_name: str) -> list[tuple[str, int]]:
    """Return the sorted, distinct `(address, port)` of the ready endpoints of `slices` serving the Service port
    named `port_name` (each endpoint's first address: its others name the same backend)."""
    found: set[tuple[str, int]] = set()
    for item in slices:
        port = next((slice_port.port for slice_port in item.ports if slice_port.name == port_name), None)
        if port is None:
            continue
        found.update((endpoint.addresses[0], port) for endpoint in item.endpoints if endpoint.ready)
    return sorted(found)


def slice_cluster(name: str, *, http2: bool) -> Any:
    """Return the plaintext EDS cluster `name` of a Service without a selector."""
    cluster = eds_cluster(name)
    cluster.typed_extension_protocol_options[HTTP_OPTIONS_KEY].CopyFrom(pack(http_options(http2=http2)))
    return cluster


def slice_resources(name: str, parsed: SliceClusterName, kube: KubeState) -> tuple[Any, Any]:
    """Return the cluster and the ClusterLoadAssignment of slice cluster `name` (`parsed`) from `kube`.

    A Service or Service port that is gone, or slices without its port, leave the assignment empty: requests get
    503 at once, and no route ever names a missing cluster.
    """
    port = service_port(kube.services.get(f"Service/{parsed.namespace}/{parsed.service}"), parsed.port)
    addresses = (
        slice_addresses(kube.slices_of(parsed.namespace, parsed.service), port.name)
        if port is not None
        else []
    )
    assignment = endpoint_pb2.ClusterLoadAssignment(
        cluster_name=name,
        endpoints=[
            endpoint_components_pb2.LocalityLbEndpoints(
                lb_endpoints=[
                    endpoint_components_pb2.LbEndpoint(
                        endpoint=endpoint_components_pb2.Endpoint(address=socket_address(address, number))
                    )
                    for address, number in addresses
                ]
            )
        ]
        if addresses
        else [],
    )
    http2 = port is not None and port.app_protocol == H2C_APP_PROTOCOL
    return slice_cluster(name, http2=http2), assignment
