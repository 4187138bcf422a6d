"""Tests of `aether.identity.mint`: minted SVIDs are deterministic, well-formed, and land in the source's layout."""

from __future__ import annotations

from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from aether.identity import pem_blocks
from aether.identity.mint import NOT_AFTER, TestCA, remove_svid, write_bundle, write_svid

WEB_ID = "spiffe://aether.internal/ns/shop/sa/web"


def test_the_same_mints_in_the_same_order_give_the_same_bytes() -> None:
    """Two CAs of one trust domain issuing the same SVIDs in the same order produce identical PEM."""
    first, second = TestCA("aether.internal"), TestCA("aether.internal")
    assert first.bundle_pem == second.bundle_pem
    assert [first.issue(WEB_ID), first.issue(WEB_ID)] == [second.issue(WEB_ID), second.issue(WEB_ID)]
    assert first.issue(WEB_ID) != first.issue(WEB_ID)  # each issue has its own key and serial


def test_a_minted_svid_has_the_shape_of_an_x509_svid() -> None:
    """Leaf: one URI SAN, CA:false, digitalSignature, server and client auth, signed by the CA; CA: its domain."""
    ca = TestCA("aether.internal")
    minted = ca.issue(WEB_ID)
    leaf = x509.load_pem_x509_certificate(minted.cert_chain_pem)
    assert leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.UniformResourceIdentifier
    ) == [WEB_ID]
    assert leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert leaf.extensions.get_extension_for_class(x509.KeyUsage).value.digital_signature is True
    assert list(leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH,
        ExtendedKeyUsageOID.CLIENT_AUTH,
    ]
    leaf.verify_directly_issued_by(ca.certificate)
    assert ca.certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert ca.certificate.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign is True
    assert minted.not_after == NOT_AFTER


def test_an_intermediate_issues_chains_up_to_the_root_bundle() -> None:
    """An intermediate's SVID chain is the leaf then the intermediate; its bundle is the root's certificate."""
    root = TestCA("aether.internal")
    intermediate = TestCA("aether.internal", issuer=root)
    minted = intermediate.issue(WEB_ID)
    assert [block.text for block in pem_blocks(minted.cert_chain_pem)][1:] == [intermediate.cert_pem]
    assert intermediate.bundle_pem == root.bundle_pem
    intermediate.certificate.verify_directly_issued_by(root.certificate)


def test_the_directory_helpers_write_the_layout_atomically(tmp_path: Path) -> None:
    """`bundle.pem` and `<ns>_<sa>.pem` (chain then key) are written, no temporary file is left, and removed."""
    ca = TestCA("aether.internal")
    minted = ca.issue(WEB_ID)
    directory = tmp_path / "svids"
    assert write_bundle(directory, ca.bundle_pem) == directory / "bundle.pem"
    assert write_svid(directory, owner="shop/web", content=minted) == directory / "shop_web.pem"
    assert sorted(path.name for path in directory.iterdir()) == ["bundle.pem", "shop_web.pem"]
    assert (directory / "shop_web.pem").read_bytes() == minted.cert_chain_pem + minted.private_key_pem
    remove_svid(directory, owner="shop/web")
    assert sorted(path.name for path in directory.iterdir()) == ["bundle.pem"]
