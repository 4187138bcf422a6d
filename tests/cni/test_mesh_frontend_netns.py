"""GAMMA MeshFrontend end to end, in real network namespaces with a real Envoy: a captured pod's HTTP request sent
to a routed Service's ClusterIP takes that Service's route whatever its Host header says (by the Service's name, by
another Service's name, by the bare address), and reaches only the pods that Service selects, though both versions'
pods run as one service account (upstream conformance's shape)."""

from __future__ import annotations

import functools
from contextlib import AsyncExitStack
from pathlib import Path

import trio

from aether.agent.app import RunningAgent, serve_agent
from aether.cni.server import PodMetadata
from aether.core.events.kube import ServicePort
from aether.envoy.bootstrap import ads_bootstrap
from aether.envoy.process import open_envoy
from aether.http1 import HttpConnection, HttpResponse
from aether.testing import make_kube_object, make_kube_service
from aether.testing.envoy import wait_for
from aether.testing.h2c_upstream import open_h2c_upstream
from tests.cni.canary import learn_canary, start_captured_pod
from tests.cni.conftest import (
    MANAGED,
    NODE_NAME,
    VIP,
    NetnsPair,
    agent_config,
    dict_lookup,
    needs_netns,
    socket_in,
)

pytestmark = needs_netns

PODS = {"v1": "127.0.37.2", "v2": "127.0.37.3"}
"""Version → its pod's IP: its mesh inbound (18008) on this host's loopback, where Envoy's upstream sockets are made."""
MESH_INBOUND = 18008
REQUEST_TIMEOUT = 5.0


def _route() -> dict[str, object]:
    """Upstream's `mesh-frontend.yaml`: a route for echo-v2 that sets a response header (so its effect shows)."""
    return {
        "parentRefs": [{"group": "", "kind": "Service", "name": "echo-v2"}],
        "rules": [
            {
                "filters": [
                    {
                        "type": "ResponseHeaderModifier",
                        "responseHeaderModifier": {"set": [{"name": "X-Header-Set", "value": "set"}]},
                    }
                ],
                "backendRefs": [{"name": "echo-v2", "port": 80}],
            }
        ],
    }


async def _get(pod: Path, host: str) -> HttpResponse:
    """One HTTP/1.1 GET from a socket in the pod's namespace to echo-v2's ClusterIP, with `Host: host`."""
    with trio.fail_after(REQUEST_TIMEOUT):
        sock = socket_in(pod)
        await sock.connect((VIP, 80))
        async with trio.SocketStream(sock) as stream:
            connection = HttpConnection(stream, client=True, peer=f"{VIP}:80")
            await connection.send_request("GET", "/", headers={"host": host, "connection": "close"})
            return await connection.receive_response()


async def test_a_request_to_a_routed_service_address_takes_its_route_whatever_the_host(
    netns_pair: NetnsPair, short_dir: Path
) -> None:
    """To echo-v2's ClusterIP: with Host echo-v2, echo-v1 (another Service's name) or the address itself, the answer
    carries the route's header and comes from echo-v2's pod."""
    metadata = PodMetadata(
        service_account="web", labels=MANAGED, annotations={"config.aether.io/upstreams": "default/echo"}
    )
    config = agent_config(short_dir, lookup=dict_lookup({("default", "web-1"): metadata}), ack_wait=20.0)
    pod = netns_pair.pod_path
    http = [ServicePort(name="http", port=80, target_port="8080")]
    services = [
        make_kube_service(
            "echo-v1", cluster_ip="10.96.7.10", selector={"app": "echo", "version": "v1"}, ports=http
        ),
        make_kube_service("echo-v2", cluster_ip=VIP, selector={"app": "echo", "version": "v2"}, ports=http),
    ]

    async def routed() -> bool:
        try:
            return (await _get(pod, "echo-v2")).headers.get("x-header-set") == "set"
        except (trio.TooSlowError, OSError, ValueError):
            return False

    async with AsyncExitStack() as stack:
        for version, ip in PODS.items():
            await stack.enter_async_context(
                open_h2c_upstream(name=f"echo-{version}", host=ip, port=MESH_INBOUND)
            )
        async with trio.open_nursery() as nursery:
            agent: RunningAgent = await nursery.start(functools.partial(serve_agent, config))
            bootstrap = ads_bootstrap(node_id=NODE_NAME, xds_unix_socket=short_dir / "xds.sock", delta=True)
            async with open_envoy(bootstrap, work_dir=short_dir / "envoy", wait_live=False):
                # Everything is known before the pod starts: its capture listener is ACKed with the frontend's
                # chain, so no request of the test ever passes through to an address outside this machine.
                route = make_kube_object("mesh-split-v1", kind="HTTPRoute", spec=_route())
                await learn_canary(agent, PODS, services=services, objects=[route])
                await start_captured_pod(pod, short_dir / "cni.sock")
                await wait_for(routed, timeout=20)
                for host in ("echo-v2", "echo-v1", VIP, f"{VIP}:80", "echo-v2.default.svc.cluster.local"):
                    response = await _get(pod, host)
                    assert (response.status, response.headers.get("x-header-set")) == (200, "set"), host
                    assert response.headers.get("x-upstream-name") == "echo-v2", host
            nursery.cancel_scope.cancel()
