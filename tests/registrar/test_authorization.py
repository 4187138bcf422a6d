"""Only the agent of an endpoint's node may register or unregister it: the rule (pure), then over real mutual TLS
with SVIDs from a test CA, through the registrar and the agent's client."""

from __future__ import annotations

import contextlib
import functools
import random
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import purerpc
import pytest
import trio

from aether.core.events import Event
from aether.core.events.registry import Endpoint
from aether.identity.mint import TestCA
from aether.proto.registrar.v1 import registrar_pb2 as pb
from aether.registrar import SERVICE_NAME, serve_registrar, serve_registrar_client
from aether.registrar.authorization import (
    agent_spiffe_id,
    authorize,
    node_of_spiffe_id,
    spiffe_id_of_certificate,
)
from aether.registrar.convert import registration_to_proto
from aether.registrar.errors import PermissionRefusedError
from aether.registrar.snapshot import EndpointRegistered, EndpointsUnregistered, apply, empty_snapshot
from aether.rpc.backoff import Backoff
from aether.rpc.compat import apply_purerpc_fixes
from aether.rpc.listen import ListenAddress
from aether.rpc.tls import client_tls_context, server_tls_context
from aether.testing.memory_backend import MemoryBackend
from tests.registrar._builders import WEB, endpoint

TRUST_DOMAIN = "aether.test"


def _on(node: str, ip: str) -> Endpoint:
    return attrs.evolve(endpoint(ip), node_name=node)


def _registered(one: Endpoint) -> EndpointRegistered:
    return EndpointRegistered(endpoint=one)


# --- the rule ---


def test_agent_identities_name_their_node() -> None:
    """`spiffe://<td>/ns/aether-system/sa/aether-agent/node/<node>`; anything else names no node."""
    assert agent_spiffe_id("node-a", trust_domain=TRUST_DOMAIN) == (
        "spiffe://aether.test/ns/aether-system/sa/aether-agent/node/node-a"
    )
    assert node_of_spiffe_id(
        agent_spiffe_id("node-a", trust_domain=TRUST_DOMAIN), trust_domain=TRUST_DOMAIN
    ) == ("node-a")
    for other in (
        "spiffe://other.test/ns/aether-system/sa/aether-agent/node/node-a",  # another trust domain
        "spiffe://aether.test/ns/aether-system/sa/aether-agent",  # no node
        "spiffe://aether.test/ns/aether-system/sa/aether-agent/node/a/b",  # a path, not a node
        "spiffe://aether.test/ns/shop/sa/web",  # a workload
    ):
        assert node_of_spiffe_id(other, trust_domain=TRUST_DOMAIN) is None


def test_an_agent_changes_only_endpoints_of_its_node() -> None:
    """Register on its node: allowed; on another, or unregistering another node's endpoint: refused, naming both."""
    node_a = agent_spiffe_id("node-a", trust_domain=TRUST_DOMAIN)
    snapshot, _ = apply(empty_snapshot(), _registered(_on("node-b", "10.0.0.2")))
    authorize(
        _registered(_on("node-a", "10.0.0.1")), caller=node_a, trust_domain=TRUST_DOMAIN, snapshot=snapshot
    )
    authorize(
        EndpointsUnregistered(service=WEB, ips=("10.0.0.9",)),
        caller=node_a,
        trust_domain=TRUST_DOMAIN,
        snapshot=snapshot,
    )
    with pytest.raises(PermissionRefusedError) as caught:
        authorize(
            _registered(_on("node-b", "10.0.0.3")),
            caller=node_a,
            trust_domain=TRUST_DOMAIN,
            snapshot=snapshot,
        )
    assert str(caught.value) == (
        f"caller {node_a!r}: may change only endpoints of node 'node-a' (endpoint 10.0.0.3 is on node 'node-b')"
    )
    with pytest.raises(PermissionRefusedError, match=r"endpoint 10\.0\.0\.2 is on node 'node-b'"):
        authorize(
            EndpointsUnregistered(service=WEB, ips=("10.0.0.2",)),
            caller=node_a,
            trust_domain=TRUST_DOMAIN,
            snapshot=snapshot,
        )
    with pytest.raises(PermissionRefusedError) as caught:
        authorize(
            _registered(_on("node-a", "10.0.0.1")), caller=None, trust_domain=TRUST_DOMAIN, snapshot=snapshot
        )
    assert str(caught.value) == (
        "caller '(no client certificate)': must be an agent identity "
        "'spiffe://aether.test/ns/aether-system/sa/aether-agent/node/<node>'"
    )


