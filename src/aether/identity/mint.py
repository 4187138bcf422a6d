"""Local identities minted with `cryptography`: a SPIFFE CA, the X.509-SVIDs it issues, and the SVID directory.

Keys, serial numbers and signatures derive from the trust domain and the order of issue, so whoever mints the
same things in the same order gets the same bytes (and needs no network). The demo and the tests use it; anyone can
recompute these keys, so a real mesh never does.
"""

from __future__ import annotations

import datetime
import hashlib
import os
from pathlib import Path

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from aether.core.events import Svid
from aether.core.project.quic import quic_dns_sans_of_id
from aether.core.values import Redacted
from aether.identity.files import BUNDLE_FILE, svid_file_name

__all__ = [
    "NOT_AFTER",
    "NOT_BEFORE",
    "MintedSvid",
    "TestCA",
    "remove_svid",
    "write_bundle",
    "write_svid",
]

NOT_BEFORE = 1_577_836_800 * 10**9
"""The default start of validity, 2020-01-01T00:00:00Z (ns): before `aether.testing.AT` and before today."""

NOT_AFTER = 4_070_908_800 * 10**9
"""The default end of validity, 2099-01-01T00:00:00Z (ns): minted certificates hold under `AT` and a real clock."""

_P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


@attrs.frozen(kw_only=True)
class MintedSvid:
    """An X.509-SVID as a CA issued it."""

    spiffe_id: str
    """The SPIFFE ID its leaf names."""
    cert_chain_pem: bytes
    """The leaf, then the intermediates up to (not including) the root, as PEM."""
    private_key_pem: bytes
    """The leaf's private key as unencrypted PKCS#8 PEM."""
    not_after: int
    """The leaf's expiry in nanoseconds since the epoch (whole seconds, as X.509 stores it)."""

    @property
    def file_content(self) -> bytes:
        """The content of its file in the SVID directory: the chain, then the key."""
        return self.cert_chain_pem + self.private_key_pem

    def svid(self, *, spiffe_id: str | None = None) -> Svid:
        """Return the `Svid` the file source reads from its file, delivered for `spiffe_id` (default: its own)."""
        return Svid(
            spiffe_id=self.spiffe_id if spiffe_id is None else spiffe_id,
            cert_chain_pem=self.cert_chain_pem,
            private_key=Redacted(self.private_key_pem),
            not_after=self.not_after,
            leaf_spiffe_id=self.spiffe_id,
        )


