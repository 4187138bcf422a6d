"""TLS contexts for gRPC between roles: mutual TLS with X.509-SVIDs, over HTTP/2 (ALPN "h2").

SPIFFE certificates name their holder in a URI SAN, not a DNS name, so neither side checks a hostname: both
verify the chain against the trust bundle, and a server that authorizes reads the client's SPIFFE ID itself
(the registrar: `aether.registrar.authorization`).
"""

from __future__ import annotations

import ssl
from pathlib import Path

__all__ = ["client_tls_context", "server_tls_context"]

_ALPN = ["h2"]
# gRPC clients (grpcio, Envoy) refuse a TLS connection that did not negotiate HTTP/2.


def server_tls_context(*, certificate: Path, key: Path, bundle: Path) -> ssl.SSLContext:
    """Return a server's context (the registrar's): its SVID (`certificate` chain and `key` PEM files), and client certificates
    required, verified against `bundle` (the trust domain's roots).

    Raises:
        OSError: A file cannot be read.
        ssl.SSLError: A file holds no valid certificate or key, or the key does not match.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certificate, key)
    context.load_verify_locations(cafile=bundle)
    context.verify_mode = ssl.CERT_REQUIRED
    context.set_alpn_protocols(_ALPN)
    return context


def client_tls_context(*, certificate: Path, key: Path, bundle: Path) -> ssl.SSLContext:
    """Return a client's context (an agent's): its SVID as client certificate, the server verified against `bundle`.

    Raises:
        OSError: A file cannot be read.
        ssl.SSLError: A file holds no valid certificate or key, or the key does not match.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = False  # SVIDs carry no DNS name; the chain is what is verified
    context.load_cert_chain(certificate, key)
    context.load_verify_locations(cafile=bundle)
    context.verify_mode = ssl.CERT_REQUIRED
    context.set_alpn_protocols(_ALPN)
    return context
