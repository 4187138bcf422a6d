"""HTTP/3 between two real Envoys, each served by its own agent (`aether.core.project.quic`).

The two nodes of `test_mesh_e2e` (local mode on loopback addresses): the caller's first request names its own
`quic:client.shop@cart...` cluster, which its Envoy fetches on demand from node-a's agent; node-b's pods listen for
QUIC on UDP 18008 beside TCP. Blocking UDP 18008 is a real drop (an nftables table of the test's own, matching only
the cart pods' addresses), not a refused port: the caller's QUIC attempts go unanswered, as behind a firewall.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import trio

from aether.identity.mint import MintedSvid, TestCA
from aether.plane.admin_client import fetch_admin
from aether.testing.envoy import wait_for
from tests.integration.test_mesh_e2e import (
    CALLER_CLUSTER,
    CART_IPS,
    CLIENT_ID,
    NAMESPACE,
    TRUST_DOMAIN,
    _listeners,
    _stat,
    open_mesh,
    request,
)
from tests.needs import ROOT, needs

pytestmark = needs(ROOT, "nft")


async def _callee_h3_requests(mesh: object) -> int:
    """Requests node-b's QUIC inbounds answered, over both cart pods."""
    envoy = mesh.b.envoy  # type: ignore[attr-defined]
    total = 0
    for name in CART_IPS:
        total += await _stat(envoy, f"http.in_h3_{name}.{NAMESPACE}.downstream_rq_completed")
    return total


async def _until_http3(mesh: object) -> None:
    """Send requests (each must succeed) until node-b's QUIC inbound answered one.

    Envoy races TCP against a QUIC handshake that has not finished within its grid delay (300 ms): on a loaded
    machine the first requests may ride the HTTP/2 fallback, the next ones the QUIC connection once it is up.
    """

    async def answered() -> bool:
        assert (await request()).status == 200
        return await _callee_h3_requests(mesh) >= 1

    await wait_for(answered, timeout=20, interval=0.01)


async def test_requests_ride_http3_with_the_callers_identity_and_outcome_retries(tmp_path: Path) -> None:
    """The caller's upstream codec is HTTP/3 (its `quic:` cluster's stats, the callee's HTTP/3 inbound), the
    callee's app sees the caller's SPIFFE ID in XFCC, and a request to a stopped app is still retried by the
    callee's `x-aether-outcome` onto the other endpoint."""
    async with open_mesh(tmp_path) as mesh:
        response = await request()
        assert response.status == 200, response.body
        assert f"URI={CLIENT_ID}" in response.json()["xfcc"]
        await _until_http3(mesh)
        assert await _stat(mesh.a.envoy, f"cluster.{CALLER_CLUSTER}.upstream_cx_http3_total") >= 1
        assert await _stat(mesh.a.envoy, f"cluster.{CALLER_CLUSTER}.upstream_http3_broken") == 0
        mesh.apps["cart-1"].stop()
        statuses = [(await request()).status for _ in range(8)]
        assert statuses == [200] * 8
        assert await _stat(mesh.a.envoy, f"cluster.{CALLER_CLUSTER}.upstream_rq_retry") >= 1
        assert await _stat(mesh.a.envoy, f"cluster.{CALLER_CLUSTER}.upstream_http3_broken") == 0


async def test_the_first_request_to_an_undeclared_service_rides_http3_too(tmp_path: Path) -> None:
    """The caller does not declare cart: its first request matches the catch-all virtual host, which asks for the
    caller's own `quic:` cluster on demand (not the bare one), so even that request rides HTTP/3."""
    async with open_mesh(tmp_path, declared=False) as mesh:
        response = await request()
        assert response.status == 200, response.body
        assert f"URI={CLIENT_ID}" in response.json()["xfcc"]
        # It went through the caller's own cluster (whichever codec won Envoy's race), then HTTP/3 carries them.
        assert await _stat(mesh.a.envoy, f"cluster.{CALLER_CLUSTER}.upstream_rq_completed") == 1
        await _until_http3(mesh)


@contextmanager
def udp_blocked(addresses: list[str], port: int) -> Iterator[None]:
    """Drop every UDP datagram to `addresses` at `port` (an nftables table of this process, removed after)."""
    table = f"aether_h3_test_{os.getpid()}"
    targets = ", ".join(addresses)
    rules = (
        f"table inet {table} {{\n chain input {{\n  type filter hook input priority -10; policy accept;\n"
        f"  ip daddr {{ {targets} }} udp dport {port} drop\n }}\n}}\n"
    )
    subprocess.run(["nft", "-f", "-"], input=rules.encode(), check=True)
    try:
        yield
    finally:
        subprocess.run(["nft", "delete", "table", "inet", table], check=True)


async def test_a_blocked_udp_18008_falls_back_to_http2_without_failed_requests(tmp_path: Path) -> None:
    """With UDP 18008 dropped on the way to the cart pods, every request still succeeds: Envoy's connectivity
    grid races HTTP/2 over TCP when QUIC does not answer, and marks HTTP/3 broken for the origin."""
    async with open_mesh(tmp_path) as mesh:
        with udp_blocked(list(CART_IPS.values()), 18008):
            statuses = [(await request()).status for _ in range(20)]
            assert statuses == [200] * 20
            assert await _stat(mesh.a.envoy, f"cluster.{CALLER_CLUSTER}.upstream_cx_http2_total") >= 1
            assert await _callee_h3_requests(mesh) == 0

            async def marked_broken() -> bool:
                return await _stat(mesh.a.envoy, f"cluster.{CALLER_CLUSTER}.upstream_http3_broken") >= 1

            # Envoy marks HTTP/3 broken once its QUIC attempt gives up (its connect timeout).
            await wait_for(marked_broken, timeout=30, interval=0.05)


class _WithoutDnsSans(TestCA):
    """The mesh's CA (the same root: minting is deterministic) issuing SVIDs without DNS SANs."""

    __test__ = False

    def issue(self, spiffe_id: str, **options: Any) -> MintedSvid:
        options.setdefault("dns_sans", ())
        return super().issue(spiffe_id, **options)


async def test_a_callee_svid_without_the_dns_sans_keeps_its_callers_on_http2(tmp_path: Path) -> None:
    """Node-b's cart SVIDs lack the two DNS SANs: they are served (mTLS over TCP), its pods get no QUIC inbound,
    every request succeeds over HTTP/2, and the agent's `/identity` (what `aether status` prints) says why."""
    async with open_mesh(tmp_path, cart_ca=_WithoutDnsSans(TRUST_DOMAIN)) as mesh:
        listeners = _listeners(await mesh.b.envoy.config_dump())
        assert not any(name.startswith("inbound_quic_cart") for name in listeners)
        statuses = [(await request()).status for _ in range(5)]
        assert statuses == [200] * 5
        assert await _stat(mesh.a.envoy, f"cluster.{CALLER_CLUSTER}.upstream_cx_http2_total") >= 1
        document = await trio.to_thread.run_sync(fetch_admin, tmp_path / "node-b" / "admin.sock", "/identity")
        cart = {pod["pod"]: pod for pod in document["pods"]}[f"{NAMESPACE}/cart-1"]
        assert cart["served"]
        assert (
            "lacks the DNS SANs 'cart.shop.aether.internal' and '*.cart.shop.aether.internal'"
            in cart["http3"]
        )
