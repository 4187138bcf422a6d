"""Tests of `aether.identity.pem`: what an SVID file and a trust bundle say, and what is wrong with them."""

from __future__ import annotations

import pytest

from aether.core.events import Svid, TrustBundle
from aether.core.values import Redacted
from aether.identity import PemBlock, bundle_from_pem, bundle_trust_domains, pem_blocks, svid_from_pem
from aether.identity.mint import TestCA
from aether.testing import AT

WEB_ID = "spiffe://aether.internal/ns/shop/sa/web"
DB_ID = "spiffe://aether.internal/ns/shop/sa/db"
CA = TestCA("aether.internal")
INTERMEDIATE = TestCA("aether.internal", issuer=CA)
OTHER_CA = TestCA("example.org")
WEB = CA.issue(WEB_ID)
BLOCK_OF_JUNK = b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"


def _unreadable(problem: str, *, cert_chain_pem: bytes = b"", private_key: bytes = b"") -> Svid:
    """The SVID read from a file whose chain gives no leaf: no facts, only the problem."""
    return Svid(
        spiffe_id=WEB_ID, cert_chain_pem=cert_chain_pem, private_key=Redacted(private_key), problem=problem
    )


def test_pem_blocks_are_split_in_order_and_surrounding_text_is_skipped() -> None:
    """Each block keeps its label and its text from BEGIN to END plus a newline; other text is dropped."""
    content = b"Bag Attributes\n" + WEB.cert_chain_pem + b"comment\n" + WEB.private_key_pem
    assert pem_blocks(content) == (
        PemBlock(label="CERTIFICATE", text=WEB.cert_chain_pem),
        PemBlock(label="PRIVATE KEY", text=WEB.private_key_pem),
    )


def test_a_good_svid_gives_its_chain_key_leaf_identity_and_expiry_without_a_problem() -> None:
    """A leaf and its key: the Svid carries both, the leaf's URI SAN and its not_after, and no problem."""
    assert svid_from_pem(WEB.file_content, spiffe_id=WEB_ID) == Svid(
        spiffe_id=WEB_ID,
        cert_chain_pem=WEB.cert_chain_pem,
        private_key=Redacted(WEB.private_key_pem),
        not_after=4_070_908_800_000_000_000,
        leaf_spiffe_id=WEB_ID,
    )


def test_a_chain_with_an_intermediate_and_the_key_first_reads_the_same() -> None:
    """The leaf, then its intermediate, with the key block first and text around: read as a good SVID."""
    minted = INTERMEDIATE.issue(WEB_ID)
    content = minted.private_key_pem + b"\n# the chain\n" + minted.cert_chain_pem
    svid = svid_from_pem(content, spiffe_id=WEB_ID)
    assert svid == minted.svid()
    assert svid.cert_chain_pem.count(b"BEGIN CERTIFICATE") == 2


def test_an_svid_for_another_identity_reports_the_identity_its_leaf_names() -> None:
    """A file delivered for web holding db's SVID: no problem here, the leaf's ID is the fact the reducer judges."""
    database = CA.issue(DB_ID)
    assert svid_from_pem(database.file_content, spiffe_id=WEB_ID) == database.svid(spiffe_id=WEB_ID)
    assert svid_from_pem(database.file_content, spiffe_id=WEB_ID).leaf_spiffe_id == DB_ID


def test_an_expired_svid_reports_its_expiry_and_no_problem() -> None:
    """Expiry is the reducer's to judge against `observed_at`: the reader gives not_after to the second."""
    expired = CA.issue(WEB_ID, not_before=AT - 7_200 * 10**9, not_after=AT - 3_600 * 10**9 + 123)
    svid = svid_from_pem(expired.file_content, spiffe_id=WEB_ID)
    assert svid == expired.svid()
    assert svid.not_after == AT - 3_600 * 10**9


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", _unreadable("the file holds no certificate")),
        (b"garbage, not PEM at all\n", _unreadable("the file holds no certificate")),
        (
            WEB.private_key_pem,
            _unreadable("the file holds no certificate", private_key=WEB.private_key_pem),
        ),
        (
            WEB.cert_chain_pem[:-40],
            _unreadable("a PEM block is cut short (a BEGIN line without its END line)"),
        ),
        (
            BLOCK_OF_JUNK + WEB.private_key_pem,
            _unreadable(
                "certificate 1 of the chain does not parse as X.509",
                cert_chain_pem=BLOCK_OF_JUNK,
                private_key=WEB.private_key_pem,
            ),
        ),
        (
            WEB.cert_chain_pem
            + b"-----BEGIN ENCRYPTED PRIVATE KEY-----\nc2VjcmV0\n-----END ENCRYPTED PRIVATE KEY-----\n",
            _unreadable(
                "the file holds a PEM block of an unexpected kind ('ENCRYPTED PRIVATE KEY')",
                cert_chain_pem=WEB.cert_chain_pem,
            ),
        ),
    ],
    ids=["empty", "garbage", "key-only", "cut-short", "junk-certificate", "encrypted-key"],
)
def test_garbage_pem_reports_the_problem_and_keeps_only_the_blocks_it_recognised(
    content: bytes, expected: Svid
) -> None:
    """Unreadable files give an Svid with the problem; only certificate and key blocks reach their fields."""
    assert svid_from_pem(content, spiffe_id=WEB_ID) == expected


