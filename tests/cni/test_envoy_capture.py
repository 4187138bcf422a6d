"""End to end with a real Envoy: ADD returns after Envoy ACKed the pod's listeners, which it binds inside the pod's
network namespace, and a captured dial from the pod lands on Envoy's transparent capture listener."""

from __future__ import annotations

import functools
from pathlib import Path

import trio

from aether.agent.app import RunningAgent, serve_agent
from aether.cni.server import PodMetadata
from aether.envoy.bootstrap import ads_bootstrap
from aether.envoy.process import open_envoy
from aether.testing.envoy import wait_for
from tests.cni.conftest import (
    MANAGED,
    NODE_NAME,
    NetnsPair,
    PluginRun,
    agent_config,
    dict_lookup,
    environment,
    needs_netns,
    network_config,
    prev_result,
    run_cni_process,
    socket_in,
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
                environment("ADD", netns=netns_pair.pod_path), network_config(config.cni_socket)
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
