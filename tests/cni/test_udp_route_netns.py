"""GAMMA UDPRoute end to end, in real network namespaces with a real Envoy: a captured pod's datagrams to a Service's
ClusterIP:port are split between the route's backends by weight (each a Service selecting, by version, pods of one
service account), the answers come back to the client's connected socket, and UDP the mesh does not serve passes
untouched."""

from __future__ import annotations

import collections
import functools
import socket
from pathlib import Path

import trio

from aether.agent.app import RunningAgent, serve_agent
from aether.cni.server import PodMetadata
from aether.core.events.kube import ServicePort
from aether.envoy.bootstrap import ads_bootstrap
from aether.envoy.process import open_envoy
from aether.testing import make_kube_object, make_kube_service
from aether.testing.envoy import wait_for
from aether.testing.xds_resources import pick_free_port
from tests.cni.canary import learn_canary, start_captured_pod
from tests.cni.conftest import (
    MANAGED,
    NODE_IP_2,
    NODE_NAME,
    VIP,
    NetnsPair,
    agent_config,
    answer,
    dict_lookup,
    needs_netns,
    udp_exchange,
    udp_server,
)
from tests.integration.test_mesh_selection_traffic import binomial_bounds

pytestmark = needs_netns

SESSIONS = 400
"""Client sessions (each a new socket, so a new source port: the UDP proxy balances per session)."""
V2_SHARE = 0.2
FAILURE_PROBABILITY = 1e-9
BACKENDS = {"v1": "127.0.38.2", "v2": "127.0.38.3"}
"""Version → the IP of its one pod (on this host's loopback: Envoy's upstream sockets are made here)."""


def _route() -> dict[str, object]:
    return {
        "parentRefs": [{"group": "", "kind": "Service", "name": "echo", "port": 5300}],
        "rules": [
            {
                "backendRefs": [
                    {"name": "echo-v1", "port": 5300, "weight": 80},
                    {"name": "echo-v2", "port": 5300, "weight": 20},
                ]
            }
        ],
    }


async def test_a_udproute_splits_a_service_cluster_ip_by_weight_and_other_udp_passes_untouched(
    netns_pair: NetnsPair, short_dir: Path
) -> None:
    """400 sessions to the parent's ClusterIP:port are answered by v1's and v2's pods only, v2's count within the
    exact binomial bounds of 20% (p = 1e-9), every answer on the client's connected socket; the ClusterIP on
    another port and another address reach their real servers."""
    metadata = PodMetadata(
        service_account="web", labels=MANAGED, annotations={"config.aether.io/upstreams": "default/echo"}
    )
    config = agent_config(short_dir, lookup=dict_lookup({("default", "web-1"): metadata}), ack_wait=20.0)
    pod, node = netns_pair.pod_path, netns_pair.node_path
    netns_pair.exec(netns_pair.node, "ip", "addr", "add", f"{VIP}/32", "dev", "lo")
    port = pick_free_port()  # both pods' container port (each pod has its own IP)
    servers = {}
    for version, address in BACKENDS.items():
        servers[version] = trio.socket.socket(type=socket.SOCK_DGRAM)
        await servers[version].bind((address, port))
    udp = [ServicePort(port=5300, target_port=str(port), protocol="UDP")]
    services = [
        make_kube_service("echo", cluster_ip=VIP, selector={"app": "echo"}, ports=udp),
        make_kube_service(
            "echo-v1", cluster_ip="10.96.7.10", selector={"app": "echo", "version": "v1"}, ports=udp
        ),
        make_kube_service(
            "echo-v2", cluster_ip="10.96.7.11", selector={"app": "echo", "version": "v2"}, ports=udp
        ),
    ]
    other_port = await udp_server(node, (VIP, 9999))
    other_host = await udp_server(node, (NODE_IP_2, 7070))

    async def routed() -> bool:
        try:
            return (await udp_exchange(pod, (VIP, 5300), timeout=0.5)).split(b":")[0] in (b"v1", b"v2")
        except (trio.TooSlowError, ConnectionRefusedError):
            return False

    with servers["v1"], servers["v2"], other_port, other_host:
        async with trio.open_nursery() as nursery:
            for version, server in servers.items():
                nursery.start_soon(functools.partial(answer, server, version.encode(), forever=True))
            nursery.start_soon(functools.partial(answer, other_port, b"other-port", forever=True))
            nursery.start_soon(functools.partial(answer, other_host, b"other-host", forever=True))
            agent: RunningAgent = await nursery.start(functools.partial(serve_agent, config))
            bootstrap = ads_bootstrap(node_id=NODE_NAME, xds_unix_socket=short_dir / "xds.sock", delta=True)
            async with open_envoy(bootstrap, work_dir=short_dir / "envoy", wait_live=False):
                route = make_kube_object("echo", kind="UDPRoute", spec=_route())
                await learn_canary(agent, BACKENDS, services=services, objects=[route])
                await start_captured_pod(pod, short_dir / "cni.sock")
                await wait_for(routed, timeout=20)
                answers = collections.Counter(
                    [(await udp_exchange(pod, (VIP, 5300))).split(b":")[0] for _ in range(SESSIONS)]
                )
                assert set(answers) <= {b"v1", b"v2"}
                low, high = binomial_bounds(SESSIONS, V2_SHARE, failure=FAILURE_PROBABILITY)
                assert low <= answers[b"v2"] <= high, (answers, (low, high))
                assert await udp_exchange(pod, (VIP, 9999)) == b"other-port:ping"
                assert await udp_exchange(pod, (NODE_IP_2, 7070)) == b"other-host:ping"
            nursery.cancel_scope.cancel()
