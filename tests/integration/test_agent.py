"""`aether agent` end to end: events in, a projected snapshot served to a real Envoy, SVIDs read from files, and
`aether status` reading the agent's admin socket."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import trio

from aether.agent.app import AgentConfig, RunningAgent, serve_agent
from aether.cli import main
from aether.envoy.bootstrap import ads_bootstrap
from aether.envoy.process import open_envoy
from aether.identity.mint import TestCA, write_bundle, write_svid
from aether.plane.admin_client import fetch_admin
from aether.rpc.listen import ListenAddress
from aether.testing import (
    endpoint_added,
    make_endpoint,
    make_pod,
    pod_added,
    registry_service_added,
)
from aether.testing.envoy import wait_for

NODE = "node-a"
CONVERGE = 10


def _listener_names(dump: dict[str, object]) -> list[str]:
    for config in dump["configs"]:  # type: ignore[attr-defined]
        if config["@type"].endswith("ListenersConfigDump"):
            return sorted(item["name"] for item in config.get("dynamic_listeners", []))
    return []


async def test_the_agent_serves_its_projection_to_envoy_and_reports_sync_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A managed pod and its service become listeners and clusters in Envoy; `aether status` shows them SYNCED."""
    ca = TestCA("aether.internal")
    svids = tmp_path / "svids"
    svids.mkdir()
    write_bundle(svids, ca.bundle_pem)
    write_svid(svids, owner="shop/web", content=ca.issue("spiffe://aether.internal/ns/shop/sa/web"))
    config = AgentConfig(
        node_name=NODE,
        log_dir=tmp_path / "log",
        xds=ListenAddress.unix(tmp_path / "xds.sock"),
        admin_socket=tmp_path / "admin.sock",
        svid_dir=svids,
    )
    pod = make_pod("web-1", namespace="shop", service_account="web", ips=("127.0.10.1",), node_name=NODE)
    async with trio.open_nursery() as nursery:
        agent: RunningAgent = await nursery.start(functools.partial(serve_agent, config))
        async with agent.journal.sender() as send:
            for event in (
                pod_added(pod),
                registry_service_added("shop/web", version="1"),
                endpoint_added(make_endpoint("127.0.10.1", service="shop/web"), version="2"),
            ):
                await send.send(event)
        bootstrap = ads_bootstrap(node_id=NODE, xds_unix_socket=tmp_path / "xds.sock", delta=True)
        async with open_envoy(bootstrap, work_dir=tmp_path / "envoy", wait_live=False) as envoy:

            async def listeners_served() -> bool:
                return "inbound_web-1.shop" in _listener_names(await envoy.config_dump())

            await wait_for(listeners_served, timeout=CONVERGE)
            names = _listener_names(await envoy.config_dump())
            # No capture listeners: the pod has no network namespace, so nothing diverts its traffic to them. Its
            # SVID carries the HTTP/3 names, so its inbound also listens for QUIC.
            assert {"outbound_http_web-1.shop", "inbound_web-1.shop", "inbound_quic_web-1.shop"} == set(names)

            async def synced() -> bool:
                document = await trio.to_thread.run_sync(fetch_admin, config.admin_socket, "/status")
                rows = [row for stream in document["streams"] for row in stream["types"]]
                return bool(rows) and all(row["status"] == "SYNCED" for row in rows)

            await wait_for(synced, timeout=CONVERGE)
            status = await trio.to_thread.run_sync(
                lambda: main(["status", "--admin", str(config.admin_socket)])
            )
            assert status == 0
            out = capsys.readouterr().out.splitlines()
            assert out[0].split() == ["NODE", "STREAM", "MODE", "CDS", "EDS", "LDS", "RDS", "SDS"]
            assert out[1].split()[:3] == [NODE, "1", "DELTA"]
            assert "NACKED" not in out[1]
        nursery.cancel_scope.cancel()


async def test_the_agent_follows_the_registrar_for_its_dependency_set(tmp_path: Path) -> None:
    """Endpoints registered with a real registrar reach the agent's log and its projected load assignments."""
    from aether.core.snapshot import ENDPOINT_TYPE
    from aether.registrar import serve_registrar
    from aether.testing.memory_backend import MemoryBackend
    from tests.registrar._grpc import registration, rpc

    registrar_socket = tmp_path / "registrar.sock"
    config = AgentConfig(
        node_name=NODE,
        log_dir=tmp_path / "log",
        xds=ListenAddress.unix(tmp_path / "xds.sock"),
        admin_socket=tmp_path / "admin.sock",
        registrar=ListenAddress.unix(registrar_socket),
    )
    pod = make_pod("web-1", namespace="shop", service_account="web", ips=("127.0.10.1",), node_name=NODE)
    async with trio.open_nursery() as nursery:
        await nursery.start(
            functools.partial(
                serve_registrar, backend=MemoryBackend(), listen=ListenAddress.unix(registrar_socket)
            )
        )
        remote = registration("10.1.2.3")  # a pod of another node (the agent prunes its own node's strays)
        remote.endpoint.kubernetes_metadata.node_name = "node-b"
        await rpc(registrar_socket, "RegisterEndpoint", remote)
        agent: RunningAgent = await nursery.start(functools.partial(serve_agent, config))
        async with agent.journal.sender() as send:
            await send.send(pod_added(pod))

        async def endpoint_projected() -> bool:
            snapshot = agent.cache.get(NODE)
            held = snapshot.of_type(ENDPOINT_TYPE) if snapshot is not None else {}
            return any(b"10.1.2.3" in resource.body for resource in held.values())

        await wait_for(endpoint_projected, timeout=CONVERGE)
        assert "shop/web" in agent.journal.state.registry.services
        assert agent.projector.dependencies == ("shop/web",)
        nursery.cancel_scope.cancel()
