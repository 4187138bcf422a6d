"""Who may change which endpoints: an agent registers and unregisters only endpoints of its own node.

The caller is known by its mTLS identity, an X.509-SVID whose SPIFFE ID names its node::

    spiffe://<trust-domain>/ns/aether-system/sa/aether-agent/node/<node-name>

That is the agent DaemonSet's service-account identity with the node appended: SPIRE issues it to each agent
pod with a registration entry per node (the Kubernetes node selector), so one agent's identity never
speaks for another node. An endpoint says where it runs in `kubernetes_metadata.node_name`.
"""

from __future__ import annotations

from cryptography import x509

from aether.core.events.registry import Protocol
from aether.registrar.errors import PermissionRefusedError
from aether.registrar.snapshot import EndpointRegistered, EndpointsUnregistered, Mutation, RegistrySnapshot

__all__ = [
    "AGENT_NAMESPACE",
    "AGENT_SERVICE_ACCOUNT",
    "agent_spiffe_id",
    "authorize",
    "node_of_spiffe_id",
    "spiffe_id_of_certificate",
]

AGENT_NAMESPACE = "aether-system"
"""The namespace the agent DaemonSet runs in."""

AGENT_SERVICE_ACCOUNT = "aether-agent"
"""The agent DaemonSet's service account."""


def agent_spiffe_id(node: str, *, trust_domain: str) -> str:
    """Return the SPIFFE ID of the agent of `node`."""
    return f"spiffe://{trust_domain}/ns/{AGENT_NAMESPACE}/sa/{AGENT_SERVICE_ACCOUNT}/node/{node}"


def node_of_spiffe_id(spiffe_id: str, *, trust_domain: str) -> str | None:
    """Return the node whose agent `spiffe_id` names, or None when it names no agent of `trust_domain`."""
    prefix = agent_spiffe_id("", trust_domain=trust_domain)
    if not spiffe_id.startswith(prefix):
        return None
    node = spiffe_id.removeprefix(prefix)
    return node if node and "/" not in node else None


def spiffe_id_of_certificate(der: bytes) -> str | None:
    """Return the SPIFFE ID (the one `spiffe://` URI SAN) of a DER certificate, or None if it has not exactly one."""
    certificate = x509.load_der_x509_certificate(der)
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return None
    uris = [
        uri
        for uri in names.get_values_for_type(x509.UniformResourceIdentifier)
        if uri.startswith("spiffe://")
    ]
    return uris[0] if len(uris) == 1 else None


def authorize(
    mutation: Mutation, *, caller: str | None, trust_domain: str, snapshot: RegistrySnapshot
) -> None:
    """Refuse `mutation` unless `caller` (a SPIFFE ID, None if the caller showed none) is the agent of the node
    of every endpoint it changes.

    A registration must name the caller's node in `kubernetes_metadata.node_name`; an unregistration may remove
    only endpoints (of any protocol) registered for the caller's node; IPs the registry does not hold are no
    change, and allowed.

    Raises:
        PermissionRefusedError: The caller is no agent of `trust_domain`, or the endpoint runs on another node.
    """
    node = None if caller is None else node_of_spiffe_id(caller, trust_domain=trust_domain)
    if node is None:
        raise PermissionRefusedError(
            caller or "",
            rule=f"must be an agent identity {agent_spiffe_id('<node>', trust_domain=trust_domain)!r}",
        )
    match mutation:
        case EndpointRegistered(endpoint=endpoint):
            others = [] if endpoint.node_name == node else [(endpoint.ip, endpoint.node_name)]
        case EndpointsUnregistered(service=service, ips=ips):
            held = (
                snapshot.endpoints.get((service, protocol, ip))
                for ip in sorted(set(ips))
                for protocol in Protocol
            )
            others = [(one.ip, one.node_name) for one in held if one is not None and one.node_name != node]
        case _:  # pragma: no cover - the type checker proves this unreachable
            raise TypeError(f"mutation: unknown type {type(mutation).__name__!r}")
    if others:
        ip, other = others[0]
        raise PermissionRefusedError(
            caller or "",
            rule=f"may change only endpoints of node {node!r} (endpoint {ip} is on node {other!r})",
        )
