"""The test API server's discovery documents: what kubectl reads to map kinds to paths."""

from __future__ import annotations

from aether.kube.resources import BUILTIN_RESOURCES
from aether.testing.kubediscovery import api_versions, group_list, resource_list, served_resources


def test_groups_prefer_their_ga_version() -> None:
    """Each group lists its versions GA first, then beta, then alpha; the first is the preferred one."""
    gateway = next(
        group
        for group in group_list(BUILTIN_RESOURCES)["groups"]
        if group["name"] == "gateway.networking.k8s.io"
    )
    assert [version["version"] for version in gateway["versions"]] == ["v1", "v1beta1", "v1alpha2"]
    assert gateway["preferredVersion"] == {"groupVersion": "gateway.networking.k8s.io/v1", "version": "v1"}


def test_a_group_version_lists_its_kinds_and_their_status() -> None:
    """`/apis/apps/v1`: each kind with its scope, verbs and status subresource."""
    listed = resource_list(served_resources(), group="apps", version="v1")
    assert listed is not None
    assert listed["groupVersion"] == "apps/v1"
    assert [(entry["name"], entry["kind"], entry["namespaced"]) for entry in listed["resources"]] == [
        ("daemonsets", "DaemonSet", True),
        ("daemonsets/status", "DaemonSet", True),
        ("deployments", "Deployment", True),
        ("deployments/status", "Deployment", True),
    ]


def test_nothing_served_at_a_group_version_is_none() -> None:
    """An unknown group version has no document (the server answers 404)."""
    assert resource_list(served_resources(), group="batch", version="v1") is None


def test_the_core_group_is_v1() -> None:
    """`/api` names v1 and the server's address."""
    assert api_versions(address="127.0.0.1:6443")["versions"] == ["v1"]
