"""Whether a pod's SVID is served, seen from the network: the certificate the pod's mesh inbound (18008, the node's
Envoy) presents in a TLS handshake must be the pod's SVID. This is how `aether identity-ready --inbound` checks
without reaching the node agent's admin socket (no hostPath volume, which a namespace enforcing the Pod Security
"baseline" level refuses).

The inbound requires a client certificate, and the checker has none: it speaks TLS 1.3 only, where the server
sends its certificate before it sees the client's, so the client's side of the handshake completes (the server's
refusal, `certificate_required`, arrives after) and the served leaf can be judged (`served_certificate_problem`):

- it names `spiffe://<td>/ns/<ns>/sa/<sa>` of the pod in its one URI SAN (any trust domain, unless one is given);
- it is valid now (`not_before` passed, `not_after` not yet);
- with a trust bundle, its chain verifies against it (done by the handshake itself, so a forged or stale
  certificate fails there).

Until the SVID is served, the listener is missing (refused), plaintext (no node SVID at all: the handshake fails),
waiting for its SDS secret (the handshake fails), or serves another certificate: each is a reason to wait.
"""

from __future__ import annotations

import datetime
import socket
import ssl

from cryptography import x509

from aether.identity.tls import certificate_spiffe_id

__all__ = ["ServedCertificateError", "fetch_served_certificate", "served_certificate_problem"]


class ServedCertificateError(Exception):
    """No certificate could be fetched (the listener refused, the handshake failed): the message says why."""


def _context(bundle_pem: bytes | None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_3  # the server's certificate before the client's is asked
    context.check_hostname = False  # a SPIFFE ID is in a URI SAN, judged below
    if bundle_pem is None:
        context.verify_mode = ssl.CERT_NONE
    else:
        context.load_verify_locations(cadata=bundle_pem.decode("ascii"))
    return context


def fetch_served_certificate(
    host: str, port: int, *, bundle_pem: bytes | None = None, timeout: float = 5.0
) -> bytes:
    """Return the DER leaf certificate the TLS server at `host:port` presents (blocking, at most `timeout` s each
    for the connection and the handshake); with `bundle_pem`, only one whose chain verifies against it.

    Raises:
        ServedCertificateError: The connection or the handshake failed (the reason in the message).
    """
    context = _context(bundle_pem)
    try:
        with (
            socket.create_connection((host, port), timeout=timeout) as connection,
            context.wrap_socket(connection, do_handshake_on_connect=True) as tls,
        ):
            der = tls.getpeercert(binary_form=True)
    except ssl.SSLCertVerificationError as exc:
        raise ServedCertificateError(
            f"{host}:{port} serves a certificate that does not verify against the trust bundle:"
            f" {exc.verify_message}"
        ) from exc
    except ssl.SSLError as exc:
        raise ServedCertificateError(
            f"the TLS handshake with {host}:{port} failed ({exc.reason or exc}): no SVID served there yet"
        ) from exc
    except OSError as exc:
        raise ServedCertificateError(f"cannot connect to {host}:{port}: {exc}") from exc
    if not der:
        raise ServedCertificateError(f"{host}:{port} presented no certificate")
    return der


def served_certificate_problem(
    der: bytes, *, namespace: str, service_account: str, trust_domain: str = "", now: datetime.datetime
) -> str | None:
    """Return None when DER certificate `der` is the SVID of a pod of `namespace`/`service_account` (of
    `trust_domain`, or any when ''), valid at `now` (aware); else what is wrong with it."""
    try:
        certificate = x509.load_der_x509_certificate(der)
        spiffe_id = certificate_spiffe_id(der)
    except ValueError as exc:
        return f"the served certificate does not parse: {exc}"
    path = f"/ns/{namespace}/sa/{service_account}"
    wanted = f"spiffe://{trust_domain}{path}" if trust_domain else f"spiffe://<trust domain>{path}"
    prefix, _, rest = spiffe_id.partition("spiffe://")
    domain, slash, tail = rest.partition("/")
    good_id = not prefix and domain and slash + tail == path and (not trust_domain or domain == trust_domain)
    if not good_id:
        return f"the served certificate names {spiffe_id or 'no SPIFFE ID'!r}, not {wanted!r}"
    if certificate.not_valid_before_utc > now:
        return (
            f"the served SVID {spiffe_id!r} is not valid yet (not before {certificate.not_valid_before_utc})"
        )
    if certificate.not_valid_after_utc <= now:
        return f"the served SVID {spiffe_id!r} expired at {certificate.not_valid_after_utc}"
    return None