# --- over mutual TLS ---


@attrs.frozen
class _Pki:
    directory: Path
    ca: TestCA

    def files(self, name: str, spiffe_id: str) -> dict[str, Path]:
        minted = self.ca.issue(spiffe_id)
        paths = {"certificate": self.directory / f"{name}.pem", "key": self.directory / f"{name}.key"}
        paths["certificate"].write_bytes(minted.cert_chain_pem)
        paths["key"].write_bytes(minted.private_key_pem)
        return {**paths, "bundle": self.directory / "bundle.pem"}

    def client(self, spiffe_id: str) -> ssl.SSLContext:
        return client_tls_context(**self.files(spiffe_id.rsplit("/", 1)[-1], spiffe_id))


@pytest.fixture
def pki(tmp_path: Path) -> _Pki:
    ca = TestCA(TRUST_DOMAIN)
    (tmp_path / "bundle.pem").write_bytes(ca.bundle_pem)
    return _Pki(tmp_path, ca)


@contextlib.asynccontextmanager
async def _tls_registrar(pki: _Pki) -> AsyncIterator[ListenAddress]:
    server = server_tls_context(
        **pki.files("registrar", f"spiffe://{TRUST_DOMAIN}/ns/aether-system/sa/aether-registrar")
    )
    async with trio.open_nursery() as nursery:
        address = await nursery.start(
            functools.partial(
                serve_registrar,
                backend=MemoryBackend(),
                listen=ListenAddress.tcp(host="127.0.0.1", port=0),
                tls=server,
                trust_domain=TRUST_DOMAIN,
            )
        )
        with trio.fail_after(30):
            yield address
        nursery.cancel_scope.cancel()


async def _call(
    address: ListenAddress, context: ssl.SSLContext, name: str, request: Any, response: Any
) -> Any:
    apply_purerpc_fixes()
    assert address.port is not None
    signature = purerpc.RPCSignature(purerpc.Cardinality.UNARY_UNARY, type(request), response)
    try:
        async with purerpc.secure_channel("127.0.0.1", address.port, context) as channel:
            return await purerpc.Client(SERVICE_NAME, channel).get_method_stub(name, signature)(request)
    except BaseExceptionGroup as group:
        # purerpc's channel runs the call in task groups: unwrap the one failure they carry.
        failure: BaseException = group
        while isinstance(failure, BaseExceptionGroup) and len(failure.exceptions) == 1:
            failure = failure.exceptions[0]
        raise failure from None


async def _register(address: ListenAddress, context: ssl.SSLContext, one: Endpoint) -> None:
    await _call(address, context, "RegisterEndpoint", registration_to_proto(one), pb.RegisterEndpointResponse)


async def test_a_registration_for_another_node_is_refused_with_permission_denied(pki: _Pki) -> None:
    """node-a's agent registers its endpoint; its registration for node-b, and its unregistration of node-b's
    endpoint, fail with PERMISSION_DENIED; node-b's agent registers its own."""
    node_a = pki.client(agent_spiffe_id("node-a", trust_domain=TRUST_DOMAIN))
    node_b = pki.client(agent_spiffe_id("node-b", trust_domain=TRUST_DOMAIN))
    async with _tls_registrar(pki) as address:
        await _register(address, node_a, _on("node-a", "10.0.0.1"))
        await _register(address, node_b, _on("node-b", "10.0.0.2"))
        with pytest.raises(purerpc.RpcFailedError) as caught:
            await _register(address, node_a, _on("node-b", "10.0.0.3"))
        assert (caught.value.status.status_code, caught.value.status.status_message) == (
            purerpc.StatusCode.PERMISSION_DENIED,
            "RegisterEndpoint: caller 'spiffe://aether.test/ns/aether-system/sa/aether-agent/node/node-a': may change"
            " only endpoints of node 'node-a' (endpoint 10.0.0.3 is on node 'node-b')",
        )
        request = pb.UnregisterEndpointRequest(service_name=WEB, ips=["10.0.0.2"])
        with pytest.raises(purerpc.RpcFailedError) as caught:
            await _call(address, node_a, "UnregisterEndpoint", request, pb.UnregisterEndpointResponse)
        assert caught.value.status.status_code == purerpc.StatusCode.PERMISSION_DENIED
        listed = await _call(
            address, node_a, "ListAllEndpoints", pb.ListAllEndpointsRequest(), pb.ListAllEndpointsResponse
        )
        assert sorted(one.ip for one in listed.services[WEB].endpoints) == ["10.0.0.1", "10.0.0.2"]


