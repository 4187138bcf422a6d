"""`aether edge` end to end: manifests and SVID files in, the edge snapshot served over xDS to a real Envoy.

The first test runs with the edge's SVID (mTLS towards backends: checked in Envoy's config, the SDS secret active);
the second in cleartext, where traffic flows through the served config to an h2c backend, and an edited manifest
reaches Envoy without a restart.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from aether.cli import main
from aether.edge import EdgeConfig, RunningEdge, serve_edge
from aether.envoy.bootstrap import ads_bootstrap
from aether.envoy.process import Envoy, open_envoy
from aether.http1 import http_get
from aether.identity.mint import TestCA, write_bundle, write_svid
from aether.rpc.listen import ListenAddress
from aether.testing.envoy import wait_for
from aether.testing.h2c_upstream import open_h2c_upstream
from tests.integration.test_routing_traffic import (
    MESH_INBOUND,
    free_port,
    http_route,
    write_manifests,
)

pytestmark = pytest.mark.slow

POD = "aether-edge-0"
CONVERGE = 10
EDGE_ADDRESS = "127.0.31.2"
"""Where this test's edge binds: an address of its own, so its fixed readiness port (18021) meets no other test."""
EDGE_ID = "spiffe://aether.internal/ns/aether-system/sa/aether-edge"
ROUTES = http_route("web", "web.example", "  - backendRefs: [{name: alpha, port: 80}]\n")


def _dynamic(dump: dict[str, Any], config_type: str, key: str) -> list[Any]:
    for config in dump["configs"]:
        if config["@type"].endswith(config_type):
            return list(config.get(key, []))
    return []


@asynccontextmanager
async def open_running_edge(
    tmp_path: Path, *, port: int, svids: Path | None
) -> AsyncIterator[tuple[RunningEdge, Envoy]]:
    config = EdgeConfig(
        pod_name=POD,
        log_dir=tmp_path / "log",
        manifests=write_manifests(tmp_path / "manifests", ROUTES, port=port),
        xds=ListenAddress.unix(tmp_path / "xds.sock"),
        admin_socket=tmp_path / "admin.sock",
        svid_dir=svids,
        bind=EDGE_ADDRESS,
        cleartext=svids is None,
        manifest_poll_interval=0.05,
    )
    async with trio.open_nursery() as nursery:
        edge: RunningEdge = await nursery.start(functools.partial(serve_edge, config))
        async with open_edge_envoy(tmp_path, node_id=POD) as envoy:
            yield edge, envoy
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def open_edge_envoy(tmp_path: Path, *, node_id: str) -> AsyncIterator[Envoy]:
    """A real Envoy (delta ADS) on the xDS socket `tmp_path / "xds.sock"` of an edge serving `node_id`."""
    bootstrap = ads_bootstrap(node_id=node_id, xds_unix_socket=tmp_path / "xds.sock", delta=True)
    async with open_envoy(
        bootstrap, work_dir=tmp_path / "envoy", wait_live=False, log_level="warning"
    ) as envoy:
        yield envoy


async def test_the_edge_serves_its_listeners_and_presents_its_svid_to_backends(tmp_path: Path) -> None:
    """With SVID files: Envoy gets `edge_<port>` and the readiness listener (which answers 200), the backend's
    cluster presents the edge's SVID and pins the backend's ID, and the SVID's SDS secret is active."""
    ca = TestCA("aether.internal")
    svids = tmp_path / "svids"
    svids.mkdir()
    write_bundle(svids, ca.bundle_pem)
    write_svid(svids, owner="aether-system/aether-edge", content=ca.issue(EDGE_ID))
    port = free_port(EDGE_ADDRESS)
    async with open_running_edge(tmp_path, port=port, svids=svids) as (_, envoy):

        async def served() -> bool:
            dump = await envoy.config_dump()
            names = {item["name"] for item in _dynamic(dump, "ListenersConfigDump", "dynamic_listeners")}
            secrets = {item["name"] for item in _dynamic(dump, "SecretsConfigDump", "dynamic_active_secrets")}
            return {f"edge_{port}", "edge_readiness"} <= names and EDGE_ID in secrets

        async def readiness_listens() -> bool:
            # A listener shows as active in the config dump a moment before Envoy's workers bind it.
            with trio.socket.socket() as probe, contextlib.suppress(ConnectionRefusedError):
                await probe.connect((EDGE_ADDRESS, 18021))
                return True
            return False

        await wait_for(served, timeout=CONVERGE)
        await wait_for(readiness_listens, timeout=CONVERGE)
        ready = await http_get(EDGE_ADDRESS, 18021, "/aether/readyz")
        assert (ready.status, ready.body) == (200, b"ready\n")
        dump = await envoy.config_dump()
        (cluster,) = [
            item["cluster"]
            for item in _dynamic(dump, "ClustersConfigDump", "dynamic_active_clusters")
            if item["cluster"]["name"] == "alpha.default.aether.internal"
        ]
        context = cluster["transport_socket"]["typed_config"]["common_tls_context"]
        assert context["tls_certificate_sds_secret_configs"][0]["name"] == EDGE_ID
        sans = context["combined_validation_context"]["default_validation_context"][
            "match_typed_subject_alt_names"
        ]
        assert sans[0]["matcher"]["exact"] == "spiffe://aether.internal/ns/default/sa/alpha"


