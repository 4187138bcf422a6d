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
from aether.kube.manifests import ManifestDirectory

TESTDATA = Path(__file__).parent / "testdata" / "edge"
KINDS = ("listeners", "routes", "clusters", "endpoints", "secrets")
CASES = sorted(path.name.removesuffix(".in.yaml") for path in TESTDATA.glob("*.in.yaml"))


def _dump(value: Any) -> str:
    plain = json.loads(json.dumps(value))  # protobuf's JSON holds OrderedDicts, which safe YAML refuses
    return yaml.safe_dump(plain, sort_keys=True, allow_unicode=True, default_flow_style=False)


def _outputs(case: str) -> dict[str, str]:
    path = TESTDATA / f"{case}.in.yaml"
    base = TESTDATA / "base.yaml"
    reading = ManifestDirectory.parse({base.name: base.read_text(), path.name: path.read_text()})
    state = render_state(reading)
    snapshot = render_snapshot(state, RenderRequest(manifests=TESTDATA, edge=True))
    assert snapshot.consistent() == ()
    resources = snapshot_document(snapshot)["resources"]
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
