"""X.509 material as the SPIFFE APIs deliver it (ASN.1 DER), turned into the core's `Svid` and `TrustBundle`, and
the checks the agent makes before anything reaches Envoy.

The Workload API and the Broker API send certificates as DER back to back, and keys as PKCS#8 DER. These functions
re-encode them as PEM (what the core keeps and Envoy's SDS takes), read them with `aether.identity.pem`, and judge
what only a source with a clock and the trust bundle can judge: whether the chain leads to a CA of the bundle,
whether the SVID is valid yet, and whether it is of the mesh's trust domain and names the pod's SPIFFE ID. The
first problem found becomes `Svid.problem`; the reducer rejects such an SVID and keeps the one in force, so the log
explains every rejection. Expiry (`not_after`) is left to the reducer, which compares it with the event's time.
"""

from __future__ import annotations

import logging

import attrs
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

from aether.core.events import Svid, TrustBundle
from aether.identity.pem import _issued_by, bundle_from_pem, svid_from_pem

LOG = logging.getLogger("aether.identity.x509")

__all__ = [
    "bundle_from_der",
    "check_svid",
    "der_to_pem_certificates",
    "key_der_to_pem",
    "not_before_of_chain",
    "split_der",
    "svid_from_der",
    "trust_domain_of_id",
]


def split_der(data: bytes) -> list[bytes]:
    """Split ASN.1 DER structures laid back to back (the SPIFFE APIs' chains and bundles) into one each.

    Raises:
        ValueError: `data` is not a sequence of whole DER structures.
    """
    parts: list[bytes] = []
    offset = 0
    while offset < len(data):
        if offset + 2 > len(data) or data[offset] != 0x30:
            raise ValueError(f"byte {offset}: not the start of a DER SEQUENCE")
        first = data[offset + 1]
        header = 2
        if first < 0x80:
            length = first
        else:
            count = first & 0x7F
            if count == 0 or count > 4 or offset + 2 + count > len(data):
                raise ValueError(f"byte {offset}: a DER length that does not parse")
            length = int.from_bytes(data[offset + 2 : offset + 2 + count])
            header += count
        end = offset + header + length
        if end > len(data):
            raise ValueError(f"byte {offset}: a DER structure cut short ({end - len(data)} bytes missing)")
        parts.append(data[offset:end])
        offset = end
    return parts


def der_to_pem_certificates(data: bytes) -> bytes:
    """Return the DER certificates of `data` (back to back) as PEM blocks, in order.

    Raises:
        ValueError: `data` does not split into DER structures, or one is not a certificate.
    """
    return b"".join(
        x509.load_der_x509_certificate(part).public_bytes(serialization.Encoding.PEM)
        for part in split_der(data)
    )


def key_der_to_pem(data: bytes) -> bytes:
    """Return the unencrypted PKCS#8 DER private key `data` as a PKCS#8 PEM block.

    Raises:
        ValueError: `data` is not an unencrypted private key.
    """
    try:
        key = serialization.load_der_private_key(data, password=None)
    except (TypeError, UnsupportedAlgorithm) as exc:
        raise ValueError(f"the private key does not load ({exc})") from exc
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def trust_domain_of_id(spiffe_id: str) -> str:
    """Return the trust domain of SPIFFE ID `spiffe_id` (`spiffe://<td>/...`), or '' when it is not one."""
    scheme, _, rest = spiffe_id.partition("://")
    return rest.partition("/")[0] if scheme == "spiffe" else ""


def bundle_from_der(data: bytes, *, trust_domain: str) -> TrustBundle:
    """Return the trust bundle of `trust_domain` that `data` holds (DER CA certificates back to back)."""
    try:
        pem = der_to_pem_certificates(data)
    except ValueError as exc:
        return TrustBundle(
            trust_domain=trust_domain, bundle_pem=b"", problem=f"the bundle does not parse ({exc})"
        )
    return bundle_from_pem(pem, trust_domain=trust_domain)