async def test_traffic_flows_through_the_served_config_and_follows_manifest_edits(tmp_path: Path) -> None:
    """In cleartext, a request for the route's host lands on its backend; editing the route's backend in the
    manifest file moves traffic to the new backend without restarting anything."""
    port = free_port(EDGE_ADDRESS)
    async with (
        open_h2c_upstream(name="alpha", host="127.0.30.1", port=MESH_INBOUND),
        open_h2c_upstream(name="beta", host="127.0.30.2", port=MESH_INBOUND),
        open_running_edge(tmp_path, port=port, svids=None) as (edge, _),
    ):

        async def lands_on(name: str) -> bool:
            try:
                response = await http_get(EDGE_ADDRESS, port, "/", headers={"host": "web.example"})
            except OSError:
                return False
            return response.headers.get("x-upstream-name") == name

        await wait_for(functools.partial(lands_on, "alpha"), timeout=CONVERGE)
        routes = tmp_path / "manifests" / "routes.yaml"
        routes.write_text(routes.read_text().replace("name: alpha", "name: beta"))
        await wait_for(functools.partial(lands_on, "beta"), timeout=CONVERGE)
        assert edge.manifests is not None
        assert edge.manifests.statistics().readings >= 2


def test_the_edge_command_exits_1_when_its_manifests_cannot_be_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`aether edge` with YAML that does not parse stops at start-up, naming the file and document."""
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "bad.yaml").write_text("kind: [unclosed\n")
    arguments = ["edge", "--pod-name", POD, "--log-dir", str(tmp_path / "log"), "--manifests", str(manifests)]
    arguments += ["--xds", f"unix:{tmp_path / 'xds.sock'}", "--admin-socket", str(tmp_path / "admin.sock")]
    assert main(arguments) == 1
    assert capsys.readouterr().err.startswith("aether edge: error: manifest bad.yaml document 0: not YAML (")


async def test_a_restarted_edge_appends_nothing_for_unchanged_manifests_and_deletes_what_went_meanwhile(
    tmp_path: Path,
) -> None:
    """Each start replays the log and compares the manifests with it: an unchanged directory appends no event,
    and a route file deleted while the edge was down is deleted from the log at the next start."""
    manifests = write_manifests(tmp_path / "manifests", ROUTES, port=free_port())
    config = EdgeConfig(
        pod_name=POD,
        log_dir=tmp_path / "log",
        manifests=manifests,
        xds=ListenAddress.unix(tmp_path / "xds.sock"),
        admin_socket=tmp_path / "admin.sock",
        bind=EDGE_ADDRESS,
        cleartext=True,
        manifest_poll_interval=60,
    )

    async def start() -> tuple[int, int, list[str]]:
        """Run the edge until its first reading is in the log; return the events sent, the seq and the routes."""
        async with trio.open_nursery() as nursery:
            edge: RunningEdge = await nursery.start(functools.partial(serve_edge, config))
            assert edge.manifests is not None
            sent = edge.manifests.statistics().events_sent
            replayed = edge.journal.replay.state.seq

            async def folded() -> bool:
                return edge.journal.state.seq == replayed + sent

            await wait_for(folded, timeout=CONVERGE)
            routes = [key for key in edge.journal.state.kube.gateway_objects if key.startswith("HTTPRoute/")]
            nursery.cancel_scope.cancel()
        return sent, edge.journal.state.seq, routes

    sent, seq, routes = await start()
    assert (sent > 0, routes) == (True, ["HTTPRoute/default/web"])
    assert await start() == (0, seq, routes)
    (manifests / "routes.yaml").unlink()
    assert await start() == (1, seq + 1, [])
    assert await start() == (0, seq + 1, [])


OUT_OF_RANGE = """\
apiVersion: v1
kind: Service
metadata: {name: huge-generation, namespace: default, generation: 1000000000000000000000000000}
---
apiVersion: v1
kind: Service
metadata: {name: negative-port, namespace: default}
spec: {ports: [{port: -1}]}
---
apiVersion: v1
kind: Service
metadata: {name: wide-port, namespace: default}
spec: {ports: [{port: 18446744073709551616}]}
"""


async def test_integers_the_log_cannot_hold_are_refused_by_document_and_the_edge_starts(
    tmp_path: Path,
) -> None:
    """A generation past int64 and Service ports past uint32 are refused where the manifest is read, each naming
    its object and field; the edge starts and serves the rest (nothing reaches the journal's encoder)."""
    manifests = write_manifests(tmp_path / "manifests", ROUTES, port=free_port())
    (manifests / "wide.yaml").write_text(OUT_OF_RANGE)
    config = EdgeConfig(
        pod_name=POD,
        log_dir=tmp_path / "log",
        manifests=manifests,
        xds=ListenAddress.unix(tmp_path / "xds.sock"),
        admin_socket=tmp_path / "admin.sock",
        bind=EDGE_ADDRESS,
        cleartext=True,
        manifest_poll_interval=60,
    )
    async with trio.open_nursery() as nursery:
        edge: RunningEdge = await nursery.start(functools.partial(serve_edge, config))
        assert edge.manifests is not None
        assert edge.manifests.problems == (
            "wide.yaml document 0: Service/default/huge-generation: not a kubernetes object: metadata.generation "
            "must be an integer from 0 to 9223372036854775807 (got 1000000000000000000000000000)",
            "wide.yaml document 1: Service/default/negative-port: not a kubernetes object: spec.ports[].port "
            "must be an integer from 0 to 4294967295 (got -1)",
            "wide.yaml document 2: Service/default/wide-port: not a kubernetes object: spec.ports[].port "
            "must be an integer from 0 to 4294967295 (got 18446744073709551616)",
        )
        sent = edge.manifests.statistics().events_sent

        async def folded() -> bool:
            return edge.journal.state.seq == sent

        await wait_for(folded, timeout=CONVERGE)
        assert edge.journal.statistics().refused == 0
        assert "Service/default/alpha" in edge.journal.state.kube.services
        nursery.cancel_scope.cancel()
