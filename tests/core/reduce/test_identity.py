"""Tests of `aether.core.reduce.identity`: SVIDs and trust bundles."""

from __future__ import annotations

import immutables
import pytest

from aether.core.events import Svid, TrustBundle
from aether.core.state import Diagnostics, IdentityState, Rejection, RejectionReason, State
from aether.testing import (
    AT,
    domain_of,
    fold_events,
    make_svid,
    make_trust_bundle,
    svid_removed,
    svid_rotated,
    trust_bundle_removed,
    trust_bundle_rotated,
)

WEB_ID = "spiffe://aether.internal/ns/default/sa/web"
DB_ID = "spiffe://aether.internal/ns/default/sa/db"
SVID = make_svid(WEB_ID)
BUNDLE = make_trust_bundle("aether.internal")


def _rejected(
    subject: str, reason: RejectionReason, message: str, *, seq: int, total: int = 1
) -> Diagnostics:
    rejection = Rejection(subject=subject, reason=reason, message=message, seq=seq)
    return Diagnostics(rejections=immutables.Map({subject: rejection}), rejected_total=total)


def _with_svid() -> State:
    return fold_events(svid_rotated(SVID))


def test_an_svid_is_adopted_under_its_spiffe_id() -> None:
    """A valid SVID is stored under its SPIFFE ID."""
    assert _with_svid() == State(seq=1, identity=IdentityState(svids=immutables.Map({WEB_ID: SVID})))


def test_a_rotation_replaces_the_svid() -> None:
    """A new SVID for the same SPIFFE ID replaces the previous one."""
    rotated = make_svid(WEB_ID, cert_chain_pem=b"cert-2", private_key=b"key-2")
    state = fold_events(svid_rotated(rotated), state=_with_svid())
    assert state.identity == IdentityState(svids=immutables.Map({WEB_ID: rotated}))


@pytest.mark.parametrize(
    ("svid", "message"),
    [
        (
            make_svid("spiffe://aether.internal"),
            "svid 'spiffe://aether.internal': spiffe id must be 'spiffe://<trustDomain>/<path>'"
            " (got 'spiffe://aether.internal')",
        ),
        (
            make_svid("https://aether.internal/ns/default"),
            "svid 'https://aether.internal/ns/default': spiffe id must be 'spiffe://<trustDomain>/<path>'"
            " (got 'https://aether.internal/ns/default')",
        ),
        (make_svid(WEB_ID, cert_chain_pem=b""), f"svid {WEB_ID!r}: certificate chain must not be empty"),
        (make_svid(WEB_ID, private_key=b""), f"svid {WEB_ID!r}: private key must not be empty"),
        (
            make_svid(WEB_ID, cert_chain_pem=b"", problem="the file holds no certificate"),
            f"svid {WEB_ID!r}: the file holds no certificate",
        ),
        (
            make_svid(WEB_ID, leaf_spiffe_id=DB_ID),
            f"svid {WEB_ID!r}: the certificate names another identity (got {DB_ID!r})",
        ),
        (
            make_svid(WEB_ID, not_after=AT),
            f"svid {WEB_ID!r}: the certificate expired (not_after {AT} <= observed_at {AT})",
        ),
        (
            make_svid(WEB_ID, not_after=1),
            f"svid {WEB_ID!r}: the certificate expired (not_after 1 <= observed_at {AT})",
        ),
        (
            make_svid(
                WEB_ID,
                leaf_spiffe_id=DB_ID,
                not_after=1,
                problem="the private key does not match the leaf certificate",
            ),
            f"svid {WEB_ID!r}: the private key does not match the leaf certificate",
        ),
        (
            make_svid(WEB_ID, leaf_spiffe_id=DB_ID, not_after=1),
            f"svid {WEB_ID!r}: the certificate names another identity (got {DB_ID!r})",
        ),
    ],
    ids=[
        "no-path",
        "scheme",
        "no-certificate",
        "no-key",
        "source-problem",
        "another-identity",
        "expired-when-observed",
        "expired-before",
        "source-problem-first",
        "identity-before-expiry",
    ],
)
def test_an_invalid_svid_is_rejected_and_the_old_one_stays(svid: Svid, message: str) -> None:
    """A malformed ID, a problem the source found, a leaf naming another ID, no material or expiry: rejected.

    The SVID in force stays, and the message names the SPIFFE ID and the first rule broken.
    """
    before = _with_svid()
    state = fold_events(svid_rotated(svid), state=before)
    assert domain_of(state) == domain_of(before)
    assert state.diagnostics == _rejected(
        f"svid/{svid.spiffe_id}", RejectionReason.INVALID_SVID, message, seq=2
    )


def test_an_svid_whose_leaf_names_its_id_is_adopted_and_an_unstated_expiry_is_no_expiry() -> None:
    """A leaf naming the SVID's own ID passes; not_after 0 means the source did not say, so it never expires."""
    checked = make_svid(WEB_ID, leaf_spiffe_id=WEB_ID, not_after=0)
    assert fold_events(svid_rotated(checked)) == State(
        seq=1, identity=IdentityState(svids=immutables.Map({WEB_ID: checked}))
    )


