"""What the Broker API's per-workload bundles say against the node's: compared, reported, never served.

The broker answers each pod's stream with the bundle of its SVID's trust domain and the federated bundles the pod's
SPIRE entry entitles it to. What the node's Envoy trusts is one bundle per trust domain, the agent's own Workload
API's (`aether.identity.workload_api`), and the mesh's listeners accept callers of the mesh's trust domain only. So:

- A pod's SVID is judged against the node's bundle (`aether.identity.x509.check_svid`), not the one the broker sent
  with it: the node's is what its peers verify it with, so an SVID that chains only to the broker's bundle would be
  refused by every peer anyway, and one that chains to the node's is accepted by them whatever the broker's bundle
  says. Refusing it for a disagreement would break traffic and add no security.
- A disagreement is still a fact an operator needs (a CA rotation the node's Workload API has not caught up with,
  a SPIRE entry that sees another bundle): `bundle_disagreement` names it, the agent logs it, and `/identity` and
  `aether status` show it per pod.
- Federated bundles per workload are reported (`PodIdentity.federated`), not projected: no cross-trust-domain call
  is projected (inbound peers must be of the mesh's trust domain, clusters pin mesh SPIFFE IDs). When one is, a
  pod's validation context must be its own trust domain's bundle plus the federated bundles of its own entry (per
  service account, as its SDS secret is), never the union the agent's entry was given: that would trust, for every
  pod, what SPIRE granted one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from aether.identity.x509 import split_der

__all__ = ["bundle_certificates", "bundle_disagreement", "bundle_narrowed"]


def bundle_certificates(bundle_pem: bytes) -> frozenset[bytes]:
    """The DER certificates of PEM bundle `bundle_pem` (empty for b'').

    Raises:
        ValueError: It does not parse.
    """
    if not bundle_pem:
        return frozenset()
    return frozenset(
        certificate.public_bytes(serialization.Encoding.DER)
        for certificate in x509.load_pem_x509_certificates(bundle_pem)
    )


def bundle_disagreement(
    bundle_der: bytes,
    *,
    federated: Iterable[str],
    trust_domain: str,
    node_bundles: Mapping[str, bytes],
) -> str:
    """Return '' when the broker's bundle of `trust_domain` for a pod (`bundle_der`: DER certificates back to back;
    b'' when it sent none) holds the CAs the node's bundle of it (`node_bundles`: PEM by trust domain) holds, and
    every trust domain of `federated` (the pod's federated bundles) has a bundle on the node; else what differs."""
    problems: list[str] = []
    if bundle_der:
        try:
            pod = frozenset(split_der(bundle_der))
            node = bundle_certificates(node_bundles.get(trust_domain, b""))
        except ValueError as exc:
            problems.append(f"the broker's bundle of {trust_domain!r} for this pod does not parse: {exc}")
        else:
            if pod - node:
                problems.append(
                    f"the broker's bundle of {trust_domain!r} for this pod holds {len(pod - node)} CA(s) the"
                    " node's (Workload API) bundle lacks: SVIDs they issue are refused here and by the peers"
                    " until the node's bundle has them"
                )
            if node - pod:
                problems.append(
                    f"the node trusts {len(node - pod)} CA(s) of {trust_domain!r} that the broker's bundle for"
                    " this pod no longer holds (the node's Workload API bundle lags the broker's)"
                )
    missing = sorted(domain for domain in set(federated) if domain not in node_bundles)
    if missing:
        problems.append(f"its SPIRE entry federates with {missing!r}, whose bundles the node does not hold")
    return "; ".join(problems)


def bundle_narrowed(old_pem: bytes, new_pem: bytes) -> bool:
    """True when PEM bundle `new_pem` lacks a CA certificate of `old_pem` (connections verified with the old one
    may rest on a CA no longer trusted).

    Raises:
        ValueError: A bundle does not parse.
    """
    return not bundle_certificates(old_pem) <= bundle_certificates(new_pem)
