"""GAMMA L4 on a pod's transparent listeners: one filter chain per destination of a TCPRoute or TLSRoute (a Service's
ClusterIP and port, and for a TLSRoute its SNI names), proxying the connection to the route's weighted backends.

Envoy picks a filter chain by destination port, then destination address, then SNI, each time keeping the most
specific chains that match: a connection to a routed ClusterIP and port is the route's, whatever the HTTP inspector
says; other traffic keeps its usual chains. Two consequences shape the chains:

* a destination with SNI chains only would leave a connection without a routed name with no chain at all (the
  L4 listener has no default chain), so such a destination also gets a nameless chain through to the original
  destination (`passthrough_original_dst`), as if no route were there;
* a route with no usable backend (all unresolved, or all weight 0) refuses its connections (a `direct_response`
  with nothing to say closes them), as the Gateway API asks; no `tcp_proxy` ever names a cluster the snapshot
  lacks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from envoy.config.core.v3 import address_pb2
from envoy.config.listener.v3 import listener_components_pb2
from envoy.extensions.filters.network.direct_response.v3 import config_pb2 as direct_response_pb2
from google.protobuf import wrappers_pb2

from aether.core.gateway.contract import MeshL4Destination
from aether.core.project.edge_listeners import tcp_proxy
from aether.core.project.messages import pack
from aether.core.project.names import PASSTHROUGH_CLUSTER


def needs_sni(destinations: Sequence[MeshL4Destination]) -> bool:
    """True when some destination matches by SNI: the listener then needs the TLS inspector."""
    return any(destination.route.hostnames for destination in destinations)


def _chain(name: str, address: str, port: int, names: Sequence[str], proxy: Any) -> Any:
    match = listener_components_pb2.FilterChainMatch(
        destination_port=wrappers_pb2.UInt32Value(value=port),
        prefix_ranges=[
            address_pb2.CidrRange(
                address_prefix=address,
                prefix_len=wrappers_pb2.UInt32Value(value=128 if ":" in address else 32),
            )
        ],
        server_names=list(names),
    )
    return listener_components_pb2.FilterChain(name=name, filter_chain_match=match, filters=[proxy])


_REFUSE = listener_components_pb2.Filter(
    name="envoy.filters.network.direct_response", typed_config=pack(direct_response_pb2.Config())
)
"""Closes the connection at once, saying nothing."""


def l4_chains(prefix: str, destinations: Sequence[MeshL4Destination]) -> list[Any]:
    """Return the filter chains of `destinations` (in their order, then the pass-through chains of the destinations
    with SNI chains only, sorted) for a listener whose chains are named `<prefix>...`.

    Names are `<prefix>_<address>_<port>` for the nameless chain and `<prefix>_<address>_<port>_<first SNI name>`
    for an SNI chain (an SNI name belongs to one route per destination, so the names are unique).
    """
    chains: list[Any] = []
    named: set[tuple[str, int]] = set()
    nameless: set[tuple[str, int]] = set()
    for item in destinations:
        names = item.route.hostnames
        where = (item.address, item.port)
        (named if names else nameless).add(where)
        base = f"{prefix}_{item.address}_{item.port}"
        name = f"{base}_{names[0]}" if names else base
        backends = item.route.usable_backends
        proxy = tcp_proxy(name, backends) if backends else _REFUSE
        chains.append(_chain(name, item.address, item.port, names, proxy))
    for address, port in sorted(named.difference(nameless)):
        name = f"{prefix}_{address}_{port}"
        chains.append(_chain(name, address, port, (), tcp_proxy(name, ((PASSTHROUGH_CLUSTER, 1),))))
    return chains
