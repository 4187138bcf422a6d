"""The agent registers its pods with a real registrar, unregisters those that left, and cleans up after a restart."""

from __future__ import annotations

import functools
from pathlib import Path

import trio

from aether.agent.app import AgentConfig, RunningAgent, serve_agent
from aether.registrar import serve_registrar
from aether.rpc.listen import ListenAddress
from aether.testing import make_pod, pod_added, pod_removed
from aether.testing.envoy import wait_for
from aether.testing.memory_backend import MemoryBackend
from tests.registrar._grpc import registration, rpc

NODE = "node-a"
CONVERGE = 10


def _config(tmp_path: Path) -> AgentConfig:
    return AgentConfig(
        node_name=NODE,
        log_dir=tmp_path / "log",
        xds=ListenAddress.unix(tmp_path / "xds.sock"),
        admin_socket=tmp_path / "admin.sock",
        registrar=ListenAddress.unix(tmp_path / "registrar.sock"),
    )


async def _listing(socket: Path) -> dict[str, list[str]]:
    from aether.proto.registrar.v1 import registrar_pb2

    response = await rpc(socket, "ListAllEndpoints", registrar_pb2.ListAllEndpointsRequest())
    return {
        service: sorted(endpoint.ip for endpoint in group.endpoints)
        for service, group in sorted(response.services.items())
        if group.endpoints
    }


async def test_pods_are_registered_unregistered_and_stale_registrations_cleaned_after_a_restart(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    assert config.registrar is not None
    assert config.registrar.path is not None
    socket = config.registrar.path
    web = make_pod("web-1", namespace="shop", service_account="web", ips=("127.0.10.1",), node_name=NODE)
    api = make_pod("api-1", namespace="shop", service_account="api", ips=("127.0.10.2",), node_name=NODE)
    async with trio.open_nursery() as nursery:
        await nursery.start(
            functools.partial(serve_registrar, backend=MemoryBackend(), listen=config.registrar)
        )
        # Another node's endpoint: never touched by this agent.
        foreign = registration("10.9.9.9", service="shop/web")
        foreign.endpoint.kubernetes_metadata.node_name = "node-b"
        await rpc(socket, "RegisterEndpoint", foreign)

        async with trio.open_nursery() as agent_nursery:
            agent: RunningAgent = await agent_nursery.start(functools.partial(serve_agent, config))
            async with agent.journal.sender() as send:
                await send.send(pod_added(web))
                await send.send(pod_added(api))

            async def both_registered() -> bool:
                return await _listing(socket) == {
                    "shop/api": ["127.0.10.2"],
                    "shop/web": ["10.9.9.9", "127.0.10.1"],
                }

            await wait_for(both_registered, timeout=CONVERGE)
            async with agent.journal.sender() as send:
                await send.send(pod_removed("api-1", namespace="shop"))

            async def api_unregistered() -> bool:
                return await _listing(socket) == {"shop/web": ["10.9.9.9", "127.0.10.1"]}

            await wait_for(api_unregistered, timeout=CONVERGE)
            registrations = agent.registrations
            assert registrations is not None

            async def sink_in_sync() -> bool:  # the registrar commits before the sink reads its answer
                await trio.lowlevel.checkpoint()
                statistics = registrations.statistics()
                return (statistics.wanted, statistics.registered, statistics.in_sync) == (1, 1, True)

            await wait_for(sink_in_sync, timeout=CONVERGE)
            agent_nursery.cancel_scope.cancel()

        # While the agent is down its pod leaves; an endpoint for it lingers in the registrar.
        await rpc(socket, "RegisterEndpoint", _stale(NODE))
        assert "127.0.10.7" in (await _listing(socket))["shop/web"]
        async with trio.open_nursery() as agent_nursery:
            agent = await agent_nursery.start(functools.partial(serve_agent, config))

            async def stale_removed() -> bool:
                return (await _listing(socket)).get("shop/web") == ["10.9.9.9", "127.0.10.1"]

            await wait_for(stale_removed, timeout=CONVERGE)
            agent_nursery.cancel_scope.cancel()
        nursery.cancel_scope.cancel()


def _stale(node: str) -> object:
    request = registration("127.0.10.7", service="shop/web")
    request.endpoint.kubernetes_metadata.node_name = node
    return request


async def test_over_mtls_the_registrar_takes_the_agents_own_pods(tmp_path: Path) -> None:
    """An agent with its node identity registers its pod with a registrar that authorizes by mTLS identity."""
    from aether.identity.mint import TestCA
    from aether.registrar.authorization import agent_spiffe_id
    from aether.rpc.tls import client_tls_context, server_tls_context

    trust_domain = "aether.internal"
    ca = TestCA(trust_domain)
    (tmp_path / "bundle.pem").write_bytes(ca.bundle_pem)

    def files(name: str, spiffe_id: str) -> dict[str, Path]:
        minted = ca.issue(spiffe_id)
        (tmp_path / f"{name}.pem").write_bytes(minted.cert_chain_pem)
        (tmp_path / f"{name}.key").write_bytes(minted.private_key_pem)
        return {
            "certificate": tmp_path / f"{name}.pem",
            "key": tmp_path / f"{name}.key",
            "bundle": tmp_path / "bundle.pem",
        }

    registrar_id = f"spiffe://{trust_domain}/ns/aether-system/sa/aether-registrar"
    async with trio.open_nursery() as nursery:
        address = await nursery.start(
            functools.partial(
                serve_registrar,
                backend=MemoryBackend(),
                listen=ListenAddress.tcp(host="127.0.0.1", port=0),
                tls=server_tls_context(**files("registrar", registrar_id)),
                trust_domain=trust_domain,
            )
        )
        config = AgentConfig(
            node_name=NODE,
            log_dir=tmp_path / "log",
            xds=ListenAddress.unix(tmp_path / "xds.sock"),
            admin_socket=tmp_path / "admin.sock",
            registrar=address,
            registrar_tls=client_tls_context(
                **files("agent", agent_spiffe_id(NODE, trust_domain=trust_domain))
            ),
        )
        agent: RunningAgent = await nursery.start(functools.partial(serve_agent, config))
        async with agent.journal.sender() as send:
            await send.send(
                pod_added(
                    make_pod(
                        "web-1", namespace="shop", service_account="web", ips=("127.0.10.1",), node_name=NODE
                    )
                )
            )
        assert agent.registrations is not None
        registrations = agent.registrations

        async def registered() -> bool:
            return registrations.statistics().in_sync and registrations.statistics().registered == 1

        await wait_for(registered, timeout=CONVERGE)

        async def synced_back() -> bool:  # the watch, over the same mTLS, brings the endpoint into the log
            return "127.0.10.1" in {ip for _, ip in agent.journal.state.registry.endpoints_of("shop/web")}

        await wait_for(synced_back, timeout=CONVERGE)
        assert registrations.statistics().failures == 0
        nursery.cancel_scope.cancel()
