"""Tests of `aether.core.events.identity`: SVIDs, trust bundles and the subjects of their events."""

from __future__ import annotations

from aether.testing import (
    make_svid,
    make_trust_bundle,
    svid_removed,
    svid_rotated,
    trust_bundle_removed,
    trust_bundle_rotated,
)

WEB_ID = "spiffe://aether.internal/ns/default/sa/web"


def test_identity_events_are_about_the_spiffe_id_or_the_trust_domain() -> None:
    """SVID events are about `svid/<spiffe id>`, bundle events about `bundle/<trust domain>`."""
    assert svid_rotated(make_svid(WEB_ID)).subject == f"svid/{WEB_ID}"
    assert svid_removed(WEB_ID).subject == f"svid/{WEB_ID}"
    assert trust_bundle_rotated(make_trust_bundle("example.org")).subject == "bundle/example.org"
    assert trust_bundle_removed("example.org").subject == "bundle/example.org"


def test_an_svid_repr_hides_its_private_key() -> None:
    """The repr of an SVID, and of the event carrying it, shows the key's length only."""
    svid = make_svid(WEB_ID, private_key=b"TOP-SECRET")
    assert "TOP-SECRET" not in repr(svid)
    assert "TOP-SECRET" not in repr(svid_rotated(svid))
    assert "private_key=Redacted(<10 bytes>)" in repr(svid)
