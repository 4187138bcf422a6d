"""The directory source: file edits become the events a watch would give; bad files never lose objects."""

from __future__ import annotations

from pathlib import Path

from aether.core.events import GatewayObjectDeleted, GatewayObjectUpserted, PodAdded, PodRemoved
from aether.demo.source import DirectorySource

ROUTE = """\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: shop}
spec:
  parentRefs: [{group: "", kind: Service, name: catalog}]
"""
POD = """\
apiVersion: v1
kind: Pod
metadata: {name: web-1, namespace: shop, labels: {aether.io/managed: "true"}}
spec: {nodeName: demo, serviceAccountName: web}
status: {podIP: 127.0.10.5}
"""


def _kinds(events: tuple[object, ...]) -> list[str]:
    return [type(event).__name__ for event in events]


def test_edits_renames_and_removals_become_upserts_and_deletions(tmp_path: Path) -> None:
    (tmp_path / "route.yaml").write_text(ROUTE)
    (tmp_path / "pod.yaml").write_text(POD)
    source = DirectorySource(directory=tmp_path)
    assert _kinds(source.poll(observed_at=1)) == ["GatewayObjectUpserted", "PodAdded"]  # in key order
    assert source.poll(observed_at=2) == ()  # nothing changed: nothing read, nothing sent

    (tmp_path / "route.yaml").write_text(ROUTE + "  hostnames: [a.example]\n")
    (changed,) = source.poll(observed_at=3)
    assert isinstance(changed, GatewayObjectUpserted)
    assert "a.example" in changed.object.spec_json

    (tmp_path / "pod.yaml").rename(tmp_path / ".pod.yaml")  # hidden: the pod is deleted
    (removed,) = source.poll(observed_at=4)
    assert isinstance(removed, PodRemoved)
    assert (removed.namespace, removed.name) == ("shop", "web-1")
    (tmp_path / ".pod.yaml").rename(tmp_path / "pod.yaml")
    (added,) = source.poll(observed_at=5)
    assert isinstance(added, PodAdded)

    (tmp_path / "route.yaml").unlink()
    (deleted,) = source.poll(observed_at=6)
    assert isinstance(deleted, GatewayObjectDeleted)
    assert (source.readings, source.events_sent, source.last_change_ns) == (5, 6, 6)


def test_a_file_that_is_not_yaml_keeps_the_last_good_objects_and_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "route.yaml").write_text(ROUTE)
    source = DirectorySource(directory=tmp_path)
    source.poll(observed_at=1)
    (tmp_path / "route.yaml").write_text(ROUTE + "---\nspec: [unclosed\n")
    assert source.poll(observed_at=2) == ()
    assert source.error is not None
    assert source.error.startswith("manifest route.yaml document 1: not YAML")
    assert list(source.reading.objects) == ["HTTPRoute/shop/r"]
    (tmp_path / "route.yaml").write_text(ROUTE)
    assert source.poll(observed_at=3) == ()  # back to the last good text: nothing to send
    assert source.error is None


def test_a_document_that_is_not_an_object_keeps_what_it_defined_before(tmp_path: Path) -> None:
    (tmp_path / "pod.yaml").write_text(POD)
    source = DirectorySource(directory=tmp_path)
    source.poll(observed_at=1)
    (tmp_path / "pod.yaml").write_text(POD.replace("kind: Pod", "kind: [Pod]"))  # a typo while editing
    assert source.poll(observed_at=2) == ()
    assert list(source.reading.objects) == ["Pod/shop/web-1"]
    (problem,) = source.problems
    assert problem.startswith("pod.yaml document 0: ")
