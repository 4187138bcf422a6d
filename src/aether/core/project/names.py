"""Every name, port and header of the node projection's contract (DESIGN.md section 4), in one place.

What users and Envoy see is spelled here and nowhere else: listener, cluster, route and secret names, the data-plane
ports, the SPIFFE IDs, the retry-outcome header and the filter-state key that carries a caller's identity. The names of
mesh services and their clusters, which the Gateway API view spells too, are in `aether.core.mesh_names`.
"""

from __future__ import annotations

import re

from aether.core.events.pods import Pod
from aether.core.mesh_names import split_service

# --- ports ---

CAPTURE_PORT = 18001
"""Per-pod transparent capture (TCP): the divert target of the CNI's mark-and-divert rules."""
MESH_INBOUND_PORT = 18008
"""Mesh inbound, mTLS: every endpoint of the registry is dialled at `<pod ip>:18008`."""
OUTBOUND_HTTP_PORT = 18081
"""The per-pod explicit HTTP proxy port (on loopback inside the pod); the Host header names service and port."""
L4_PORT = 18082
"""The per-pod L4 port (TCP). Captured UDP does not land here: a UDP listener answers from the port it is bound to,
so each served UDP destination has its own listener on that destination (`udp_listener_name`)."""

LOOPBACK = "127.0.0.1"
ANY_ADDRESS = "0.0.0.0"

# --- node-wide resources ---

OUTBOUND_ROUTE = "out_http"
"""The route table of every pod's explicit outbound listener."""
CAPTURE_ROUTE = "cap_http"
"""The route table of every pod's capture listener: like `out_http`, but non-mesh traffic passes through."""
INBOUND_ROUTE = "in_http"
"""The inline route table of the inbound HTTP chains (delivery to the app)."""
CATCH_ALL_VHOST = "on_demand_catch_all"
"""The `*` virtual host: liveness, on-demand discovery of mesh names, and the fallback."""
PASSTHROUGH_CLUSTER = "passthrough_original_dst"
"""The ORIGINAL_DST cluster: captured traffic that is not for the mesh goes where it was going."""
LIVE_PATH = "/-/-/live"
"""Answered 200 by the catch-all virtual host itself (the prober's liveness target)."""

PASSTHROUGH_MARK = 0xAE7E
"""SO_MARK of passthrough connections, which the CNI's capture rules match to never capture them again."""

# --- headers and filter state ---

OUTCOME_HEADER = "x-aether-outcome"
"""Set by the callee's inbound proxy on replies it generated itself (see `aether.core.project.outcome`)."""
UNDELIVERED = "undelivered"
"""The request never reached the application: safe to retry whatever the method."""
UNANSWERED = "unanswered"
"""The application received the request and did not answer: safe to retry for idempotent methods only."""
IDEMPOTENT_METHODS = ("GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE")
"""RFC 9110 section 9.2.2: the methods whose replay has the effect of one request."""

SOURCE_IDENTITY_KEY = "aether.source_identity"
"""The filter-state key a pod's outbound and capture listeners set to the pod's SPIFFE ID (a hashable string: it
keys the upstream connection pools, so two callers never share a connection)."""
CALLER_SECRET_KEY = "envoy.tls.certificate_mappers.on_demand_secret"
"""The filter-state key a pod's outbound and capture listeners set to its caller secret's name
(`caller_secret_name`): the service clusters' certificate selector fetches that secret (see `tls`)."""
CALLER_SECRET_PREFIX = "caller:"
FALLBACK_CALLER_SECRET = "caller:fallback"
"""The caller secret presented by connections naming none (the node's fallback SVID: see `tls`)."""
XDS_CLUSTER = "xds_cluster"
"""The bootstrap's static cluster of the control plane's xDS server (the agent's socket on a node): every bootstrap
Aether builds names it so, and the service clusters' certificate selector fetches caller secrets over it."""


def caller_secret_name(identity: str) -> str:
    """Return `caller:<SPIFFE ID>`: the secret a local workload of SPIFFE ID `identity` presents upstream (its own
    SVID, or the node's fallback while it has none). The SVID's own secret keeps the SPIFFE ID as its name."""
    return f"{CALLER_SECRET_PREFIX}{identity}"


# --- per-pod names ---


def pod_token(pod: Pod) -> str:
    """Return the token that names `pod` inside resource names: `<name>.<namespace>`.

    The original system used the bare pod name, so two pods of one name in two namespaces of a node collided;
    the namespace (a DNS label, so without dots) keeps the token unique and still splits at its last dot.
    """
    return f"{pod.name}.{pod.namespace}"


def outbound_listener_name(pod: Pod) -> str:
    """`outbound_http_<pod>`: the pod's explicit HTTP proxy listener (127.0.0.1:18081)."""
    return f"outbound_http_{pod_token(pod)}"


def capture_listener_name(pod: Pod) -> str:
    """`capture_<pod>`: the pod's transparent capture listener (18001)."""
    return f"capture_{pod_token(pod)}"


def l4_tcp_listener_name(pod: Pod) -> str:
    """`l4_tcp_<pod>`: the TCP half of the pod's L4 port (18082)."""
    return f"l4_tcp_{pod_token(pod)}"


def udp_listener_name(pod: Pod, address: str, port: int) -> str:
    """`udp_<pod>_<address>_<port>`: the pod's `udp_proxy` listener of one Service's ClusterIP and UDP port."""
    return f"udp_{pod_token(pod)}_{address}_{port}"


def inbound_listener_name(pod: Pod) -> str:
    """`inbound_<pod>`: the pod's mesh inbound listener (18008, mTLS)."""
    return f"inbound_{pod_token(pod)}"


def inbound_quic_listener_name(pod: Pod) -> str:
    """`inbound_quic_<pod>`: the UDP (QUIC, HTTP/3) half of the pod's mesh inbound (18008)."""
    return f"inbound_quic_{pod_token(pod)}"


def app_cluster_name(pod: Pod, port: int) -> str:
    """`app_<pod>_<port>`: the static cluster that delivers inbound traffic to the app's `port`."""
    return f"app_{pod_token(pod)}_{port}"


def mesh_authority_regex(mesh_domain: str) -> str:
    """Return the RE2 pattern of a Host header that names a mesh service: `<sa>.<ns>.<meshDomain>[:port]`."""
    return rf"^[a-z0-9-]+\.[a-z0-9-]+\.{re.escape(mesh_domain)}(:[0-9]+)?$"


# --- identity ---


def spiffe_id(service: str, *, trust_domain: str) -> str:
    """Return the SPIFFE ID of a mesh service: `spiffe://<trustDomain>/ns/<ns>/sa/<sa>` (its SDS secret name)."""
    namespace, account = split_service(service)
    return f"spiffe://{trust_domain}/ns/{namespace}/sa/{account}"


def trust_bundle_name(trust_domain: str) -> str:
    """Return the SDS name of the trust domain's CA bundle: `spiffe://<trustDomain>`."""
    return f"spiffe://{trust_domain}"
