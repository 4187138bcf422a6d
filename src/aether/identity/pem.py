"""Reading X.509-SVIDs and trust bundles out of PEM text: pure functions over bytes, no I/O.

They report what they find and never judge it: what the material says (the leaf's SPIFFE ID, its expiry) and what
is wrong with it (a `problem`) go into the core's `Svid` and `TrustBundle`, and the reducers decide.
"""

from __future__ import annotations

import datetime
import itertools
import re

import attrs
from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes, PublicKeyTypes

from aether.core.events import Svid, TrustBundle
from aether.core.project.quic import quic_dns_sans_of_id
from aether.core.values import Redacted

CERTIFICATE = "CERTIFICATE"
"""The label of a certificate's PEM block."""

PRIVATE_KEY_LABELS = frozenset(("PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY"))
"""The labels of an unencrypted private key's PEM block: PKCS#8, SEC 1 and PKCS#1."""

_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n.*?-----END \1-----", re.DOTALL)
_BEGIN = b"-----BEGIN "
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@attrs.frozen(kw_only=True)
class PemBlock:
    """One PEM block: its label and its text from the BEGIN line to the END line and a newline."""

    label: str
    text: bytes


def pem_blocks(content: bytes) -> tuple[PemBlock, ...]:
    """Return the PEM blocks of `content` in order; text around them (comments, `Bag Attributes`) is skipped."""
    return tuple(
        PemBlock(label=match.group(1).decode("ascii"), text=match.group(0) + b"\n")
        for match in _BLOCK.finditer(content)
    )


def svid_from_pem(content: bytes, *, spiffe_id: str) -> Svid:
    """Read the X.509-SVID that `content` holds, delivered for `spiffe_id`.

    `content` holds the certificate chain (leaf first, then the intermediates up to the trust bundle) and one
    private key, as PEM blocks in any order. The result carries the certificate blocks as `cert_chain_pem` and the
    key block as `private_key`, the leaf's URI SAN as `leaf_spiffe_id`, its expiry as `not_after`, and the first
    problem found in `problem` (empty when none): a block cut short or of an unknown kind, no certificate, a
    certificate that does not parse, not exactly one key, a key that does not parse, a leaf without exactly one URI
    SAN, a CA as the leaf, a chain out of order, or a key that does not match the leaf.

    Whether the leaf names `spiffe_id` and whether it expired are for the reducer to judge.
    Unknown blocks never reach `cert_chain_pem`: a stray secret stays out of the log's readable fields.
    """
    blocks = pem_blocks(content)
    certificates = [block.text for block in blocks if block.label == CERTIFICATE]
    keys = [block.text for block in blocks if block.label in PRIVATE_KEY_LABELS]
    facts = _LeafFacts()
    problem = _block_problem(content, blocks, what="the file")
    if problem is None:
        problem = _svid_problem(certificates, keys, facts)
    return Svid(
        spiffe_id=spiffe_id,
        cert_chain_pem=b"".join(certificates),
        private_key=Redacted(keys[0] if len(keys) == 1 else b""),
        not_after=facts.not_after,
        leaf_spiffe_id=facts.spiffe_id,
        problem=problem or "",
        # Judged only for an SVID that can be served: one of another identity is refused anyway.
        http3_problem=""
        if problem or facts.spiffe_id != spiffe_id
        else http3_problem(spiffe_id, facts.dns_names),
    )


def http3_problem(spiffe_id: str, dns_names: tuple[str, ...]) -> str:
    """Return which of the two DNS SANs HTTP/3 between proxies needs (`aether.core.project.quic`) a leaf of
    `spiffe_id` with the DNS SANs `dns_names` lacks, as a sentence; empty when it has both (or `spiffe_id` is no
    workload ID, which needs none)."""
    wanted = quic_dns_sans_of_id(spiffe_id)
    if wanted is None:
        return ""
    have = {name.lower() for name in dns_names}
    missing = [name for name in wanted if name not in have]
    if not missing:
        return ""
    names = " and ".join(repr(name) for name in missing)
    return (
        f"the certificate lacks the DNS SAN{'s' if len(missing) > 1 else ''} {names} that HTTP/3 between proxies"
        " needs: served over TCP only, its callers stay on HTTP/2"
    )


def bundle_from_pem(content: bytes, *, trust_domain: str) -> TrustBundle:
    """Read the trust bundle of `trust_domain` that `content` holds (PEM `CERTIFICATE` blocks of CAs).

    The problem is the first found: a block cut short or not a certificate, no certificate, one that does not
    parse, one that is not a CA, or one whose URI SAN names another trust domain. Only certificate blocks reach
    `bundle_pem`.
    """
    blocks = pem_blocks(content)
    certificates = [block.text for block in blocks if block.label == CERTIFICATE]
    problem = _block_problem(content, blocks, what="the bundle", known=frozenset((CERTIFICATE,)))
    if problem is None:
        problem = _bundle_problem(certificates, trust_domain=trust_domain)
    return TrustBundle(trust_domain=trust_domain, bundle_pem=b"".join(certificates), problem=problem or "")


