"""The DNS SANs HTTP/3 between proxies needs: checked when an SVID's leaf is read, reported, never a refusal."""

from __future__ import annotations

import logging

import pytest

from aether.identity.mint import TestCA
from aether.identity.pem import svid_from_pem
from aether.identity.x509 import check_svid, report_http3

DB = "spiffe://aether.internal/ns/shop/sa/db"
NOW = 1_700_000_000 * 10**9


def test_a_minted_svid_carries_both_names_and_passes() -> None:
    svid = svid_from_pem(TestCA("aether.internal").issue(DB).file_content, spiffe_id=DB)
    assert (svid.problem, svid.http3_problem) == ("", "")


@pytest.mark.parametrize(
    ("dns_sans", "missing"),
    [
        ((), "the DNS SANs 'db.shop.aether.internal' and '*.db.shop.aether.internal'"),
        (("db.shop.aether.internal",), "the DNS SAN '*.db.shop.aether.internal'"),
        (("*.db.shop.aether.internal", "other.example"), "the DNS SAN 'db.shop.aether.internal'"),
    ],
)
def test_missing_names_are_named_and_the_svid_still_passes_its_checks(
    dns_sans: tuple[str, ...], missing: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Served for mTLS over TCP (no `problem`), with what HTTP/3 lacks said in `http3_problem` and the log."""
    ca = TestCA("aether.internal")
    svid = check_svid(
        svid_from_pem(ca.issue(DB, dns_sans=dns_sans).file_content, spiffe_id=DB),
        bundle_pem=ca.bundle_pem,
        trust_domain="aether.internal",
        now=NOW,
    )
    assert svid.problem == ""
    assert svid.http3_problem == (
        f"the certificate lacks {missing} that HTTP/3 between proxies needs: served over TCP only,"
        " its callers stay on HTTP/2"
    )
    with caplog.at_level(logging.WARNING, logger="aether.identity.x509"):
        assert report_http3(svid) is svid
    assert [record.getMessage() for record in caplog.records] == [f"svid {DB!r}: {svid.http3_problem}"]