def _with_leaf_facts(problem: str, *, content: bytes, leaf_spiffe_id: str = WEB_ID) -> Svid:
    """What the reader gives for `content` when it read the leaf of WEB and then met `problem`."""
    blocks = pem_blocks(content)
    keys = [block.text for block in blocks if block.label != "CERTIFICATE"]
    return Svid(
        spiffe_id=WEB_ID,
        cert_chain_pem=b"".join(block.text for block in blocks if block.label == "CERTIFICATE"),
        private_key=Redacted(keys[0] if len(keys) == 1 else b""),
        not_after=WEB.not_after,
        leaf_spiffe_id=leaf_spiffe_id,
        problem=problem,
    )


def test_a_key_that_does_not_match_the_leaf_is_a_problem() -> None:
    """The key of another SVID next to WEB's leaf: reported, with the leaf's facts still read."""
    content = WEB.cert_chain_pem + CA.issue(DB_ID).private_key_pem
    assert svid_from_pem(content, spiffe_id=WEB_ID) == _with_leaf_facts(
        "the private key does not match the leaf certificate", content=content
    )


def test_a_new_certificate_for_the_same_key_matches_it() -> None:
    """A rotation that keeps the key: the old key matches the new leaf."""
    key = CA.new_key()
    first, second = CA.issue(WEB_ID, key=key), CA.issue(WEB_ID, key=key)
    assert first.private_key_pem == second.private_key_pem
    assert svid_from_pem(second.cert_chain_pem + first.private_key_pem, spiffe_id=WEB_ID) == second.svid()


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (WEB.cert_chain_pem, "the file holds no private key"),
        (WEB.file_content + WEB.private_key_pem, "the file holds 2 private keys"),
        (
            WEB.cert_chain_pem
            + b"-----BEGIN EC PRIVATE KEY-----\nbm90IGEga2V5\n-----END EC PRIVATE KEY-----\n",
            "the private key does not parse (an unencrypted PKCS#8, SEC 1 or PKCS#1 key is expected)",
        ),
    ],
    ids=["no-key", "two-keys", "junk-key"],
)
def test_anything_but_one_readable_key_is_a_problem(content: bytes, problem: str) -> None:
    """No key, two keys, or a key block that does not parse: reported, with the leaf's facts."""
    assert svid_from_pem(content, spiffe_id=WEB_ID) == _with_leaf_facts(problem, content=content)


def test_the_problem_of_a_bad_key_never_shows_the_key() -> None:
    """The message names the rule only: no byte of the key block reaches it."""
    content = (
        WEB.cert_chain_pem + b"-----BEGIN PRIVATE KEY-----\nVE9QLVNFQ1JFVA==\n-----END PRIVATE KEY-----\n"
    )
    svid = svid_from_pem(content, spiffe_id=WEB_ID)
    assert "VE9Q" not in svid.problem
    assert "VE9Q" not in repr(svid)


def test_a_chain_that_starts_with_its_ca_is_a_problem() -> None:
    """Intermediate first, leaf second: the first certificate is a CA, so the chain is out of order."""
    minted = INTERMEDIATE.issue(WEB_ID)
    leaf, intermediate = pem_blocks(minted.cert_chain_pem)
    content = intermediate.text + leaf.text + minted.private_key_pem
    assert svid_from_pem(content, spiffe_id=WEB_ID) == Svid(
        spiffe_id=WEB_ID,
        cert_chain_pem=intermediate.text + leaf.text,
        private_key=Redacted(minted.private_key_pem),
        not_after=4_070_908_800_000_000_000,
        leaf_spiffe_id="spiffe://aether.internal",
        problem="the leaf certificate must not be a CA (the chain must start with the leaf)",
    )


def test_a_chain_whose_next_certificate_did_not_issue_the_leaf_is_a_problem() -> None:
    """The leaf followed by a CA of another trust domain: certificate 2 did not issue certificate 1."""
    content = WEB.cert_chain_pem + OTHER_CA.cert_pem + WEB.private_key_pem
    assert svid_from_pem(content, spiffe_id=WEB_ID) == _with_leaf_facts(
        "certificate 1 of the chain is not issued by certificate 2"
        " (the chain must go from the leaf up to its issuers)",
        content=content,
    )


