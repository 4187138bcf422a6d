"""`kubectl apply -k manifests/overlays/default` against the test API server (`python -m aether.testing.kubeapi`)
creates every object, and a second apply changes nothing.

kubectl runs with `--validate=false`: client-side validation downloads the server's whole OpenAPI document, which
the test server does not serve (it validates no fields, so it must not advertise `fieldValidation` either); the
objects' schemas are checked by tests/manifests/test_schemas.py instead.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from aether.testing.kubediscovery import served_resources
from tests.manifests.rendered import Object, name_of
from tests.needs import needs

pytestmark = needs("kubectl")

START_TIMEOUT = 60.0
APPLY_TIMEOUT = 120
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{{name: test, cluster: {{server: "{url}"}}}}]
users: [{{name: test, user: {{}}}}]
contexts: [{{name: test, context: {{cluster: test, user: test}}}}]
current-context: test
"""


@pytest.fixture
def kube_api() -> Iterator[str]:
    """A standalone test API server on a free loopback port; its URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "aether.testing.kubeapi", "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], START_TIMEOUT)
        assert ready, "the test API server printed no URL"
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url + (process.stderr.read() if process.stderr else "")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def _kubectl(kubeconfig: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *argv],
        capture_output=True,
        text=True,
        timeout=APPLY_TIMEOUT,
        check=False,
    )


def _stored(url: str, obj: Object) -> Object:
    [resource] = [
        resource
        for resource in served_resources()
        if (resource.api_version, resource.kind) == (obj["apiVersion"], obj["kind"])
    ]
    namespace = obj["metadata"].get("namespace") if resource.namespaced else None
    path = f"{resource.collection_path(namespace=namespace)}/{obj['metadata']['name']}"
    with urllib.request.urlopen(url + path, timeout=10) as response:
        stored: Object = json.load(response)
    return stored


def test_apply_creates_every_object(
    kube_api: str, tmp_path: Path, manifests_copy: Path, rendered: dict[str, list[Object]]
) -> None:
    """Every object of the default overlay is created as rendered; applying again leaves each unchanged."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG.format(url=kube_api))
    overlay = str(manifests_copy / "overlays" / "default")
    objects = rendered["default"]

    first = _kubectl(kubeconfig, "apply", "-k", overlay, "--validate=false")
    assert first.returncode == 0, first.stderr
    assert len(first.stdout.splitlines()) == len(objects)
    assert all(line.endswith(" created") for line in first.stdout.splitlines()), first.stdout
    for obj in objects:
        stored = _stored(kube_api, obj)
        for field in set(obj) - {"metadata", "apiVersion", "kind"}:
            assert stored[field] == obj[field], f"{name_of(obj)}: {field}"
        assert stored["metadata"]["labels"] == obj["metadata"]["labels"], name_of(obj)

    second = _kubectl(kubeconfig, "apply", "-k", overlay, "--validate=false")
    assert second.returncode == 0, second.stderr
    assert all(line.endswith(" unchanged") for line in second.stdout.splitlines()), second.stdout
