"""A pod's QUIC inbound (UDP 18008) demands a mesh client certificate, proved with real traffic.

The mesh of `test_mesh_e2e` (two agents, each serving its real Envoy): an HTTP/3 client of the test's own
(`aether.testing.h3_client`, aioquic) dials cart-1's `inbound_quic` directly with SNI `cart.shop.aether.internal`
and ALPN h3, verifying Envoy's cart SVID against the mesh's bundle, and presents a certificate of the test's choice.

What a refusal looks like on the wire: TLS 1.3 finishes the client's side of the handshake before the server reads
the client's Certificate, so the client counts its handshake complete and sends its request; Envoy then closes the
connection with a QUIC CONNECTION_CLOSE carrying `CRYPTO_ERROR` (0x100 + the TLS alert, RFC 9001 section 4.8) for
the client's CRYPTO frame, and the request never reaches the HTTP manager, let alone the app.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from cryptography import x509
from cryptography.hazmat.primitives import hashes

from aether.identity.mint import MintedSvid, TestCA
from aether.testing.envoy import wait_for
from aether.testing.h3_client import H3Outcome, h3_request
from tests.integration.test_mesh_e2e import (
    CART,
    CART_IPS,
    CLIENT_ID,
    CONVERGE,
    NAMESPACE,
    REQUEST_TIMEOUT,
    TRUST_DOMAIN,
    Mesh,
    _listeners,
    _stat,
    open_mesh,
)
from tests.needs import ROOT, needs

pytestmark = needs(ROOT)

POD = "cart-1"
LISTENER_STATS = f"listener.{CART_IPS[POD]}_18008"
H3_REQUESTS = f"http.in_h3_{POD}.{NAMESPACE}.downstream_rq_total"
"""Requests cart-1's QUIC inbound HTTP manager received (its default chain's stat prefix)."""
CRYPTO_FRAME = 0x06
"""The QUIC frame type of TLS handshake messages: the one a handshake failure's CONNECTION_CLOSE names."""


@asynccontextmanager
async def open_quic_inbound(tmp_path: Path) -> AsyncIterator[Mesh]:
    """The mesh, once cart-1's QUIC inbound listener is active too (`open_mesh` waits for the TCP ones)."""
    async with open_mesh(tmp_path) as mesh:

        async def active() -> bool:
            listeners = _listeners(await mesh.b.envoy.config_dump())
            return "active_state" in listeners.get(f"inbound_quic_{POD}.{NAMESPACE}", {})

        await wait_for(active, timeout=CONVERGE, interval=0.05)
        yield mesh


async def ask(
    mesh: Mesh, client: MintedSvid | None, *, headers: Mapping[str, str] | None = None
) -> H3Outcome:
    """One HTTP/3 GET to cart-1's UDP 18008, presenting `client` (None: no certificate)."""
    with trio.fail_after(REQUEST_TIMEOUT):
        return await h3_request(
            CART_IPS[POD],
            18008,
            server_name=CART,
            trust_pem=mesh.cart_ca.bundle_pem,
            authority=CART,
            client=client,
            headers=headers,
        )


async def assert_nothing_delivered(mesh: Mesh) -> None:
    assert await _stat(mesh.b.envoy, H3_REQUESTS) == 0
    assert {name: app.received for name, app in mesh.apps.items()} == dict.fromkeys(CART_IPS, 0)


async def test_without_a_client_certificate_the_connection_is_closed_with_certificate_required(
    tmp_path: Path,
) -> None:
    """No certificate (an empty Certificate answering Envoy's request): CONNECTION_CLOSE 0x174, alert 116
    `certificate_required`, and no request reaches the app."""
    async with open_quic_inbound(tmp_path) as mesh:
        outcome = await ask(mesh, None)
        assert (outcome.handshake_completed, outcome.status) == (True, None), outcome
        assert outcome.close is not None
        assert (outcome.close.error_code, outcome.close.alert, outcome.close.frame_type) == (
            0x174,
            "certificate_required",
            CRYPTO_FRAME,
        )
        # BoringSSL's error, as Envoy's reason phrase carries it.
        assert "PEER_DID_NOT_RETURN_A_CERTIFICATE" in outcome.close.reason
        closes = f"{LISTENER_STATS}.http3.downstream.tx.quic_connection_close_error_code_QUIC_TLS_CERTIFICATE_REQUIRED"
        assert await _stat(mesh.b.envoy, closes) == 1
        await assert_nothing_delivered(mesh)


