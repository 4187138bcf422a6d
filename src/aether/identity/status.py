"""Where each pod's identity stands, as the admin socket's `/identity` document (`aether status` prints it,
`aether identity-ready` waits on it).

A pod's SVID is *served* when the state holds a valid SVID for the pod's SPIFFE ID (the node's SDS secret of that
name): it is in the snapshot Envoy is given. A rejection of that SPIFFE ID (the checks of `aether.identity.x509`
and of the reducer) is shown with its reason, whether or not an older SVID still serves. A served SVID without the
DNS SANs HTTP/3 needs says so in `http3` (the pod is reached over HTTP/2 only).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aether.core.state import State
from aether.identity.broker import PodIdentity
from aether.identity.files import spiffe_id_of

__all__ = ["IDENTITY_DOCUMENT", "identity_document"]

IDENTITY_DOCUMENT = "/identity"
"""The admin socket's path of the document."""


def identity_document(state: State, *, now: int, broker: Iterable[PodIdentity] = ()) -> dict[str, Any]:
    """Return `{"pods": [...]}`: per pod of `state` (sorted), its SPIFFE ID, whether its SVID is served (and until
    when), the latest rejection of its SPIFFE ID, and what the broker client reports for it (with `broker`: the
    reference type, its last error, its federated trust domains and how its bundles differ from the node's)."""
    trust_domain = state.kube.mesh_config.trust_domain
    brokered = {item.pod: item for item in broker}
    pods: list[dict[str, Any]] = []
    for key, record in sorted(state.pods.items()):
        pod = record.pod
        spiffe_id = spiffe_id_of(f"{pod.namespace}/{pod.service_account}", trust_domain=trust_domain)
        svid = state.identity.svids.get(spiffe_id)
        served = svid is not None and (not svid.not_after or svid.not_after > now)
        rejection = state.diagnostics.rejections.get(f"svid/{spiffe_id}")
        entry: dict[str, Any] = {
            "pod": key,
            "spiffeId": spiffe_id,
            "served": served,
            "notAfter": svid.not_after if svid is not None else 0,
            "rejection": "" if rejection is None else rejection.message,
            # Why the pod's inbound takes no HTTP/3 (its SVID lacks the DNS SANs QUIC needs), or empty.
            "http3": svid.http3_problem if svid is not None else "",
        }
        item = brokered.get(key)
        if item is not None:
            entry["broker"] = {
                "reference": item.reference,
                "received": item.received,
                "lastError": item.last_error,
                "federated": list(item.federated),
                "bundleDisagreement": item.bundle_disagreement,
            }
        pods.append(entry)
    return {"pods": pods}
