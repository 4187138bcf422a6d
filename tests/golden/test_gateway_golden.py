"""Golden tests of the Gateway API view: `testdata/gateway/<case>.in.yaml` (Kubernetes objects, after the shared
`base.yaml`) gives `<case>.routes.out.yaml` (GAMMA routes per mesh service, edge listeners with their virtual hosts
and L4 routes, the clusters they name; routes as `aether.core.project.gateway_routes` spells them for Envoy) and
`<case>.status.out.yaml` (every object's computed status).

`pytest tests/golden --update-golden` rewrites the outputs and deletes orphans; review the diff like code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml
from google.protobuf import json_format

from aether.core.gateway import GatewayView, MeshRouting, gateway_view
from aether.core.project.gateway_routes import envoy_route_list, envoy_virtual_host
from aether.testing import fold_events
from tests.golden.gateway_manifests import manifest_events, read_documents

TESTDATA = Path(__file__).parent / "testdata" / "gateway"
CASES = sorted(path.name.removesuffix(".in.yaml") for path in TESTDATA.glob("*.in.yaml"))
OUTPUTS = ("routes", "status")


def _message(message: Any) -> dict[str, Any]:
    # Through JSON: packed `Any` fields come back as ordered dicts, which YAML would not write plainly.
    rendered: dict[str, Any] = json.loads(
        json.dumps(json_format.MessageToDict(message, preserving_proto_field_name=True))
    )
    return rendered


def _mesh_l4(view: GatewayView) -> dict[str, Any]:
    """GAMMA L4 routing per mesh service; the key is left out of cases without any (most of them)."""
    if not view.mesh_l4:
        return {}
    return {
        "mesh_l4": {
            service: {
                "destinations": [attrs.asdict(destination) for destination in routing.destinations],
                "backend_services": list(routing.backend_services),
            }
            for service, routing in sorted(view.mesh_l4.items())
        }
    }


def _mesh_udp(view: GatewayView) -> dict[str, Any]:
    """GAMMA UDP routing per mesh service and the edge's UDP route clusters; left out of cases without them."""
    found: dict[str, Any] = {}
    if view.mesh_udp:
        found["mesh_udp"] = {
            service: {
                "destinations": [attrs.asdict(destination) for destination in routing.destinations],
                "backend_services": list(routing.backend_services),
            }
            for service, routing in sorted(view.mesh_udp.items())
        }
    if view.udp_clusters:
        found["udp_clusters"] = {key: attrs.asdict(item) for key, item in sorted(view.udp_clusters.items())}
    return found


def _ports(routing: MeshRouting) -> dict[str, Any]:
    """The routes per Service port (MeshPorts); left out of cases whose routes name no port (most of them)."""
    if not routing.ports:
        return {}
    return {
        "every_port": routing.every_port,
        "ports": {
            item.port: [_message(route) for route in envoy_route_list(item.all_routes, mesh=True)]
            for item in routing.ports
        },
    }


def _routes(view: GatewayView) -> dict[str, Any]:
    return {
        **_mesh_l4(view),
        **_mesh_udp(view),
        "mesh": {
            service: {
                "grpc": [_message(route) for route in envoy_route_list(routing.grpc_routes, mesh=True)],
                "http": [_message(route) for route in envoy_route_list(routing.http_routes, mesh=True)],
                "backend_services": list(routing.backend_services),
                "routes": list(routing.routes),
                **_ports(routing),
            }
            for service, routing in sorted(view.mesh_routes.items())
        },
        "edge": [
            {
                "gateway": listener.gateway,
                "name": listener.name,
                "port": listener.port,
                "protocol": listener.protocol,
                "hostname": listener.hostname,
                "tls_mode": listener.tls_mode,
                "certificates": list(listener.certificates),
                "virtual_hosts": [_message(envoy_virtual_host(vhost)) for vhost in listener.virtual_hosts],
                "l4_routes": [attrs.asdict(route) for route in listener.l4_routes],
            }
            for listener in view.edge_listeners
        ],
        "backend_clusters": sorted(view.backend_clusters),
        "backend_services": sorted(view.backend_services),
        "mesh_backend_services": sorted(view.mesh_backend_services),
    }


def _status(view: GatewayView) -> dict[str, Any]:
    return {key: attrs.asdict(status) for key, status in sorted(view.status.items())}


def _dump(value: Any) -> str:
    return yaml.safe_dump(value, sort_keys=True, allow_unicode=True, width=120)


def project_case(name: str) -> GatewayView:
    """Return the view of one case (base objects first)."""
    documents = read_documents(
        (TESTDATA / "base.yaml").read_text(), (TESTDATA / f"{name}.in.yaml").read_text()
    )
    state = fold_events(*manifest_events(documents))
    assert not state.diagnostics.rejections, (
        f"case {name!r}: an input event was rejected: {state.diagnostics}"
    )
    return gateway_view(state)


@pytest.mark.parametrize("case", CASES)
def test_gateway_golden_case(case: str, update_golden: bool) -> None:
    """The view of each case's objects equals its golden routes and status."""
    view = project_case(case)
    for output, rendered in (("routes", _dump(_routes(view))), ("status", _dump(_status(view)))):
        path = TESTDATA / f"{case}.{output}.out.yaml"
        if update_golden:
            path.write_text(rendered)
        else:
            assert path.exists(), f"{path.name} is missing: run pytest tests/golden --update-golden"
            assert rendered == path.read_text(), f"{path.name} differs: review, then run --update-golden"


def test_no_orphaned_gateway_outputs(update_golden: bool) -> None:
    """Every output belongs to a case (with --update-golden, orphans are deleted)."""
    orphans = sorted(path for path in TESTDATA.glob("*.out.yaml") if path.name.split(".", 1)[0] not in CASES)
    if update_golden:
        for path in orphans:
            path.unlink()
    else:
        assert [path.name for path in orphans] == []


def test_there_are_sixty_gateway_cases() -> None:
    """The suite covers at least sixty cases (a wrong directory would pass vacuously)."""
    assert len(CASES) >= 60
