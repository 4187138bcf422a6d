"""TLS contexts from SVIDs held in memory (the Workload API's), for mutual TLS to the SPIFFE Broker Endpoint.

`ssl` loads a certificate chain and key from files only, so they are written to a private temporary directory,
loaded, and removed at once. SPIFFE certificates name their holder in a URI SAN, not a DNS name: no hostname is
checked; the chain is verified against the bundle, and the caller checks the peer's SPIFFE ID where it must.
"""

from __future__ import annotations

import ssl
import tempfile
from pathlib import Path
from typing import Any

import anyio.streams.tls
from cryptography import x509

from aether.identity.workload_api import TlsMaterial

__all__ = [
    "certificate_spiffe_id",
    "client_context",
    "load_material",
    "peer_spiffe_id",
]

_ALPN = ["h2"]


def client_context(material: TlsMaterial | None = None) -> ssl.SSLContext:
    """Return a TLS client context presenting `material`'s SVID and verifying the server against its bundle
    (without `material`: none yet; `load_material` gives it one, and the handshakes fail until then).

    Raises:
        ssl.SSLError: The material does not load (a key that does not match its certificate, ...).
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = False
    context.verify_mode = ssl.CERT_REQUIRED
    context.set_alpn_protocols(_ALPN)
    if material is not None:
        load_material(context, material)
    return context


def load_material(context: ssl.SSLContext, material: TlsMaterial) -> None:
    """Make `context` present `material`'s SVID and trust its bundle from its next handshake on (CA certificates
    add up: `ssl` cannot forget one, so a CA dropped from the bundle stays trusted by this context; to follow a
    bundle, build a fresh context per change: `aether.identity.renewal`).

    Raises:
        ssl.SSLError: The material does not load.
    """
    with tempfile.TemporaryDirectory(prefix="aether-svid-") as directory:
        chain, key = Path(directory) / "chain.pem", Path(directory) / "key.pem"
        chain.write_bytes(material.cert_chain_pem)
        key.touch(mode=0o600)
        key.write_bytes(material.private_key_pem)
        context.load_cert_chain(chain, key)
    context.load_verify_locations(cadata=material.bundle_pem.decode("ascii"))


def peer_spiffe_id(grpc_socket: Any) -> str:
    """Return the SPIFFE ID (URI SAN) of the server certificate of a TLS connection `open_grpc_socket` opened, or
    '' when it names none (a purerpc socket holds its anyio stream as `_socket._stream`)."""
    stream = grpc_socket._socket._stream
    der = stream.extra(anyio.streams.tls.TLSAttribute.peer_certificate_binary, None)
    return "" if der is None else certificate_spiffe_id(der)


def certificate_spiffe_id(der: bytes) -> str:
    """Return the SPIFFE ID the DER certificate `der` names in its one URI SAN, or '' (none, or several)."""
    certificate = x509.load_der_x509_certificate(der)
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ""
    uris = names.get_values_for_type(x509.UniformResourceIdentifier)
    return uris[0] if len(uris) == 1 else ""