def svid_from_der(
    chain: bytes, key: bytes, *, spiffe_id: str, bundle_pem: bytes, trust_domain: str, now: int
) -> Svid:
    """Return the `Svid` that a SPIFFE API delivered for `spiffe_id`, checked at `now` (ns since the epoch).

    `chain` is the DER certificate chain (leaf first), `key` the PKCS#8 DER key, `bundle_pem` the PEM CA
    certificates of `trust_domain` the chain must lead to. See `check_svid` for the checks.
    """
    problem = ""
    try:
        content = der_to_pem_certificates(chain)
    except ValueError as exc:
        content, problem = b"", f"the certificate chain does not parse ({exc})"
    try:
        content += key_der_to_pem(key)
    except ValueError as exc:
        problem = problem or f"the private key does not parse ({exc})"
    svid = svid_from_pem(content, spiffe_id=spiffe_id)
    if problem:
        return attrs.evolve(svid, problem=problem)
    return check_svid(svid, bundle_pem=bundle_pem, trust_domain=trust_domain, now=now)


def check_svid(svid: Svid, *, bundle_pem: bytes, trust_domain: str, now: int) -> Svid:
    """Return `svid` with the first problem of these checks (after any it already has) as its `problem`.

    - the leaf is of `trust_domain` (a wrong trust domain is named as such, before the SPIFFE ID check);
    - the leaf names the SPIFFE ID it is delivered for;
    - the chain leads to a CA certificate of `bundle_pem` (every certificate issued by the next, the last by a CA
      of the bundle);
    - the leaf is valid at `now` (`not_before` passed; `not_after` is the reducer's to judge).

    The DNS SANs HTTP/3 needs were checked when the leaf was read (`aether.identity.pem.http3_problem`): their
    absence is no problem here, only `Svid.http3_problem` (reported with `report_http3`).
    """
    if svid.problem:
        return svid
    problem = _svid_problem(svid, bundle_pem=bundle_pem, trust_domain=trust_domain, now=now)
    return svid if problem is None else attrs.evolve(svid, problem=problem)


def _svid_problem(svid: Svid, *, bundle_pem: bytes, trust_domain: str, now: int) -> str | None:
    leaf_domain = trust_domain_of_id(svid.leaf_spiffe_id)
    if leaf_domain != trust_domain:
        return (
            f"the certificate is of trust domain {leaf_domain!r} ({svid.leaf_spiffe_id!r}),"
            f" not of the mesh's {trust_domain!r}"
        )
    if svid.leaf_spiffe_id != svid.spiffe_id:
        return (
            f"the certificate names another identity (got {svid.leaf_spiffe_id!r}, want {svid.spiffe_id!r})"
        )
    chain = x509.load_pem_x509_certificates(svid.cert_chain_pem)
    try:
        roots = x509.load_pem_x509_certificates(bundle_pem) if bundle_pem else []
    except ValueError:
        roots = []
    if not roots:
        return f"no trust bundle of {trust_domain!r} to verify the chain with"
    if not any(_issued_by(chain[-1], root) for root in roots):
        return f"the certificate chain does not lead to a CA of the trust bundle of {trust_domain!r}"
    not_before = int(chain[0].not_valid_before_utc.timestamp()) * 10**9
    if not_before > now:
        return f"the certificate is not valid yet (not_before {not_before!r} > now {now!r})"
    return None


def report_http3(svid: Svid) -> Svid:
    """Log what keeps `svid` from serving HTTP/3 (`Svid.http3_problem`, found when the leaf was read: the two DNS
    SANs of `aether.core.project.quic`), if anything; return `svid`. Not a refusal: the SVID is served over TCP,
    its pods get no QUIC inbound, and their callers stay on HTTP/2 (`aether status` says why)."""
    if svid.http3_problem and not svid.problem:
        LOG.warning("svid %r: %s", svid.spiffe_id, svid.http3_problem)
    return svid


def not_before_of_chain(chain: bytes) -> int:
    """Return the `not_before` (ns since the epoch) of the leaf of DER chain `chain`, or 0 when it does not parse."""
    try:
        leaf = x509.load_der_x509_certificate(split_der(chain)[0])
    except (ValueError, IndexError):
        return 0
    return int(leaf.not_valid_before_utc.timestamp()) * 10**9
