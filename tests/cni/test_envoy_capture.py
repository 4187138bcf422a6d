"""End to end with a real Envoy: ADD returns after Envoy ACKed the pod's listeners, which it binds inside the pod's
network namespace, a captured dial from the pod lands on Envoy's transparent capture listener, and UDP to a mesh
Service's ClusterIP is proxied to its endpoints while other UDP passes untouched."""

from __future__ import annotations

import functools
import socket
import time
from pathlib import Path

import trio

from aether.agent.app import RunningAgent, serve_agent
from aether.cni.server import PodMetadata
from aether.core.events.kube import ServicePort
from aether.envoy.bootstrap import ads_bootstrap
from aether.envoy.process import open_envoy
from aether.testing import (
    endpoints_snapshot_completed,
    endpoints_snapshot_received,
    kube_service_deleted,
    kube_service_upserted,
    make_endpoint,
    make_kube_service,
    make_meta,
)
from aether.testing.envoy import wait_for
from tests.cni.conftest import (
    MANAGED,
    NODE_IP_2,
    NODE_NAME,
    VIP,
    NetnsPair,
    PluginRun,
    agent_config,
    answer,
    dict_lookup,
    environment,
    needs_netns,
    network_config,
    prev_result,
    run_cni_process,
    socket_in,
    udp_exchange,
    udp_server,
)

pytestmark = needs_netns


async def test_add_waits_for_envoys_ack_and_captured_traffic_reaches_envoy(
    netns_pair: NetnsPair, short_dir: Path
) -> None:
    """The plugin's ADD answers once Envoy ACKed; a pod's dial to a ClusterIP is accepted by Envoy's 18001."""
    config = agent_config(
        short_dir,
        lookup=dict_lookup({("default", "web-1"): PodMetadata(service_account="web", labels=MANAGED)}),
        ack_wait=20.0,
    )
    async with trio.open_nursery() as nursery:
        agent: RunningAgent = await nursery.start(functools.partial(serve_agent, config))
        assert agent.cni is not None
        bootstrap = ads_bootstrap(node_id=NODE_NAME, xds_unix_socket=short_dir / "xds.sock", delta=True)
        async with open_envoy(bootstrap, work_dir=short_dir / "envoy", wait_live=False):
            run = await run_cni_process(
                environment("ADD", netns=netns_pair.pod_path), network_config(short_dir / "cni.sock")
            )
            assert run == PluginRun(status=0, output=prev_result())
            statistics = agent.cni.statistics()
            assert (statistics.acked, statistics.ack_timeouts) == (1, 0)

            # Only a listening socket inside the pod's namespace can accept this: nothing else routes 10.96/16.
            # An ACKed listener may still be warming (Envoy listens once its routes arrive): retry a refusal.
            async def accepted() -> bool:
                with socket_in(netns_pair.pod_path) as client:
                    try:
                        await client.connect(("10.96.7.7", 8080))
                    except ConnectionRefusedError:
                        return False
                    return bool(client.getpeername() == ("10.96.7.7", 8080))

            await wait_for(accepted, timeout=10)
        nursery.cancel_scope.cancel()


async def test_udp_to_a_mesh_service_cluster_ip_is_proxied_and_other_udp_passes_untouched(
    netns_pair: NetnsPair, short_dir: Path
) -> None:
    """A pod's datagram to the ClusterIP:port of a Service of its upstream reaches the service's endpoint through
    Envoy's listener of that destination, and the answer comes back to the client's connected socket; the same
    ClusterIP on another port, another address, and the destination itself once the Service is deleted reach
    the real servers in the node's namespace, as if no mesh were there."""
    metadata = PodMetadata(
        service_account="web", labels=MANAGED, annotations={"config.aether.io/upstreams": "default/echo"}
    )
    config = agent_config(short_dir, lookup=dict_lookup({("default", "web-1"): metadata}), ack_wait=20.0)
    pod, node = netns_pair.pod_path, netns_pair.node_path
    netns_pair.exec(netns_pair.node, "ip", "addr", "add", f"{VIP}/32", "dev", "lo")
    # The service's endpoint: Envoy runs in this namespace, so its upstream sockets reach loopback here.
    echo = trio.socket.socket(type=socket.SOCK_DGRAM)
    await echo.bind(("127.0.0.1", 0))
    echo_port = echo.getsockname()[1]
    service = make_kube_service(
        "echo", cluster_ip=VIP, ports=[ServicePort(port=5300, target_port=str(echo_port), protocol="UDP")]
    )
    real = await udp_server(node, (VIP, 5300))
    other_port = await udp_server(node, (VIP, 9999))
    other_host = await udp_server(node, (NODE_IP_2, 7070))

    async def answered(destination: tuple[str, int], expected: bytes) -> bool:
        try:
            return await udp_exchange(pod, destination, timeout=0.5) == expected
        except (trio.TooSlowError, ConnectionRefusedError):
            return False

    with echo, real, other_port, other_host:
        async with trio.open_nursery() as nursery:
            for server, tag in ((echo, b"echo"), (real, b"real"), (other_port, b"other-port")):
                nursery.start_soon(functools.partial(answer, server, tag, forever=True))
            nursery.start_soon(functools.partial(answer, other_host, b"other-host", forever=True))
            agent: RunningAgent = await nursery.start(functools.partial(serve_agent, config))
            bootstrap = ads_bootstrap(node_id=NODE_NAME, xds_unix_socket=short_dir / "xds.sock", delta=True)
            async with open_envoy(bootstrap, work_dir=short_dir / "envoy", wait_live=False):
                run = await run_cni_process(
                    environment("ADD", netns=pod), network_config(short_dir / "cni.sock")
                )
                assert run == PluginRun(status=0, output=prev_result())
                assert await udp_exchange(pod, (VIP, 5300)) == b"real:ping"  # no Service known: not captured
                async with agent.journal.sender() as send:
                    at = time.time_ns()
                    await send.send(kube_service_upserted(service, at=at))
                    await send.send(
                        endpoints_snapshot_received(make_endpoint("127.0.0.1", service="default/echo"), at=at)
                    )
                    await send.send(endpoints_snapshot_completed(at=at))
                    await wait_for(lambda: answered((VIP, 5300), b"echo:ping"), timeout=20)
                    assert agent.udp_services is not None
                    assert agent.udp_services.statistics().failures == 0
                    assert await udp_exchange(pod, (VIP, 9999)) == b"other-port:ping"
                    assert await udp_exchange(pod, (NODE_IP_2, 7070)) == b"other-host:ping"
                    await send.send(
                        kube_service_deleted(make_meta("echo", kind="Service"), at=time.time_ns())
                    )
                    await wait_for(lambda: answered((VIP, 5300), b"real:ping"), timeout=20)
            nursery.cancel_scope.cancel()
