"""`aether edge --identity spire`: the edge's real Envoy takes its SVID and bundle over SDS from the SPIRE agent's
socket itself (here the faithful fake, which serves Envoy's SDS API there as SPIRE does), while its clusters, with
the backend's SPIFFE ID pinned inline, come from the edge over ADS.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import trio

from aether.edge import EdgeConfig, RunningEdge, serve_edge
from aether.envoy.bootstrap import SPIRE_SDS_CLUSTER, ads_bootstrap
from aether.envoy.process import open_envoy
from aether.identity.mint import TestCA
from aether.rpc.listen import ListenAddress
from aether.testing.envoy import wait_for
from aether.testing.spiffe import FakeWorkloadApi
from tests.edge.test_edge_role import CONVERGE, EDGE_ADDRESS, EDGE_ID, POD, ROUTES, _dynamic
from tests.integration.test_routing_traffic import free_port, write_manifests

pytestmark = pytest.mark.slow


def _secret_chain(dump: dict[str, Any], name: str) -> str:
    for item in _dynamic(dump, "SecretsConfigDump", "dynamic_active_secrets"):
        if item["name"] == name:
            chain: str = item["secret"]["tls_certificate"]["certificate_chain"].get("inline_bytes", "")
            return chain
    return ""


async def test_the_edge_envoy_fetches_its_svid_from_the_spire_agent_socket(tmp_path: Path) -> None:
    ca = TestCA("aether.internal")
    spire = FakeWorkloadApi(ca, svids=[ca.issue(EDGE_ID)])
    port = free_port(EDGE_ADDRESS)
    config = EdgeConfig(
        pod_name=POD,
        log_dir=tmp_path / "log",
        manifests=write_manifests(tmp_path / "manifests", ROUTES, port=port),
        xds=ListenAddress.unix(tmp_path / "xds.sock"),
        admin_socket=tmp_path / "admin.sock",
        bind=EDGE_ADDRESS,
        spire_sds=True,
        manifest_poll_interval=0.05,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(spire.serve, tmp_path / "spire.sock")
        edge: RunningEdge = await nursery.start(functools.partial(serve_edge, config))
        assert not edge.journal.state.identity.svids, "the edge itself holds no SVID: Envoy asks SPIRE"
        bootstrap = ads_bootstrap(
            node_id=POD,
            xds_unix_socket=tmp_path / "xds.sock",
            delta=True,
            spire_socket=tmp_path / "spire.sock",
        )
        async with open_envoy(
            bootstrap, work_dir=tmp_path / "envoy", wait_live=False, log_level="warning"
        ) as envoy:

            async def served(old: str = "") -> bool:
                dump = await envoy.config_dump()
                chain = _secret_chain(dump, EDGE_ID)
                bundle = [
                    item
                    for item in _dynamic(dump, "SecretsConfigDump", "dynamic_active_secrets")
                    if item["name"] == "spiffe://aether.internal"
                ]
                return bool(chain) and chain != old and bool(bundle)

            await wait_for(served, timeout=CONVERGE, interval=0.05)
            dump = await envoy.config_dump()
            (cluster,) = [
                item["cluster"]
                for item in _dynamic(dump, "ClustersConfigDump", "dynamic_active_clusters")
                if item["cluster"]["name"] == "alpha.default.aether.internal"
            ]
            context = cluster["transport_socket"]["typed_config"]["common_tls_context"]
            sds = context["tls_certificate_sds_secret_configs"][0]
            assert sds["name"] == EDGE_ID
            grpc = sds["sds_config"]["api_config_source"]["grpc_services"][0]
            assert grpc["envoy_grpc"]["cluster_name"] == SPIRE_SDS_CLUSTER
            sans = context["combined_validation_context"]["default_validation_context"][
                "match_typed_subject_alt_names"
            ]
            assert sans[0]["matcher"]["exact"] == "spiffe://aether.internal/ns/default/sa/alpha"
            # Rotation at SPIRE reaches Envoy without the edge.
            first = _secret_chain(dump, EDGE_ID)
            spire.set_svids([ca.issue(EDGE_ID)])
            await wait_for(functools.partial(served, first), timeout=CONVERGE, interval=0.05)
            assert spire.sds_nacks == []
            assert spire.calls.get("StreamSecrets", 0) >= 1
        nursery.cancel_scope.cancel()


async def test_the_edge_takes_its_svid_from_the_workload_api_and_serves_it(tmp_path: Path) -> None:
    """`spiffe_workload_socket`: the edge streams its own SVID and the bundle from the Workload API into its log and
    serves them to its Envoy over ADS, like the SVID files; a rotation there reaches Envoy."""
    ca = TestCA("aether.internal")
    workload = FakeWorkloadApi(ca, svids=[ca.issue(EDGE_ID)])
    port = free_port(EDGE_ADDRESS)
    config = EdgeConfig(
        pod_name=POD,
        log_dir=tmp_path / "log",
        manifests=write_manifests(tmp_path / "manifests", ROUTES, port=port),
        xds=ListenAddress.unix(tmp_path / "xds.sock"),
        admin_socket=tmp_path / "admin.sock",
        bind=EDGE_ADDRESS,
        spiffe_workload_socket=tmp_path / "workload.sock",
        manifest_poll_interval=0.05,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(workload.serve, tmp_path / "workload.sock")
        await nursery.start(functools.partial(serve_edge, config))
        bootstrap = ads_bootstrap(node_id=POD, xds_unix_socket=tmp_path / "xds.sock", delta=True)
        async with open_envoy(
            bootstrap, work_dir=tmp_path / "envoy", wait_live=False, log_level="warning"
        ) as envoy:

            async def served(old: str = "") -> bool:
                chain = _secret_chain(await envoy.config_dump(), EDGE_ID)
                return bool(chain) and chain != old

            await wait_for(served, timeout=CONVERGE, interval=0.05)
            first = _secret_chain(await envoy.config_dump(), EDGE_ID)
            workload.set_svids([ca.issue(EDGE_ID)])
            await wait_for(functools.partial(served, first), timeout=CONVERGE, interval=0.05)
        nursery.cancel_scope.cancel()
