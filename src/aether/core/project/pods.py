"""The resources of one local pod: its listeners and the app clusters its inbound delivers to.

Every pod gets the explicit outbound listener (18081) and the mesh inbound (18008, TCP, and UDP for HTTP/3 unless
the node holds no SVID: `aether.core.project.quic`). The capture listeners (18001,
the L4 port 18082, and one per UDP Service destination the node serves) exist only for a pod with a network namespace: capture is programmed there by the CNI
plugin, which is also what reports the namespace. A pod known without one (local mode, a pod the CNI never saw)
has nothing diverting its traffic, and a transparent listener on a host address would need privileges for no
purpose. On a captured node (`State.captured_nodes`) a pod without a namespace gets nothing at all until its CNI
ADD (see `aether.core.project.dependencies.bind_place`).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from aether.core.gateway.contract import MeshL4Destination
from aether.core.project.clusters import app_cluster
from aether.core.project.frontends import FrontendRoute
from aether.core.project.listeners import (
    capture_listener,
    inbound_listener,
    inbound_quic,
    l4_tcp_listener,
    outbound_listener,
    udp_listener,
)
from aether.core.project.names import CAPTURE_ROUTE, OUTBOUND_ROUTE, spiffe_id
from aether.core.project.tracing import Tracing
from aether.core.project.udp import UdpDestination
from aether.core.snapshot import Resource
from aether.core.state.pods import PodRecord


@attrs.frozen(kw_only=True)
class PodContext:
    """Everything besides the pod itself that its resources depend on."""

    trust_domain: str
    plaintext: bool
    """True when the node holds no SVID at all: the inbound listener accepts plaintext."""
    no_http3: frozenset[str] = frozenset()
    """SPIFFE IDs whose SVID lacks the DNS SANs HTTP/3 needs (`Svid.http3_problem`): their pods get no QUIC
    inbound, so their callers' QUIC attempts fail at once and Envoy keeps them on HTTP/2."""
    tracing: Tracing | None = None
    """How the pods' HTTP connection managers trace (`service_name` empty: each pod's spans name its service)."""


def project_pod(
    record: PodRecord,
    *,
    bound: bool,
    context: PodContext,
    l4: Sequence[MeshL4Destination] = (),
    udp: Sequence[UdpDestination] = (),
    frontends: Sequence[FrontendRoute] = (),
) -> tuple[Resource, ...]:
    """Return the listeners and app clusters of `record`'s pod; nothing when it has no place to bind (`bound`).

    `l4` are the GAMMA L4 destinations of the node's dependency set, matched on the pod's capture and L4 ports;
    `udp` the UDP Service destinations the node serves, each a listener of its own; `frontends` the GAMMA
    frontends of the set, matched on the capture port by destination.
    """
    if not bound:
        return ()
    trust_domain = context.trust_domain
    quic = not context.plaintext
    tracing = None if context.tracing is None else attrs.evolve(context.tracing, service_name=record.service)
    serves_http3 = quic and spiffe_id(record.service, trust_domain=trust_domain) not in context.no_http3
    captured: tuple[Resource, ...] = ()
    if record.pod.netns:
        captured = (
            Resource.from_message(
                capture_listener(
                    record, trust_domain=trust_domain, l4=l4, frontends=frontends, quic=quic, tracing=tracing
                ),
                references=(CAPTURE_ROUTE,),
            ),
            Resource.from_message(l4_tcp_listener(record, l4=l4)),
            *(Resource.from_message(udp_listener(record, destination)) for destination in udp),
        )
    return (
        Resource.from_message(
            outbound_listener(record, trust_domain=trust_domain, quic=quic, tracing=tracing),
            references=(OUTBOUND_ROUTE,),
        ),
        *captured,
        Resource.from_message(
            inbound_listener(record, trust_domain=trust_domain, plaintext=context.plaintext, tracing=tracing)
        ),
        *(
            (Resource.from_message(inbound_quic(record, trust_domain=trust_domain, tracing=tracing)),)
            if serves_http3
            else ()
        ),
        *(Resource.from_message(app_cluster(record.pod, port)) for port in record.config.ports),
    )