def test_a_chain_whose_next_certificate_has_the_issuer_name_but_another_key_is_a_problem() -> None:
    """A CA named like the leaf's issuer but with another key (a rotated root) did not sign the leaf."""
    rotated = TestCA("aether.internal", key=CA.new_key())
    assert rotated.certificate.subject == CA.certificate.subject
    content = WEB.cert_chain_pem + rotated.cert_pem + WEB.private_key_pem
    assert svid_from_pem(content, spiffe_id=WEB_ID) == _with_leaf_facts(
        "certificate 1 of the chain is not issued by certificate 2"
        " (the chain must go from the leaf up to its issuers)",
        content=content,
    )


@pytest.mark.parametrize(
    ("uri_sans", "problem"),
    [
        ((WEB_ID, DB_ID), f"the leaf certificate must name exactly one URI SAN (got {[WEB_ID, DB_ID]!r})"),
        ((), "the leaf certificate must name exactly one URI SAN (got [])"),
    ],
    ids=["two-uris", "no-uri"],
)
def test_a_leaf_without_exactly_one_uri_san_is_a_problem(uri_sans: tuple[str, ...], problem: str) -> None:
    """A leaf naming two URIs, or none, names no single SPIFFE ID."""
    minted = CA.issue(WEB_ID, uri_sans=uri_sans)
    assert svid_from_pem(minted.file_content, spiffe_id=WEB_ID) == Svid(
        spiffe_id=WEB_ID,
        cert_chain_pem=minted.cert_chain_pem,
        private_key=Redacted(minted.private_key_pem),
        not_after=minted.not_after,
        problem=problem,
    )


def test_a_ca_certificate_as_the_only_certificate_is_a_problem() -> None:
    """The bundle's CA given as an SVID: a CA cannot be a leaf."""
    content = CA.cert_pem + CA.issue(WEB_ID).private_key_pem
    svid = svid_from_pem(content, spiffe_id=WEB_ID)
    assert svid.problem == "the leaf certificate must not be a CA (the chain must start with the leaf)"
    assert svid.leaf_spiffe_id == "spiffe://aether.internal"


def test_a_good_bundle_keeps_its_certificates_and_has_no_problem() -> None:
    """One root, or two during a CA rotation: every certificate block, no problem."""
    assert bundle_from_pem(CA.bundle_pem, trust_domain="aether.internal") == TrustBundle(
        trust_domain="aether.internal", bundle_pem=CA.bundle_pem
    )
    second = TestCA("aether.internal", issuer=CA).cert_pem
    assert bundle_from_pem(b"# two roots\n" + CA.bundle_pem + second, trust_domain="aether.internal") == (
        TrustBundle(trust_domain="aether.internal", bundle_pem=CA.bundle_pem + second)
    )


@pytest.mark.parametrize(
    ("content", "bundle_pem", "problem"),
    [
        (b"", b"", "the bundle holds no certificate"),
        (CA.bundle_pem[:-30], b"", "a PEM block is cut short (a BEGIN line without its END line)"),
        (
            CA.bundle_pem + WEB.private_key_pem,
            CA.bundle_pem,
            "the bundle holds a PEM block of an unexpected kind ('PRIVATE KEY')",
        ),
        (BLOCK_OF_JUNK, BLOCK_OF_JUNK, "certificate 1 of the bundle does not parse as X.509"),
        (
            CA.bundle_pem + WEB.cert_chain_pem,
            CA.bundle_pem + WEB.cert_chain_pem,
            "certificate 2 of the bundle is not a CA",
        ),
        (
            OTHER_CA.bundle_pem,
            OTHER_CA.bundle_pem,
            "certificate 1 of the bundle names another trust domain (got 'example.org')",
        ),
    ],
    ids=["empty", "cut-short", "private-key", "junk", "leaf", "other-domain"],
)
def test_a_bad_bundle_reports_its_problem_and_never_its_key_blocks(
    content: bytes, bundle_pem: bytes, problem: str
) -> None:
    """Unreadable or foreign bundles give the problem; a stray private key never reaches `bundle_pem`."""
    assert bundle_from_pem(content, trust_domain="aether.internal") == TrustBundle(
        trust_domain="aether.internal", bundle_pem=bundle_pem, problem=problem
    )


def test_the_trust_domains_a_bundle_names_are_read_from_its_ca_uri_sans() -> None:
    """Sorted and unique; certificates that do not parse and non-SPIFFE URIs are skipped."""
    assert bundle_trust_domains(CA.bundle_pem) == ("aether.internal",)
    assert bundle_trust_domains(OTHER_CA.bundle_pem + CA.bundle_pem + CA.bundle_pem) == (
        "aether.internal",
        "example.org",
    )
    https = TestCA("aether.internal").issue("x", uri_sans=("https://example.org/x",)).cert_chain_pem
    assert bundle_trust_domains(BLOCK_OF_JUNK + https + WEB.private_key_pem) == ()
    assert bundle_trust_domains(b"garbage") == ()
