"""The overlays of `manifests/` as `kubectl kustomize` renders them, and the walks the manifest tests share."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
OVERLAYS = ("default", "etcd")
"""Every overlay of `manifests/overlays/` (a test checks that the list is complete)."""
KUSTOMIZE_TIMEOUT = 120

Object = dict[str, Any]


def prepared_manifests(directory: Path) -> Path:
    """Copy `manifests/` into `directory`, with the etcd overlay's `etcd.env` written from its example."""
    copied = directory / "manifests"
    shutil.copytree(MANIFESTS, copied, ignore=shutil.ignore_patterns("etcd.env"))
    etcd = copied / "overlays" / "etcd"
    shutil.copy(etcd / "etcd.env.example", etcd / "etcd.env")
    return copied


def kustomize(overlay: Path) -> subprocess.CompletedProcess[str]:
    """Run `kubectl kustomize overlay`."""
    return subprocess.run(
        ["kubectl", "kustomize", str(overlay)],
        capture_output=True,
        text=True,
        timeout=KUSTOMIZE_TIMEOUT,
        check=False,
    )


def render(overlay: Path) -> list[Object]:
    """The objects `kubectl kustomize overlay` renders (it must succeed)."""
    done = kustomize(overlay)
    assert done.returncode == 0, f"kubectl kustomize {overlay}: {done.stderr}"
    return [document for document in yaml.safe_load_all(done.stdout) if document]


def name_of(obj: Object) -> str:
    """`Kind namespace/name`, for messages."""
    metadata = obj["metadata"]
    namespace = metadata.get("namespace")
    return f"{obj['kind']} {namespace + '/' if namespace else ''}{metadata['name']}"


WORKLOAD_KINDS = ("DaemonSet", "Deployment")


def pod_specs(objects: list[Object]) -> Iterator[tuple[Object, Object]]:
    """Each workload and its pod spec."""
    for obj in objects:
        if obj["kind"] in WORKLOAD_KINDS:
            yield obj, obj["spec"]["template"]["spec"]


def containers(objects: list[Object]) -> Iterator[tuple[Object, Object, Object]]:
    """Each workload, its pod spec and each of its containers (init containers first)."""
    for workload, spec in pod_specs(objects):
        for container in (*spec.get("initContainers", ()), *spec["containers"]):
            yield workload, spec, container