async def test_a_workload_identity_may_read_but_not_write(pki: _Pki) -> None:
    """A certificate of the trust domain that names no agent: PERMISSION_DENIED for writes."""
    workload = pki.client(f"spiffe://{TRUST_DOMAIN}/ns/shop/sa/web")
    async with _tls_registrar(pki) as address:
        with pytest.raises(purerpc.RpcFailedError) as caught:
            await _register(address, workload, _on("node-a", "10.0.0.1"))
        assert caught.value.status.status_code == purerpc.StatusCode.PERMISSION_DENIED
        listed = await _call(
            address, workload, "ListAllEndpoints", pb.ListAllEndpointsRequest(), pb.ListAllEndpointsResponse
        )
        assert dict(listed.services) == {}


async def test_a_client_of_another_trust_domain_is_not_served(pki: _Pki, tmp_path: Path) -> None:
    """Its certificate does not verify against the bundle: the handshake fails, nothing is served."""
    stranger_ca = TestCA("stranger.test")
    minted = stranger_ca.issue(agent_spiffe_id("node-a", trust_domain="stranger.test"))
    (tmp_path / "stranger.pem").write_bytes(minted.cert_chain_pem)
    (tmp_path / "stranger.key").write_bytes(minted.private_key_pem)
    context = client_tls_context(
        certificate=tmp_path / "stranger.pem", key=tmp_path / "stranger.key", bundle=tmp_path / "bundle.pem"
    )
    async with _tls_registrar(pki) as address:
        with pytest.raises(purerpc.GRPCError, match="the connection ended before the stream did"):
            await _register(address, context, _on("node-a", "10.0.0.1"))


async def test_the_agent_client_watches_over_tls(pki: _Pki) -> None:
    """The agent's registrar client connects with its SVID and receives the registry."""
    node_a = pki.client(agent_spiffe_id("node-a", trust_domain=TRUST_DOMAIN))
    async with _tls_registrar(pki) as address:
        await _register(address, node_a, _on("node-a", "10.0.0.1"))
        send, receive = trio.open_memory_channel[Event](0)
        async with send, receive, trio.open_nursery() as nursery:
            client = await nursery.start(
                lambda task_status: serve_registrar_client(
                    target=address,
                    cluster_name="c",
                    node_name="node-a",
                    services=lambda: None,
                    send=send,
                    backoff=Backoff(base=0.01, cap=0.05),
                    rng=random.Random(1),
                    tls=node_a,
                    task_status=task_status,
                )
            )
            received = [await receive.receive(), await receive.receive()]
            assert [type(event).__name__ for event in received] == [
                "EndpointsSnapshotReceived",
                "EndpointsSnapshotCompleted",
            ]
            assert [one.ip for one in received[0].endpoints] == ["10.0.0.1"]  # type: ignore[attr-defined]
            await client.wait_synced()
            nursery.cancel_scope.cancel()


def test_the_spiffe_id_is_read_from_the_certificate(pki: _Pki) -> None:
    """The one spiffe:// URI SAN; none or two: None."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    def der(minted_pem: bytes) -> bytes:
        return x509.load_pem_x509_certificate(minted_pem).public_bytes(serialization.Encoding.DER)

    spiffe_id = agent_spiffe_id("node-a", trust_domain=TRUST_DOMAIN)
    assert spiffe_id_of_certificate(der(pki.ca.issue(spiffe_id).cert_chain_pem)) == spiffe_id
    assert spiffe_id_of_certificate(der(pki.ca.issue(spiffe_id, uri_sans=()).cert_chain_pem)) is None
    two = pki.ca.issue(spiffe_id, uri_sans=(spiffe_id, f"spiffe://{TRUST_DOMAIN}/x")).cert_chain_pem
    assert spiffe_id_of_certificate(der(two)) is None
