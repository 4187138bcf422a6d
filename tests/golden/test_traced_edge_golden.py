"""Golden test of the edge's Envoy tracer: an edge case's manifests with a MeshConfig that enables tracing at 25%
and the collector's cluster declared (`EdgeOptions.collector_cluster`) give `testdata/traced/<case>.listeners.out.yaml`.

Every other line must be the untraced golden's: the test also checks that, with the `tracing` blocks taken out, the
listeners are exactly those of `testdata/edge/<case>.listeners.out.yaml`. `--update-golden` rewrites the output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml

from aether.cli.render_command import render_state, snapshot_document
from aether.core.events import Record
from aether.core.project.edge import EdgeOptions, project_edge
from aether.core.reduce import fold
from aether.envoy.bootstrap import OTEL_CLUSTER
from aether.kube.manifests import ManifestDirectory
from aether.testing import mesh_config_updated
from tests.golden.test_edge_golden import TESTDATA, _dump

TRACED = Path(__file__).parent / "testdata" / "traced"
CASES = (
    "http-listener-routes-its-host-and-answers-404-for-others",
    "https-listener-serves-the-certificate-of-each-hostname-by-sni",
)


def _traced_listeners(case: str) -> list[Any]:
    base, path = TESTDATA / "base.yaml", TESTDATA / f"{case}.in.yaml"
    state = render_state(ManifestDirectory.parse({base.name: base.read_text(), path.name: path.read_text()}))
    config = attrs.evolve(
        state.kube.mesh_config, tracing_enabled=True, trace_sample_per_million=250_000, generation=1
    )
    state = fold(state, Record(seq=state.seq + 1, event=mesh_config_updated(config)))
    assert state.kube.mesh_config.tracing_enabled
    snapshot = project_edge(state, node_id="edge", options=EdgeOptions(collector_cluster=OTEL_CLUSTER))
    listeners: list[Any] = snapshot_document(snapshot)["resources"]["listeners"]
    return listeners


def _untraced(document: Any) -> Any:
    if isinstance(document, dict):
        return {key: _untraced(value) for key, value in document.items() if key != "tracing"}
    if isinstance(document, list):
        return [_untraced(item) for item in document]
    return document


@pytest.mark.parametrize("case", CASES)
def test_traced_edge_listeners(case: str, update_golden: bool) -> None:
    """The traced listeners equal their golden output, and differ from the untraced golden only by `tracing`."""
    listeners = _traced_listeners(case)
    rendered = _dump(listeners)
    path = TRACED / f"{case}.listeners.out.yaml"
    if update_golden:
        path.write_text(rendered)
    else:
        assert rendered == path.read_text(), f"{path.name} differs: review, then run --update-golden"
    untraced = yaml.safe_load((TESTDATA / f"{case}.listeners.out.yaml").read_text())
    assert _untraced(yaml.safe_load(rendered)) == untraced
    assert rendered.count("envoy.tracers.opentelemetry") >= 1
    assert "service_name: aether-edge" in rendered
