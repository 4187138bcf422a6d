"""Golden tests of the edge projection: `testdata/edge/<case>.in.yaml` (Kubernetes manifests) gives
`<case>.<kind>.out.yaml` (the edge snapshot's resources of one kind) and `<case>.status.out.yaml`.

A case is what `aether render --edge` reads (with the shared `testdata/edge/base.yaml`: the edge's GatewayClass,
backend pods and their Services), folded and projected by the same functions; outputs are its resources
as Envoy's YAML (proto field names), private keys redacted. `pytest tests/golden --update-golden` rewrites the
outputs and deletes orphans; review the diff like code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from aether.cli.render_command import (
    RenderRequest,
    render_snapshot,
    render_state,
    snapshot_document,
    status_document,
)
from aether.core.gateway import GatewayProjector, gateway_view
from aether.core.project.edge import EdgeOptions, edge_snapshot
from aether.core.project.edge_projector import EdgeProjector
from aether.core.snapshot import TYPE_ORDER
from aether.kube.manifests import ManifestDirectory

TESTDATA = Path(__file__).parent / "testdata" / "edge"
GATEWAY_TESTDATA = Path(__file__).parent / "testdata" / "gateway"
"""The Gateway API golden inputs (another suite's): read here as more edge inputs, for references only."""
KINDS = ("listeners", "routes", "clusters", "endpoints", "secrets")
CASES = sorted(path.name.removesuffix(".in.yaml") for path in TESTDATA.glob("*.in.yaml"))


def _dump(value: Any) -> str:
    plain = json.loads(json.dumps(value))  # protobuf's JSON holds OrderedDicts, which safe YAML refuses
    return yaml.safe_dump(plain, sort_keys=True, allow_unicode=True, default_flow_style=False)


def _named_clusters(document: Any, found: set[str]) -> set[str]:
    """Every cluster a resource document names: `cluster` fields (routes, mirrors, tcp_proxy) and weighted ones."""
    if isinstance(document, dict):
        for key, value in document.items():
            if key == "cluster" and isinstance(value, str):
                found.add(value)
            elif key == "weighted_clusters":
                found.update(item["name"] for item in value.get("clusters", []))
            _named_clusters(value, found)
    elif isinstance(document, list):
        for item in document:
            _named_clusters(item, found)
    return found


def _reading(directory: Path, case: str) -> ManifestDirectory:
    path = directory / f"{case}.in.yaml"
    base = directory / "base.yaml"
    return ManifestDirectory.parse({base.name: base.read_text(), path.name: path.read_text()})


def _edge(directory: Path, case: str) -> tuple[Any, Any, ManifestDirectory]:
    reading = _reading(directory, case)
    state = render_state(reading)
    snapshot = render_snapshot(state, RenderRequest(manifests=directory, edge=True))
    assert snapshot.consistent() == ()
    resources = snapshot_document(snapshot)["resources"]
    named = _named_clusters([resources["routes"], resources["listeners"]], set())
    assert sorted(named - {item["name"] for item in resources["clusters"]}) == [], (
        "a route names a missing cluster"
    )
    return state, resources, reading


def _outputs(case: str) -> dict[str, str]:
    state, resources, reading = _edge(TESTDATA, case)
    outputs = {kind: _dump(resources[kind]) for kind in KINDS}
    outputs["status"] = _dump(status_document(state, reading))
    return outputs


@pytest.mark.parametrize("case", CASES)
def test_edge_golden_case(case: str, update_golden: bool) -> None:
    """The edge projection of each case's manifests equals its golden outputs (and is consistent)."""
    for kind, rendered in _outputs(case).items():
        path = TESTDATA / f"{case}.{kind}.out.yaml"
        if update_golden:
            path.write_text(rendered)
        else:
            assert path.exists(), f"{path.name} is missing: run pytest tests/golden --update-golden"
            assert rendered == path.read_text(), f"{path.name} differs: review, then run --update-golden"


@pytest.mark.parametrize(
    "case", sorted(path.name.removesuffix(".in.yaml") for path in GATEWAY_TESTDATA.glob("*.in.yaml"))
)
def test_gateway_cases_project_edges_whose_routes_name_only_emitted_clusters(case: str) -> None:
    """Every Gateway API golden input, projected for the edge: consistent, and no route or proxy names a cluster
    the snapshot lacks (Envoy would answer 503, or refuse a static bootstrap)."""
    _edge(GATEWAY_TESTDATA, case)


def test_no_orphaned_edge_outputs(update_golden: bool) -> None:
    """Every output belongs to a case (with --update-golden, orphans are deleted)."""
    orphans = sorted(path for path in TESTDATA.glob("*.out.yaml") if path.name.split(".", 1)[0] not in CASES)
    if update_golden:
        for path in orphans:
            path.unlink()
    else:
        assert [path.name for path in orphans] == []


def test_there_are_edge_cases() -> None:
    """The suite found its inputs (a wrong directory would pass vacuously)."""
    assert len(CASES) >= 8


@pytest.mark.parametrize("cleartext", [False, True])
def test_one_edge_projector_fed_every_case_in_turn_gives_each_cases_snapshot(cleartext: bool) -> None:
    """A long-running edge's projectors (one Gateway projector, one edge projector) fed the states of every edge and
    Gateway API case one after another, and back, give each state exactly the snapshot `edge_snapshot` builds from
    scratch: every resource's bytes, digest and references, every type's version."""
    options = EdgeOptions(cleartext=cleartext)
    states = [
        render_state(_reading(directory, case))
        for directory in (TESTDATA, GATEWAY_TESTDATA)
        for case in sorted(path.name.removesuffix(".in.yaml") for path in directory.glob("*.in.yaml"))
    ]
    views = GatewayProjector()
    projector = EdgeProjector(node_id="edge", options=options)
    for state in [*states, *reversed(states)]:
        actual = projector.project(views.view(state), state)
        expected = edge_snapshot(gateway_view(state), state, node_id="edge", options=options)
        assert actual == expected
        for type_url in TYPE_ORDER:
            assert actual.version(type_url) == expected.version(type_url)
            assert {name: item.body for name, item in actual.of_type(type_url).items()} == {
                name: item.body for name, item in expected.of_type(type_url).items()
            }