async def test_a_mesh_svid_is_answered_and_the_app_sees_its_spiffe_id_in_xfcc(tmp_path: Path) -> None:
    """The caller's SVID from the mesh CA: 200 from cart-1's app over HTTP/3, which sees Envoy's XFCC (the
    certificate's hash, subject and SPIFFE ID; no `By=` over QUIC), not the one the client sent (SANITIZE_SET)."""
    async with open_quic_inbound(tmp_path) as mesh:
        svid = mesh.cart_ca.issue(CLIENT_ID)
        forged = {"x-forwarded-client-cert": f"URI=spiffe://{TRUST_DOMAIN}/ns/{NAMESPACE}/sa/admin"}
        outcome = await ask(mesh, svid, headers=forged)
        assert (outcome.status, outcome.close) == (200, None), outcome
        leaf = x509.load_pem_x509_certificate(svid.cert_chain_pem)
        xfcc = f'Hash={leaf.fingerprint(hashes.SHA256()).hex()};Subject="O=aether-test";URI={CLIENT_ID}'
        assert outcome.json() == {"name": POD, "xfcc": xfcc}
        assert mesh.apps[POD].xfcc == [xfcc]
        assert await _stat(mesh.b.envoy, H3_REQUESTS) == 1


def _other_trust_domain(_: TestCA) -> MintedSvid:
    return TestCA("rogue.internal").issue(f"spiffe://rogue.internal/ns/{NAMESPACE}/sa/client")


def _other_ca_of_the_mesh_trust_domain(_: TestCA) -> MintedSvid:
    return TestCA(TRUST_DOMAIN, key=TestCA("rogue.internal").key).issue(CLIENT_ID)


def _mesh_ca_naming_another_trust_domain(mesh_ca: TestCA) -> MintedSvid:
    return mesh_ca.issue(f"spiffe://rogue.internal/ns/{NAMESPACE}/sa/client")


@pytest.mark.parametrize(
    ("mint", "code", "alert", "stat"),
    [
        pytest.param(
            _other_trust_domain, 0x130, "unknown_ca", "fail_verify_error", id="another-trust-domain"
        ),
        pytest.param(
            _other_ca_of_the_mesh_trust_domain,
            0x130,
            "unknown_ca",
            "fail_verify_error",
            id="another-ca-same-trust-domain",
        ),
        pytest.param(
            _mesh_ca_naming_another_trust_domain,
            0x12E,
            "certificate_unknown",
            "fail_verify_san",
            id="mesh-ca-another-trust-domain-id",
        ),
    ],
)
async def test_a_certificate_outside_the_mesh_is_refused(
    tmp_path: Path, mint: Callable[[TestCA], MintedSvid], code: int, alert: str, stat: str
) -> None:
    """A certificate from a CA the bundle does not hold (another trust domain's, or another key for ours) fails
    chain verification (`unknown_ca`); one the mesh CA signed for another trust domain's SPIFFE ID fails the
    inbound's `spiffe://aether.internal/` SAN match (`certificate_unknown`). Either way no request is delivered."""
    async with open_quic_inbound(tmp_path) as mesh:
        outcome = await ask(mesh, mint(mesh.cart_ca))
        assert (outcome.handshake_completed, outcome.status) == (True, None), outcome
        assert outcome.close is not None
        assert (outcome.close.error_code, outcome.close.alert, outcome.close.frame_type) == (
            code,
            alert,
            CRYPTO_FRAME,
        )
        assert "CERTIFICATE_VERIFY_FAILED" in outcome.close.reason
        assert await _stat(mesh.b.envoy, f"{LISTENER_STATS}.ssl.{stat}") == 1
        await assert_nothing_delivered(mesh)
