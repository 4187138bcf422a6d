"""`aether edge --mesh-config FILE`: the projected MeshConfig is folded into the edge's log; a restart with the same
file appends nothing; a bad file leaves the config in force (no Envoy needed: the log is what is checked)."""

from __future__ import annotations

import functools
from pathlib import Path

import trio

from aether.edge import EdgeConfig, RunningEdge, serve_edge
from aether.rpc.listen import ListenAddress
from aether.testing.envoy import wait_for
from tests.integration.test_routing_traffic import free_port, http_route, write_manifests

CONVERGE = 10
ROUTES = http_route("web", "web.example", "  - backendRefs: [{name: alpha, port: 80}]\n")


async def test_the_edge_folds_the_projected_mesh_config_and_keeps_the_last_good(tmp_path: Path) -> None:
    mesh_config = tmp_path / "mesh-config" / "mesh-config.yaml"
    mesh_config.parent.mkdir()
    mesh_config.write_text("meshDomain: corp.mesh\ntrustDomain: corp\n")
    config = EdgeConfig(
        pod_name="aether-edge-0",
        log_dir=tmp_path / "log",
        manifests=write_manifests(tmp_path / "manifests", ROUTES, port=free_port()),
        xds=ListenAddress.unix(tmp_path / "xds.sock"),
        admin_socket=tmp_path / "admin.sock",
        bind="127.0.31.3",
        cleartext=True,
        manifest_poll_interval=60,
        mesh_config=mesh_config,
    )

    async def run(then: str | None = None) -> tuple[str, int]:
        """Start the edge until the file's config is in force (and, with `then`, write a bad file and wait for its
        refusal); return the mesh domain in force and the log's seq."""
        async with trio.open_nursery() as nursery:
            edge: RunningEdge = await nursery.start(functools.partial(serve_edge, config))

            async def in_force() -> bool:
                return edge.journal.state.kube.mesh_config.trust_domain == "corp"

            await wait_for(in_force, timeout=CONVERGE)
            if then is not None:
                source = edge.mesh_config
                assert source is not None
                await trio.to_thread.run_sync(mesh_config.write_text, then)

                async def refused() -> bool:
                    return source.statistics().failures == 1

                await wait_for(refused, timeout=CONVERGE)
                assert "not YAML" in source.statistics().problem
            state = edge.journal.state
            nursery.cancel_scope.cancel()
        return state.kube.mesh_config.mesh_domain, state.seq

    domain, seq = await run()
    assert domain == "corp.mesh"
    assert await run() == ("corp.mesh", seq)  # the same file after a restart: nothing appended
    domain, _ = await run(then="meshDomain: [broken\n")
    assert domain == "corp.mesh"
