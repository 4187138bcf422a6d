"""The registrar TLS context follows the Workload API (`aether.identity.renewal`): a CA the bundle drops is no longer
trusted by new connections (which `ssl`'s one context, loaded again, would keep trusting), and the drop is
signalled so that open connections redial."""

from __future__ import annotations

import functools
import ssl
from pathlib import Path

import trio
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from aether.core.events import Event
from aether.identity.mint import MintedSvid, TestCA
from aether.identity.renewal import RenewingContext, serve_context_renewal
from aether.identity.tls import client_context, load_material
from aether.identity.workload_api import WorkloadIdentity, serve_workload_api
from aether.identity.workload_bundles import bundle_narrowed
from aether.registrar.authorization import agent_spiffe_id
from aether.rpc.calls import open_grpc_socket
from aether.rpc.listen import ListenAddress, serve_grpc
from aether.testing import make_pod, pod_added
from aether.testing.envoy import wait_for
from aether.testing.spiffe import FakeWorkloadApi
from tests.identity.test_spiffe_clients import TD, start_spiffe_agent_and_registrar

AGENT_ID = f"spiffe://{TD}/ns/aether-system/sa/aether-agent/node/node-1"
TIMEOUT = 20.0


def _server_context(ca: TestCA, directory: Path) -> ssl.SSLContext:
    """A TLS server presenting a certificate `ca` issued (asking no client certificate)."""
    own = ca.issue(f"spiffe://{TD}/ns/aether-system/sa/aether-registrar")
    chain, key = directory / "server-chain.pem", directory / "server-key.pem"
    chain.write_bytes(own.cert_chain_pem)
    key.write_bytes(own.private_key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(chain, key)
    context.set_alpn_protocols(["h2"])
    return context


async def _handshakes(target: ListenAddress, context: ssl.SSLContext) -> bool:
    """Whether a new connection to `target` with `context` passes its TLS handshake."""
    refused = False
    try:
        async with open_grpc_socket(target, tls=context):
            pass
    except* ssl.SSLError:
        refused = True
    return not refused


async def test_a_ca_dropped_from_the_bundle_is_no_longer_trusted_and_open_connections_are_told(
    tmp_path: Path,
) -> None:
    # A trust domain rolling its root (same name, a new key): the server's certificate is of the old one.
    old_root, new_root = TestCA(TD), TestCA(TD, key=ec.generate_private_key(ec.SECP256R1()))
    workload = FakeWorkloadApi(new_root, svids=[new_root.issue(AGENT_ID)])
    workload.set_bundles({f"spiffe://{TD}": new_root.bundle_pem + old_root.bundle_pem})
    narrowed: list[int] = []
    context = RenewingContext()
    send, receive = trio.open_memory_channel[Event](0)
    async with trio.open_nursery() as nursery:

        async def drain() -> None:
            async for _ in receive:
                pass

        nursery.start_soon(drain)
        await nursery.start(workload.serve, tmp_path / "workload.sock")
        target = await nursery.start(
            functools.partial(
                serve_grpc,
                [workload.service()],
                listen=ListenAddress.tcp(host="127.0.0.1", port=0),
                tls=_server_context(old_root, tmp_path),
            )
        )
        identity: WorkloadIdentity = await nursery.start(
            functools.partial(serve_workload_api, tmp_path / "workload.sock", send=send)
        )
        await identity.wait_ready()
        nursery.start_soon(
            functools.partial(
                serve_context_renewal,
                identity,
                context,
                on_narrowed=lambda: narrowed.append(context.renewals),
            )
        )

        async def trusted_by_both() -> bool:
            material = identity.tls_material()
            return (
                context.renewals >= 1 and material is not None and old_root.bundle_pem in material.bundle_pem
            )

        await wait_for(trusted_by_both, timeout=TIMEOUT)
        assert await _handshakes(target, context)
        material = identity.tls_material()
        assert material is not None
        loaded_again = client_context(material)  # what one context loaded at every change did

        workload.set_bundles({f"spiffe://{TD}": new_root.bundle_pem})

        async def told() -> bool:
            return bool(narrowed)

        await wait_for(told, timeout=TIMEOUT)
        assert not await _handshakes(target, context)
        fresh = identity.tls_material()
        assert fresh is not None
        load_material(loaded_again, fresh)
        assert await _handshakes(target, loaded_again), "ssl forgets no CA: the reason for RenewingContext"
        # A rotation that drops nothing renews the context without a reconnect.
        workload.set_bundles({f"spiffe://{TD}": new_root.bundle_pem + old_root.bundle_pem})
        await wait_for(trusted_by_both, timeout=TIMEOUT)
        assert await _handshakes(target, context)
        assert len(narrowed) == 1
        nursery.cancel_scope.cancel()


def test_a_bundle_narrows_when_it_loses_a_ca_not_when_it_gains_one() -> None:
    one, two = TestCA(TD).bundle_pem, TestCA(TD, key=ec.generate_private_key(ec.SECP256R1())).bundle_pem
    assert bundle_narrowed(one + two, two)
    assert not bundle_narrowed(one, one + two)
    assert not bundle_narrowed(one + two, two + one)
    assert not bundle_narrowed(b"", one)


async def test_the_agent_stops_trusting_a_registrar_whose_ca_its_bundle_dropped(tmp_path: Path) -> None:
    """`registrar_spiffe`: the agent's registrar connections are made with the Workload API's SVID and bundle.
    The registrar's certificate is of the old root; once the bundle drops that root, the agent's open
    connections redial (the registrations' session is cut at once, not left verified by the old root) and their
    handshakes fail: the registrar is no longer trusted, without a restart."""
    old_root, new_root = TestCA(TD), TestCA(TD, key=ec.generate_private_key(ec.SECP256R1()))
    workload = FakeWorkloadApi(new_root, svids=[new_root.issue(agent_spiffe_id("node-a", trust_domain=TD))])
    workload.set_bundles({f"spiffe://{TD}": new_root.bundle_pem + old_root.bundle_pem})
    async with trio.open_nursery() as nursery:
        agent = await start_spiffe_agent_and_registrar(
            tmp_path, nursery, workload=workload, registrar_ca=old_root, clients_ca=new_root
        )
        registrations = agent.registrations
        assert registrations is not None
        web = make_pod(
            "web-1", namespace="shop", service_account="web", ips=("127.0.10.1",), node_name="node-a"
        )
        async with agent.journal.sender() as send:
            await send.send(pod_added(web))

        async def registered() -> bool:
            return registrations.statistics().in_sync and registrations.statistics().registered == 1

        await wait_for(registered, timeout=TIMEOUT)
        # (A first handshake may fail: the SVID's own bundle, of the new root only, can arrive before the bundles.)
        before = registrations.statistics().failures
        workload.set_bundles({f"spiffe://{TD}": new_root.bundle_pem})

        async def refused() -> bool:
            return registrations.statistics().failures > before

        await wait_for(refused, timeout=TIMEOUT)
        nursery.cancel_scope.cancel()


async def test_a_rotated_svid_is_presented_by_the_next_connection_without_a_restart(tmp_path: Path) -> None:
    """The agent's own SVID rotates on the Workload API (a new key): the context renews, and the next connection
    presents the new certificate to a server that asks for one (the registrar and the broker do)."""
    ca = TestCA(TD)
    first, second = ca.issue(AGENT_ID), ca.issue(AGENT_ID, key=ca.new_key())
    workload = FakeWorkloadApi(ca, svids=[first])
    server = _server_context(ca, tmp_path)
    server.verify_mode = ssl.CERT_REQUIRED
    server.load_verify_locations(cadata=ca.bundle_pem.decode("ascii"))
    presented: list[bytes] = []

    async def answer(stream: trio.SSLStream[trio.SocketStream]) -> None:
        await stream.do_handshake()
        presented.append(stream.getpeercert(binary_form=True) or b"")
        await stream.send_all(b"ok")
        await stream.aclose()

    async def connect(port: int) -> bytes:
        stream = await trio.open_ssl_over_tcp_stream("127.0.0.1", port, ssl_context=context)
        with trio.fail_after(TIMEOUT):
            answered = await stream.receive_some()
        await trio.aclose_forcefully(stream)
        return bytes(answered)

    def leaf(svid: MintedSvid) -> bytes:
        certificate = x509.load_pem_x509_certificates(svid.cert_chain_pem)[0]
        return certificate.public_bytes(serialization.Encoding.DER)

    context = RenewingContext()
    send, receive = trio.open_memory_channel[Event](0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_drain, receive)
        await nursery.start(workload.serve, tmp_path / "workload.sock")
        [listener] = await nursery.start(
            functools.partial(trio.serve_ssl_over_tcp, answer, 0, server, host="127.0.0.1")
        )
        port = listener.transport_listener.socket.getsockname()[1]
        identity: WorkloadIdentity = await nursery.start(
            functools.partial(serve_workload_api, tmp_path / "workload.sock", send=send)
        )
        nursery.start_soon(serve_context_renewal, identity, context)

        async def presents(svid: MintedSvid) -> bool:
            material = identity.tls_material()
            return (
                context.renewals >= 1
                and material is not None
                and material.cert_chain_pem == svid.cert_chain_pem
            )

        await wait_for(functools.partial(presents, first), timeout=TIMEOUT)
        assert await connect(port) == b"ok"
        workload.set_svids([second])
        await wait_for(functools.partial(presents, second), timeout=TIMEOUT)
        assert await connect(port) == b"ok"
        assert presented == [leaf(first), leaf(second)]
        nursery.cancel_scope.cancel()


async def _drain(receive: trio.MemoryReceiveChannel[Event]) -> None:
    async for _ in receive:
        pass
