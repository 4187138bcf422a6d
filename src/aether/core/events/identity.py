"""Identity events: X.509 SVIDs and trust bundles as the SPIFFE Workload API (or files) deliver them."""

from __future__ import annotations

import attrs

from aether.core.events.base import Event
from aether.core.values import Redacted


@attrs.frozen(kw_only=True)
class Svid:
    """An X.509-SVID: certificate chain and private key for one SPIFFE ID.

    .. versionchanged:: `leaf_spiffe_id` and `problem` added (both empty in earlier records, which keeps their
       meaning): a source that reads the certificates itself reports what it found, and the reducer judges it.
    """

    spiffe_id: str
    """The SPIFFE ID the SVID is delivered for: the key it is held under and its SDS secret name."""
    cert_chain_pem: bytes
    private_key: Redacted
    """The PEM private key; kept in the log so replay reproduces the SDS secret, never shown."""
    not_after: int = 0
    """Expiry of the leaf, in nanoseconds since the Unix epoch (0: the source did not say)."""
    leaf_spiffe_id: str = ""
    """The SPIFFE ID the leaf certificate names (its URI SAN), as a source that parses certificates read it.

    Empty when the source vouches for `spiffe_id` itself (the Workload API) or could not read a leaf.
    """
    problem: str = ""
    """What the source found wrong with the material (unparsable PEM, a key that does not match the leaf, ...).

    Empty when it found nothing wrong. The source reports; the reducer rejects, so replay explains the rejection.
    """
    http3_problem: str = ""
    """What keeps the SVID from serving HTTP/3 between proxies, as the source that read the leaf found it: the DNS
    SANs `aether.core.project.quic` needs that it lacks (`aether.identity.pem.http3_problem`). Empty: nothing (or
    a record older than the check). Not a rejection: the SVID is served for mTLS over TCP, and its pods' callers
    stay on HTTP/2 to them.

    .. versionadded:: with HTTP/3 between proxies (empty in earlier records: no check was made).
    """


@attrs.frozen(kw_only=True)
class TrustBundle:
    """The CA certificates of one trust domain.

    .. versionchanged:: `problem` added (empty in earlier records, which keeps their meaning).
    """

    trust_domain: str
    bundle_pem: bytes
    problem: str = ""
    """What the source found wrong with the bundle (unparsable PEM, a CA of another trust domain, ...), or empty."""


@attrs.frozen(kw_only=True)
class SvidRotated(Event):
    """A new SVID for `svid.spiffe_id` was issued (first issue or rotation). Replaces the previous one."""

    svid: Svid

    @property
    def subject(self) -> str:
        return f"svid/{self.svid.spiffe_id}"


@attrs.frozen(kw_only=True)
class SvidRemoved(Event):
    """The SVID of `spiffe_id` is no longer issued to this node."""

    spiffe_id: str

    @property
    def subject(self) -> str:
        return f"svid/{self.spiffe_id}"


@attrs.frozen(kw_only=True)
class TrustBundleRotated(Event):
    """The trust bundle of `bundle.trust_domain` changed."""

    bundle: TrustBundle

    @property
    def subject(self) -> str:
        return f"bundle/{self.bundle.trust_domain}"


@attrs.frozen(kw_only=True)
class TrustBundleRemoved(Event):
    """The trust bundle of `trust_domain` is gone."""

    trust_domain: str

    @property
    def subject(self) -> str:
        return f"bundle/{self.trust_domain}"
