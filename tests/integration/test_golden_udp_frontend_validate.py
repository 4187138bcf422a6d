"""The golden node cases of GAMMA UDPRoutes and frontends pass real Envoy's validation: the UDP listener to a
UDPRoute's locality-weighted cluster, and the capture listener's chain per routed Service address with its inline
route table. The cases' placeholder certificates are left out (Envoy would parse them): the node projects in
plaintext, and every listener and cluster is the same."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from aether.core.project import project_node
from aether.core.snapshot import CLUSTER_TYPE, LISTENER_TYPE
from aether.testing import AT, fold_events, mesh_config_updated
from tests.core.project._helpers import NODE, messages
from tests.golden.test_golden import TESTDATA, _event
from tests.integration.test_projection_validate import validate

CASES = {
    "gamma-udproute-splits-a-service-between-its-versions": (
        "udp_client-0.default_10.96.4.1_53",
        "udproute:dns.default",
    ),
    "gamma-route-applies-to-its-frontend-service-address": (
        "capture_client-0.mesh",
        "default.mesh.aether.internal",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_case_passes_envoy_validation(case: str, tmp_path: Path) -> None:
    """Envoy accepts the case's whole snapshot (its listener and cluster of interest included)."""
    document = yaml.safe_load((TESTDATA / f"{case}.in.yaml").read_text())
    calls = [call for call in document["events"] if "svid_rotated" not in call]
    state = fold_events(mesh_config_updated(), *(_event(call) for call in calls))
    snapshot = project_node(state, node_name=NODE, now=AT)
    assert snapshot.consistent() == ()
    listener, cluster = CASES[case]
    assert listener in messages(snapshot, LISTENER_TYPE)
    assert cluster in messages(snapshot, CLUSTER_TYPE)
    validate(snapshot, tmp_path)