class TestCA:
    """A CA of a SPIFFE trust domain: a root, or an intermediate when `issuer` is given.

    The CA certificate names `spiffe://<trustDomain>` in its URI SAN, is CA:true with keyCertSign, and uses an EC
    P-256 key. Leaves name their SPIFFE ID in their only URI SAN, are CA:false with digitalSignature, and serve as
    TLS server and client.
    """

    __test__ = False  # a helper, not a test class (its name would make pytest try to collect it)

    def __init__(
        self,
        trust_domain: str,
        *,
        issuer: TestCA | None = None,
        key: ec.EllipticCurvePrivateKey | None = None,
    ) -> None:
        """Mint the CA of `trust_domain`: a root, or an intermediate signed by `issuer`; with `key` (default: new)."""
        self.trust_domain = trust_domain
        """The trust domain."""
        self._label = f"root:{trust_domain}" if issuer is None else issuer._next_label("intermediate")
        self._issued = 0
        self.key: ec.EllipticCurvePrivateKey = _derived_key(self._label) if key is None else key
        """The CA's private key."""
        subject = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "aether-test"),
                x509.NameAttribute(NameOID.COMMON_NAME, self._label),
            ]
        )
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .public_key(self.key.public_key())
            .serial_number(_serial(self._label))
            .not_valid_before(_moment(NOT_BEFORE))
            .not_valid_after(_moment(NOT_AFTER))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_key_usage(key_cert_sign=True), critical=True)
            .add_extension(
                x509.SubjectAlternativeName([x509.UniformResourceIdentifier(f"spiffe://{trust_domain}")]),
                critical=False,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
        )
        if issuer is None:
            builder = builder.issuer_name(subject)
            signer = self.key
        else:
            builder = builder.issuer_name(issuer.certificate.subject).add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.key.public_key()), critical=False
            )
            signer = issuer.key
        self.certificate: x509.Certificate = _signed(builder, key=signer)
        """The CA's certificate."""
        self.cert_pem = self.certificate.public_bytes(serialization.Encoding.PEM)
        """The CA's certificate as PEM."""
        self.bundle_pem: bytes = self.cert_pem if issuer is None else issuer.bundle_pem
        """The trust bundle: the root's certificate as PEM (what `bundle.pem` holds)."""
        self._intermediates_pem: bytes = b"" if issuer is None else self.cert_pem + issuer._intermediates_pem

    def issue(
        self,
        spiffe_id: str,
        *,
        not_before: int = NOT_BEFORE,
        not_after: int = NOT_AFTER,
        key: ec.EllipticCurvePrivateKey | None = None,
        uri_sans: tuple[str, ...] | None = None,
        dns_sans: tuple[str, ...] | None = None,
    ) -> MintedSvid:
        """Issue an X.509-SVID for `spiffe_id`, valid from `not_before` to `not_after` (ns since the epoch).

        Args:
            spiffe_id: The SPIFFE ID of the leaf.
            not_before: The start of validity (truncated to whole seconds).
            not_after: The end of validity (truncated to whole seconds).
            key: The leaf's key (default: a new one).
            uri_sans: The URI SANs of the leaf (default: `spiffe_id` alone), to mint a malformed SVID.
            dns_sans: The DNS SANs of the leaf (default: the two HTTP/3 needs, `<sa>.<ns>.<td>` and
                `*.<sa>.<ns>.<td>`, for a workload SPIFFE ID; none for another), `()` to mint an SVID without.
        """
        label = self._next_label(f"leaf:{spiffe_id}")
        leaf_key = _derived_key(label) if key is None else key
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "aether-test")]))
            .issuer_name(self.certificate.subject)
            .public_key(leaf_key.public_key())
            .serial_number(_serial(label))
            .not_valid_before(_moment(not_before))
            .not_valid_after(_moment(not_after))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(digital_signature=True), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(leaf_key.public_key()), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False
            )
        )
        uris = (spiffe_id,) if uri_sans is None else uri_sans
        if dns_sans is None:
            dns_sans = quic_dns_sans_of_id(spiffe_id) or ()
        sans: list[x509.GeneralName] = [x509.UniformResourceIdentifier(uri) for uri in uris]
        sans.extend(x509.DNSName(name) for name in dns_sans)
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        leaf = _signed(builder, key=self.key)
        return MintedSvid(
            spiffe_id=spiffe_id,
            cert_chain_pem=leaf.public_bytes(serialization.Encoding.PEM) + self._intermediates_pem,
            private_key_pem=leaf_key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ),
            not_after=not_after // 10**9 * 10**9,
        )

    def new_key(self) -> ec.EllipticCurvePrivateKey:
        """Return a new EC P-256 key, derived like the keys of the leaves."""
        return _derived_key(self._next_label("key"))

    def _next_label(self, what: str) -> str:
        self._issued += 1
        return f"{self._label}/{what}:{self._issued}"


def write_bundle(directory: Path, bundle_pem: bytes) -> Path:
    """Write `bundle_pem` as the trust bundle of SVID directory `directory` (atomically); return its path."""
    return _write_atomically(directory / BUNDLE_FILE, bundle_pem)


def write_svid(directory: Path, *, owner: str, content: MintedSvid | bytes) -> Path:
    """Write the SVID file of service account `owner` (`<ns>/<sa>`) in `directory` atomically; return its path.

    `content` is an SVID (its chain, then its key) or the raw bytes of the file.
    """
    data = content.file_content if isinstance(content, MintedSvid) else content
    return _write_atomically(directory / svid_file_name(owner), data)


def remove_svid(directory: Path, *, owner: str) -> None:
    """Remove the SVID file of service account `owner` from `directory`."""
    (directory / svid_file_name(owner)).unlink()


def _write_atomically(path: Path, content: bytes) -> Path:
    # The source skips names starting with '.', and a rename replaces the file in one step.
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_bytes(content)
    os.replace(temporary, path)
    return path


def _derived_key(label: str) -> ec.EllipticCurvePrivateKey:
    scalar = int.from_bytes(hashlib.sha256(f"key|{label}".encode()).digest()) % (_P256_ORDER - 1) + 1
    return ec.derive_private_key(scalar, ec.SECP256R1())


def _serial(label: str) -> int:
    # Positive and at most 20 octets (RFC 5280 4.1.2.2).
    return int.from_bytes(hashlib.sha256(f"serial|{label}".encode()).digest()[:16]) >> 1 | 1


def _moment(ns: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ns // 10**9, tz=datetime.UTC)


def _key_usage(*, key_cert_sign: bool = False, digital_signature: bool = False) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=digital_signature,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=key_cert_sign,
        crl_sign=key_cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _signed(builder: x509.CertificateBuilder, *, key: ec.EllipticCurvePrivateKey) -> x509.Certificate:
    # Deterministic ECDSA (RFC 6979): the same inputs give the same certificate bytes.
    return builder.sign(key, hashes.SHA256(), ecdsa_deterministic=True)