def bundle_trust_domains(content: bytes) -> tuple[str, ...]:
    """Return the trust domains the CA certificates of `content` name in URI SANs `spiffe://<td>`, sorted.

    Certificates that do not parse, and URI SANs that are not SPIFFE IDs of a trust domain, are skipped.
    """
    domains: set[str] = set()
    for block in pem_blocks(content):
        if block.label != CERTIFICATE:
            continue
        try:
            certificate = x509.load_pem_x509_certificate(block.text)
            uris = _uri_sans(certificate)
        except ValueError:
            continue
        domains.update(domain for uri in uris if (domain := _trust_domain_of(uri)) is not None)
    return tuple(sorted(domains))


@attrs.define
class _LeafFacts:
    spiffe_id: str = ""
    not_after: int = 0
    dns_names: tuple[str, ...] = ()


def _block_problem(
    content: bytes,
    blocks: tuple[PemBlock, ...],
    *,
    what: str,
    known: frozenset[str] = PRIVATE_KEY_LABELS | {CERTIFICATE},
) -> str | None:
    if content.count(_BEGIN) != len(blocks):
        return "a PEM block is cut short (a BEGIN line without its END line)"
    for block in blocks:
        if block.label not in known:
            return f"{what} holds a PEM block of an unexpected kind ({block.label!r})"
    return None


def _svid_problem(certificates: list[bytes], keys: list[bytes], facts: _LeafFacts) -> str | None:
    """Return the first problem of the chain and key, filling `facts` with what the leaf says as it goes."""
    if not certificates:
        return "the file holds no certificate"
    chain: list[x509.Certificate] = []
    for number, text in enumerate(certificates, 1):
        try:
            chain.append(x509.load_pem_x509_certificate(text))
        except ValueError:
            return f"certificate {number} of the chain does not parse as X.509"
    leaf = chain[0]
    facts.not_after = _ns(leaf.not_valid_after_utc)
    try:
        uris = _uri_sans(leaf)
        leaf_is_ca = _is_ca(leaf)
    except ValueError:
        return "the leaf certificate has extensions that do not parse"
    if len(uris) != 1:
        return f"the leaf certificate must name exactly one URI SAN (got {uris!r})"
    facts.spiffe_id = uris[0]
    facts.dns_names = tuple(_sans(leaf, x509.DNSName))
    if leaf_is_ca:
        return "the leaf certificate must not be a CA (the chain must start with the leaf)"
    for number, (child, issuer) in enumerate(itertools.pairwise(chain), 1):
        if not _issued_by(child, issuer):
            return (
                f"certificate {number} of the chain is not issued by certificate {number + 1}"
                " (the chain must go from the leaf up to its issuers)"
            )
    if len(keys) != 1:
        return "the file holds no private key" if not keys else f"the file holds {len(keys)} private keys"
    key = _private_key(keys[0])
    if key is None:
        return "the private key does not parse (an unencrypted PKCS#8, SEC 1 or PKCS#1 key is expected)"
    if _public_der(key.public_key()) != _public_der(leaf.public_key()):
        return "the private key does not match the leaf certificate"
    return None


def _bundle_problem(certificates: list[bytes], *, trust_domain: str) -> str | None:
    if not certificates:
        return "the bundle holds no certificate"
    for number, text in enumerate(certificates, 1):
        try:
            certificate = x509.load_pem_x509_certificate(text)
            uris = _uri_sans(certificate)
            is_ca = _is_ca(certificate)
        except ValueError:
            return f"certificate {number} of the bundle does not parse as X.509"
        if not is_ca:
            return f"certificate {number} of the bundle is not a CA"
        for uri in uris:
            domain = _trust_domain_of(uri)
            if domain is not None and domain != trust_domain:
                return f"certificate {number} of the bundle names another trust domain (got {domain!r})"
    return None


def _sans(
    certificate: x509.Certificate, kind: type[x509.DNSName] | type[x509.UniformResourceIdentifier]
) -> list[str]:
    """The certificate's subject alternative names of `kind` (URI, DNS)."""
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return names.get_values_for_type(kind)


def _uri_sans(certificate: x509.Certificate) -> list[str]:
    return _sans(certificate, x509.UniformResourceIdentifier)


def _is_ca(certificate: x509.Certificate) -> bool:
    try:
        return certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        return False


def _issued_by(child: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        child.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, UnsupportedAlgorithm, InvalidSignature):
        # ValueError: the issuer's name is not the child's issuer name; TypeError and UnsupportedAlgorithm: a key
        # or signature algorithm it cannot check; InvalidSignature: another key signed the child.
        return False
    return True


def _private_key(text: bytes) -> PrivateKeyTypes | None:
    try:
        return serialization.load_pem_private_key(text, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        # TypeError: the key is encrypted; the others: it does not parse or is of a kind OpenSSL does not load.
        return None


def _public_der(key: PublicKeyTypes) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _trust_domain_of(uri: str) -> str | None:
    scheme, _, rest = uri.partition("://")
    domain = rest.partition("/")[0]
    return domain if scheme == "spiffe" and domain else None


def _ns(moment: datetime.datetime) -> int:
    return (moment - _EPOCH) // datetime.timedelta(microseconds=1) * 1_000