def test_a_rejected_svid_observed_after_the_one_in_force_expired_drops_that_one() -> None:
    """The re-check of a source that keeps time: its latest SVID, re-sent once its `not_after` passed, is rejected
    as expired, and the SVID in force (expired by then too) is no longer served. Before that moment, a rejected
    SVID leaves the one in force serving."""
    expiry = SVID.not_after
    early = fold_events(svid_rotated(make_svid(WEB_ID, problem="bad"), at=expiry - 1), state=_with_svid())
    assert early.identity.svids[WEB_ID] == SVID
    late = fold_events(svid_rotated(SVID, at=expiry), state=_with_svid())
    assert WEB_ID not in late.identity.svids
    assert "the certificate expired" in late.diagnostics.rejections[f"svid/{WEB_ID}"].message


def test_a_later_valid_svid_lifts_the_rejection() -> None:
    """A rejected SVID followed by a valid one for the same ID: adopted, rejection lifted."""
    state = fold_events(svid_rotated(make_svid(WEB_ID, private_key=b"")), svid_rotated(SVID))
    assert state == State(
        seq=2,
        identity=IdentityState(svids=immutables.Map({WEB_ID: SVID})),
        diagnostics=Diagnostics(rejected_total=1),
    )


def test_an_svid_is_removed_and_removing_it_again_is_rejected() -> None:
    """Removing a held SVID forgets it; removing it again is rejected."""
    state = fold_events(svid_removed(WEB_ID), svid_removed(WEB_ID), state=_with_svid())
    assert domain_of(state) == State()
    assert state.diagnostics == _rejected(
        f"svid/{WEB_ID}", RejectionReason.UNKNOWN_SVID, f"svid {WEB_ID!r} removed but not known", seq=3
    )


def test_the_rejection_message_of_an_svid_never_shows_its_key() -> None:
    """A rejected SVID's message names the SPIFFE ID and the rule, never the private key."""
    state = fold_events(svid_rotated(make_svid(WEB_ID, cert_chain_pem=b"", private_key=b"TOP-SECRET-KEY")))
    assert "TOP-SECRET-KEY" not in repr(state)


def test_a_trust_bundle_is_adopted_replaced_and_removed() -> None:
    """A bundle is stored under its trust domain, replaced by the next, and removed."""
    stored = fold_events(trust_bundle_rotated(BUNDLE))
    assert stored == State(
        seq=1, identity=IdentityState(trust_bundles=immutables.Map({"aether.internal": BUNDLE}))
    )
    rotated = make_trust_bundle("aether.internal", bundle_pem=b"ca-2")
    replaced = fold_events(trust_bundle_rotated(rotated), state=stored)
    assert replaced.identity == IdentityState(trust_bundles=immutables.Map({"aether.internal": rotated}))
    assert fold_events(trust_bundle_removed("aether.internal"), state=replaced) == State(seq=3)


@pytest.mark.parametrize(
    ("bundle", "message"),
    [
        (
            make_trust_bundle("Example.org"),
            "trust bundle 'Example.org': trust domain must be lowercase letters, digits, '.', '-' or '_'"
            " (got 'Example.org')",
        ),
        (
            make_trust_bundle(""),
            "trust bundle '': trust domain must be lowercase letters, digits, '.', '-' or '_' (got '')",
        ),
        (
            make_trust_bundle("aether.internal", bundle_pem=b""),
            "trust bundle 'aether.internal': bundle must not be empty",
        ),
        (
            make_trust_bundle("aether.internal", problem="certificate 1 of the bundle is not a CA"),
            "trust bundle 'aether.internal': certificate 1 of the bundle is not a CA",
        ),
        (
            make_trust_bundle("Example.org", problem="certificate 1 of the bundle is not a CA"),
            "trust bundle 'Example.org': trust domain must be lowercase letters, digits, '.', '-' or '_'"
            " (got 'Example.org')",
        ),
    ],
    ids=["uppercase", "empty-domain", "empty-bundle", "source-problem", "domain-before-problem"],
)
def test_an_invalid_trust_bundle_is_rejected_and_the_old_one_stays(bundle: TrustBundle, message: str) -> None:
    """A bad trust domain, a problem the source found or an empty bundle is rejected; the bundle in force stays."""
    before = fold_events(trust_bundle_rotated(BUNDLE))
    state = fold_events(trust_bundle_rotated(bundle), state=before)
    assert domain_of(state) == domain_of(before)
    assert state.diagnostics == _rejected(
        f"bundle/{bundle.trust_domain}", RejectionReason.INVALID_TRUST_BUNDLE, message, seq=2
    )


def test_removing_an_unknown_trust_bundle_is_rejected_then_lifted() -> None:
    """Removing a bundle never held is rejected; adopting that bundle later lifts the rejection."""
    state = fold_events(trust_bundle_removed("example.org"))
    assert domain_of(state) == State()
    assert state.diagnostics == _rejected(
        "bundle/example.org",
        RejectionReason.UNKNOWN_TRUST_BUNDLE,
        "trust bundle 'example.org' removed but not known",
        seq=1,
    )
    lifted = fold_events(trust_bundle_rotated(make_trust_bundle("example.org")), state=state)
    assert lifted.diagnostics == Diagnostics(rejected_total=1)
