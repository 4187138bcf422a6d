"""Tests of `aether.core.project.secrets`: SVID and trust bundle secrets."""

from __future__ import annotations

import base64

from aether.core.project.secrets import caller_secrets, node_secrets
from aether.testing import make_svid, make_trust_bundle
from tests.core.project._helpers import DB_ID, WEB_ID, as_dict


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_secrets_are_the_wanted_svids_and_the_mesh_bundle() -> None:
    """SVIDs named by SPIFFE ID with chain and key inline (those held only), then the mesh trust domain's bundle."""
    secrets = node_secrets(
        [DB_ID, WEB_ID, "spiffe://aether.internal/ns/x/sa/missing"],
        svids={
            WEB_ID: make_svid(WEB_ID, cert_chain_pem=b"web-cert", private_key=b"web-key"),
            DB_ID: make_svid(DB_ID),
        },
        bundles={
            "aether.internal": make_trust_bundle(bundle_pem=b"ca"),
            "example.org": make_trust_bundle("example.org"),
        },
        trust_domain="aether.internal",
    )
    assert [secret.name for secret in secrets] == [WEB_ID, DB_ID, "spiffe://aether.internal"]
    assert as_dict(secrets[0]) == {
        "name": WEB_ID,
        "tls_certificate": {
            "certificate_chain": {"inline_bytes": _b64(b"web-cert")},
            "private_key": {"inline_bytes": _b64(b"web-key")},
        },
    }
    assert as_dict(secrets[2]) == {
        "name": "spiffe://aether.internal",
        "validation_context": {"trusted_ca": {"inline_bytes": _b64(b"ca")}},
    }


def test_without_a_bundle_only_svids_are_secrets() -> None:
    """No bundle for the mesh's trust domain: no validation secret (peers cannot be validated until it comes)."""
    secrets = node_secrets(
        [WEB_ID], svids={WEB_ID: make_svid(WEB_ID)}, bundles={}, trust_domain="aether.internal"
    )
    assert [secret.name for secret in secrets] == [WEB_ID]


def test_each_local_identity_has_a_caller_secret_holding_its_svid_or_the_fallback() -> None:
    """`caller:<SPIFFE ID>` holds that workload's SVID, or the fallback's (the first local one holding an SVID)
    while it has none; `caller:fallback` holds the fallback's; a node holding no SVID has none."""
    missing = "spiffe://aether.internal/ns/x/sa/missing"
    svids = {
        WEB_ID: make_svid(WEB_ID, cert_chain_pem=b"web-cert", private_key=b"web-key"),
        DB_ID: make_svid(DB_ID, cert_chain_pem=b"db-cert", private_key=b"db-key"),
    }
    secrets = caller_secrets([WEB_ID, missing, DB_ID], svids=svids)
    held = {secret.name: secret.tls_certificate.certificate_chain.inline_bytes for secret in secrets}
    assert [secret.name for secret in secrets] == [
        f"caller:{WEB_ID}",
        f"caller:{DB_ID}",
        f"caller:{missing}",
        "caller:fallback",
    ]
    assert held == {
        f"caller:{WEB_ID}": b"web-cert",
        f"caller:{DB_ID}": b"db-cert",
        f"caller:{missing}": b"web-cert",
        "caller:fallback": b"web-cert",
    }
    assert caller_secrets([WEB_ID], svids={}) == []
