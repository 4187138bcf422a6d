"""Node snapshots with GAMMA routes pass real Envoy's validation: every golden GAMMA case's routes, on a realistic
node whose pods call the routed services, loaded with `validate_clusters` on (every backend has its cluster)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from aether.core.events import Event
from aether.core.project import project_node
from aether.core.snapshot import ROUTE_TYPE
from aether.testing import AT, fold_events, make_pod, pod_added
from tests.core.project._helpers import NODE, messages
from tests.golden.gateway_manifests import manifest_events, read_documents
from tests.golden.test_gateway_golden import CASES, TESTDATA
from tests.integration.test_projection_validate import realistic_events, validate


def gamma_events(
    cases: Iterable[str], *, upstreams: str = "default/web, default/api, default/shop-sa", netns: str = ""
) -> list[Event]:
    """The golden `cases`' objects, and a pod of node-a calling `upstreams` (in local mode unless `netns`)."""
    documents = read_documents(
        (TESTDATA / "base.yaml").read_text(), *((TESTDATA / f"{case}.in.yaml").read_text() for case in cases)
    )
    # The golden inputs' pods are in local mode on node-a already; a caller of every routed service joins them.
    caller = make_pod(
        "caller-0",
        namespace="default",
        service_account="caller",
        node_name=NODE,
        ips=("10.0.9.9",),
        netns=netns,
        annotations={"config.aether.io/upstreams": upstreams},
    )
    return [*manifest_events(documents), pod_added(caller)]


def test_gamma_cases_on_a_realistic_node_pass_envoy_validation(tmp_path: Path) -> None:
    """All GAMMA golden cases at once: their routes replace the services' routes and Envoy accepts the snapshot."""
    events = realistic_events(tmp_path, identities=True)
    for case in CASES:
        if case.startswith("gamma-"):
            events += gamma_events([case])
    state = fold_events(*events)
    snapshot = project_node(state, node_name=NODE, now=AT)
    assert snapshot.consistent() == ()
    (web,) = [
        vhost
        for vhost in messages(snapshot, ROUTE_TYPE)["out_http"].virtual_hosts
        if vhost.name == "web.default.aether.internal"
    ]
    assert web.routes
    assert all(route.name.startswith(("HTTPRoute/", "GRPCRoute/")) for route in web.routes)
    validate(snapshot, tmp_path)
