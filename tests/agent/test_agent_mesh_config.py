"""`aether agent --mesh-config FILE`: the projected MeshConfig is folded into the node's log, and a restart with the
same file appends nothing."""

from __future__ import annotations

import functools
from pathlib import Path

import trio

from aether.agent import AgentConfig, RunningAgent, serve_agent
from aether.rpc.listen import ListenAddress
from aether.testing.envoy import wait_for

CONVERGE = 10


async def test_the_agent_folds_the_projected_mesh_config(tmp_path: Path) -> None:
    mesh_config = tmp_path / "mesh-config.yaml"
    mesh_config.write_text("meshDomain: corp.mesh\nonDemandTtlSeconds: 30\n")
    config = AgentConfig(
        node_name="node-a",
        log_dir=tmp_path / "log",
        xds=ListenAddress.unix(tmp_path / "xds.sock"),
        admin_socket=tmp_path / "admin.sock",
        mesh_config=mesh_config,
    )

    async def run() -> tuple[str, int, int]:
        async with trio.open_nursery() as nursery:
            agent: RunningAgent = await nursery.start(functools.partial(serve_agent, config))

            async def in_force() -> bool:
                return agent.journal.state.kube.mesh_config.mesh_domain == "corp.mesh"

            await wait_for(in_force, timeout=CONVERGE)
            state = agent.journal.state
            nursery.cancel_scope.cancel()
        return state.kube.mesh_config.mesh_domain, state.kube.mesh_config.on_demand_ttl_seconds, state.seq

    first = await run()
    assert first[:2] == ("corp.mesh", 30)
    assert await run() == first
