"""SDS secrets: the SVIDs the node's listeners and clusters present, and the trust bundle that validates peers.

An SVID's secret is named by its SPIFFE ID and holds the certificate chain and private key inline; the bundle's is
named `spiffe://<trustDomain>` and holds the CA certificates as a validation context. A node's caller secrets
(`caller:<SPIFFE ID>`, `caller:fallback`) hold the SVID each local workload presents upstream (see `tls`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from envoy.config.core.v3 import base_pb2
from envoy.extensions.transport_sockets.tls.v3 import common_pb2, secret_pb2

from aether.core.events.identity import Svid, TrustBundle
from aether.core.order import sorted_unique
from aether.core.project.names import FALLBACK_CALLER_SECRET, caller_secret_name, trust_bundle_name
from aether.core.project.tls import fallback_identity


def svid_secret(svid: Svid, *, name: str = "") -> Any:
    """Return the secret of `svid`: its certificate chain and private key, named by its SPIFFE ID (or `name`)."""
    return secret_pb2.Secret(
        name=name or svid.spiffe_id,
        tls_certificate=common_pb2.TlsCertificate(
            certificate_chain=base_pb2.DataSource(inline_bytes=svid.cert_chain_pem),
            private_key=base_pb2.DataSource(inline_bytes=svid.private_key.secret),
        ),
    )


def bundle_secret(bundle: TrustBundle) -> Any:
    """Return the secret of `bundle`: its CA certificates, named `spiffe://<trustDomain>`."""
    return secret_pb2.Secret(
        name=trust_bundle_name(bundle.trust_domain),
        validation_context=common_pb2.CertificateValidationContext(
            trusted_ca=base_pb2.DataSource(inline_bytes=bundle.bundle_pem)
        ),
    )


def node_secrets(
    identities: Iterable[str],
    *,
    svids: Mapping[str, Svid],
    bundles: Mapping[str, TrustBundle],
    trust_domain: str,
) -> list[Any]:
    """Return the secrets of `identities` (those the node holds an SVID for) and of the mesh's trust bundle."""
    secrets = [svid_secret(svids[identity]) for identity in sorted_unique(identities) if identity in svids]
    bundle = bundles.get(trust_domain)
    if bundle is not None:
        secrets.append(bundle_secret(bundle))
    return secrets


def caller_secrets(identities: Iterable[str], *, svids: Mapping[str, Svid]) -> list[Any]:
    """Return the caller secrets of a node whose local workloads run as `identities`: `caller:<SPIFFE ID>` for each
    (its SVID, or the node's fallback SVID while it has none), then `caller:fallback`; none when the node holds no
    SVID (plaintext)."""
    fallback = fallback_identity(identities, svids)
    if not fallback:
        return []
    secrets = [
        svid_secret(svids.get(identity, svids[fallback]), name=caller_secret_name(identity))
        for identity in sorted_unique(identities)
    ]
    secrets.append(svid_secret(svids[fallback], name=FALLBACK_CALLER_SECRET))
    return secrets
