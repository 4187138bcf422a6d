"""Tests of `aether.kube.manifests` and `aether.kube.offline`: manifest directories to objects, events and state."""

from __future__ import annotations

from pathlib import Path

import pytest

from aether.core.events import (
    Endpoint,
    EndpointsSnapshotCompleted,
    EndpointsSnapshotReceived,
    GatewayObjectDeleted,
    GatewayObjectUpserted,
    KubeServiceUpserted,
    PodAdded,
    PodUpdated,
    TlsSecretDeleted,
)
from aether.core.state.pods import PodConfig
from aether.kube.manifests import ManifestDirectory, ManifestError, ManifestProblem
from aether.kube.offline import fold_offline, registry_events

AT = 1_800_000_000_000_000_000

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: web-1
  namespace: shop
  labels: {aether.io/managed: "true"}
  annotations: {endpoint.aether.io/port: "9090", endpoint.aether.io/ports: "9091"}
spec: {nodeName: node-a, serviceAccountName: web}
status: {podIP: 10.0.0.7}
"""
ROUTE = """\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: canary, namespace: shop}
spec: {parentRefs: [{name: web, kind: Service, group: ""}]}
"""
SERVICE = """\
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {selector: {app: web}, ports: [{port: 80}]}
"""
SECRET = """\
apiVersion: v1
kind: Secret
type: kubernetes.io/tls
metadata: {name: cert, namespace: shop}
stringData: {tls.crt: CERT, tls.key: KEY}
"""


BAD_GENERATION = POD.replace("name: web-1", "name: web-1\n  generation: x")


def _write(directory: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return directory


def _kinds(events: tuple[object, ...]) -> list[tuple[str, str]]:
    return [(type(event).__name__, event.subject) for event in events]  # type: ignore[attr-defined]


def test_a_directory_reads_into_objects_keyed_and_events_in_key_order(tmp_path: Path) -> None:
    """Multi-document files, nested directories, Lists and empty documents read into objects sorted by key."""
    _write(
        tmp_path,
        {
            "b/app.yaml": f"---\n{POD}---\n{SERVICE}---\n",
            "a.yml": f"apiVersion: v1\nkind: List\nitems:\n- {ROUTE.replace(chr(10), chr(10) + '  ')}",
            "z.json": '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ignored"}}',
            ".hidden/skip.yaml": "not: [valid",
            "README.md": "not a manifest",
        },
    )
    reading = ManifestDirectory.read(tmp_path)
    assert [(item.key, item.path, item.index) for item in reading.objects.values()] == [
        ("ConfigMap/default/ignored", "z.json", 0),
        ("HTTPRoute/shop/canary", "a.yml", 0),
        ("Pod/shop/web-1", "b/app.yaml", 0),
        ("Service/shop/web", "b/app.yaml", 1),
    ]
    assert reading.problems == ()
    assert _kinds(reading.events(source="directory", observed_at=AT)) == [
        ("GatewayObjectUpserted", "HTTPRoute/shop/canary"),
        ("PodAdded", "pod/shop/web-1"),
        ("KubeServiceUpserted", "Service/shop/web"),
    ]


def test_documents_that_are_not_objects_are_problems_and_the_rest_still_reads(tmp_path: Path) -> None:
    """A non-object document, a field of the wrong type and a duplicate are reported with file and index."""
    _write(
        tmp_path,
        {
            "one.yaml": f"just a string\n---\n{SERVICE}---\n{BAD_GENERATION}",
            "two.yaml": f"{SERVICE}",
        },
    )
    reading = ManifestDirectory.read(tmp_path)
    assert list(reading.objects) == ["Service/shop/web"]
    assert [str(problem) for problem in reading.problems] == [
        "one.yaml document 0: not a kubernetes object: object must be a mapping with apiVersion, kind and "
        "metadata (got 'just a string')",
        "one.yaml document 2: Pod/shop/web-1: not a kubernetes object: metadata.generation must be an integer (got 'x')",
        "two.yaml document 0: Service/shop/web is already defined in one.yaml document 1; skipped",
    ]
    assert reading.problems[0] == ManifestProblem(
        path="one.yaml", index=0, message=reading.problems[0].message
    )


def test_yaml_that_does_not_parse_names_the_file_and_document(tmp_path: Path) -> None:
    """Unreadable input raises: the error names the file and the index of the document that failed."""
    _write(tmp_path, {"bad.yaml": f"{SERVICE}---\nkind: [unclosed\n"})
    with pytest.raises(ManifestError) as caught:
        ManifestDirectory.read(tmp_path)
    assert (caught.value.path, caught.value.index) == ("bad.yaml", 1)
    assert str(caught.value).startswith("manifest bad.yaml document 1: not YAML (")


def test_a_missing_directory_is_an_error(tmp_path: Path) -> None:
    """A directory that does not exist cannot be read."""
    with pytest.raises(ManifestError, match=r"^manifest .*/nowhere: not a directory$"):
        ManifestDirectory.read(tmp_path / "nowhere")


def test_changes_since_gives_deletions_then_upserts_and_nothing_for_unchanged_objects(tmp_path: Path) -> None:
    """Between two readings: removed objects are deleted, changed ones upserted (pods updated), moved ones left."""
    before = ManifestDirectory.read(
        _write(tmp_path / "v1", {"a.yaml": f"{POD}---\n{ROUTE}---\n{SECRET}", "s.yaml": SERVICE})
    )
    changed_pod = POD.replace('"9090"', '"9092"')
    opaque = SECRET.replace("kubernetes.io/tls", "Opaque")
    after = ManifestDirectory.read(
        _write(tmp_path / "v2", {"moved.yaml": SERVICE, "a.yaml": f"{changed_pod}---\n{opaque}"})
    )
    events = after.changes_since(before, source="directory", observed_at=AT)
    assert _kinds(events) == [
        ("GatewayObjectDeleted", "HTTPRoute/shop/canary"),
        ("PodUpdated", "pod/shop/web-1"),
        ("TlsSecretDeleted", "Secret/shop/cert"),
    ]
    assert isinstance(events[0], GatewayObjectDeleted)
    assert isinstance(events[1], PodUpdated)
    assert isinstance(events[2], TlsSecretDeleted)
    assert after.changes_since(after, source="directory", observed_at=AT) == ()


def test_the_same_directory_reads_to_the_same_events(tmp_path: Path) -> None:
    """Reading is deterministic: two readings give equal events."""
    _write(tmp_path, {"a.yaml": f"{POD}---\n{ROUTE}", "b.yaml": SERVICE})
    first = ManifestDirectory.read(tmp_path).events(source="directory", observed_at=AT)
    assert first == ManifestDirectory.read(tmp_path).events(source="directory", observed_at=AT)
    assert [type(event) for event in first] == [GatewayObjectUpserted, PodAdded, KubeServiceUpserted]


def test_offline_folding_registers_every_meshed_pod_as_the_registrar_would(tmp_path: Path) -> None:
    """Pods of the manifests become one registry snapshot: service, first IP, annotated ports, labels, healthy."""
    unmanaged = POD.replace("web-1", "web-2").replace('aether.io/managed: "true"', "app: x")
    reading = ManifestDirectory.read(_write(tmp_path, {"a.yaml": f"{POD}---\n{unmanaged}"}))
    state = fold_offline(
        reading.events(source="directory", observed_at=AT), source="directory", observed_at=AT
    )
    endpoint = Endpoint(
        service="shop/web",
        ip="10.0.0.7",
        port=9090,
        ports=(9091,),
        health_check_mode=PodConfig().health_check_mode,
        namespace="shop",
        pod_name="web-1",
        node_name="node-a",
        labels={"aether.io/managed": "true"},
    )
    assert registry_events(state, source="directory", observed_at=AT) == (
        EndpointsSnapshotReceived(
            observed_at=AT, source="directory", version="1", endpoints=(endpoint,), services=("shop/web",)
        ),
        EndpointsSnapshotCompleted(observed_at=AT, source="directory", version="1"),
    )
    assert state.registry.synced
    assert dict(state.registry.endpoints["shop/web"]) == {(endpoint.protocol, "10.0.0.7"): endpoint}
