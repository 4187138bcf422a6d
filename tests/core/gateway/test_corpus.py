"""Invariants of the Gateway API view over every golden input (the corpus of `tests/golden/testdata/gateway`).

The golden tests pin the exact outputs; these hold what must be true of any output: it is deterministic and does
not depend on the order objects were observed in, every route forwards to a cluster the view declares (or answers
itself), every object of ours has a status, and no domain repeats on a port.
"""

from __future__ import annotations

import pytest

from aether.core.gateway import GatewayView, gateway_view, ir
from aether.core.mesh_names import http_cluster_name
from aether.testing import fold_events
from tests.golden.gateway_manifests import manifest_events, read_documents
from tests.golden.test_gateway_golden import CASES, TESTDATA, project_case


def _clusters(route: ir.HTTPRoute) -> set[str]:
    names = set(route.clusters)
    assert names or not isinstance(route.action, ir.Forward), "a forwarding route names at least one cluster"
    return names


def _reversed_view(case: str) -> GatewayView:
    documents = read_documents(
        (TESTDATA / "base.yaml").read_text(), (TESTDATA / f"{case}.in.yaml").read_text()
    )
    events = manifest_events(documents)
    return gateway_view(fold_events(*reversed(events)))


@pytest.mark.parametrize("case", CASES)
def test_view_is_deterministic_and_order_independent(case: str) -> None:
    """The same objects give the same view, whatever order they were observed in."""
    assert project_case(case) == project_case(case)
    assert _reversed_view(case) == project_case(case)


@pytest.mark.parametrize("case", CASES)
def test_every_route_names_a_declared_cluster_or_answers_itself(case: str) -> None:
    """Edge routes name only `backend_clusters` (UDP routes: their `udp_clusters`); mesh routes only the clusters of
    their `backend_services`."""
    view = project_case(case)
    for listener in view.edge_listeners:
        for vhost in listener.virtual_hosts:
            for route in vhost.routes:
                assert _clusters(route) <= view.backend_clusters
        for l4 in listener.l4_routes:
            if (
                listener.protocol == "UDP"
            ):  # through the route's own weighted cluster, which the view declares
                assert view.udp_clusters[l4.route].route == l4.route
                continue
            assert {item.cluster for item in l4.backends if item.cluster} <= view.backend_clusters
    for service, routing in view.mesh_routes.items():
        assert routing.service == service
        allowed = {
            http_cluster_name(item, mesh_domain="aether.internal") for item in routing.backend_services
        }
        for route in routing.all_routes:
            assert _clusters(route) <= allowed
        assert set(routing.backend_services) <= view.mesh_backend_services


@pytest.mark.parametrize("case", CASES)
def test_no_domain_repeats_on_a_port(case: str) -> None:
    """Envoy never receives one domain twice on a port."""
    view = project_case(case)
    seen: dict[int, list[str]] = {}
    for listener in view.edge_listeners:
        for vhost in listener.virtual_hosts:
            seen.setdefault(listener.port, []).extend(vhost.domains)
    for domains in seen.values():
        assert len(domains) == len(set(domains))


@pytest.mark.parametrize("case", CASES)
def test_every_route_of_ours_has_a_status(case: str) -> None:
    """Each route object appears in the status map, with conditions observed at its generation."""
    view = project_case(case)
    for key, status in view.status.items():
        assert key == f"{status.kind}/{status.namespace}/{status.name}"
        conditions = [*status.conditions, *(c for p in status.parents for c in p.conditions)]
        conditions += [c for listener in status.listeners for c in listener.conditions]
        assert all(item.observed_generation == status.generation for item in conditions)
        assert all(item.status in ("True", "False") for item in conditions)
