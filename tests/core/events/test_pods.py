"""Tests of `aether.core.events.pods`: the pod value and the subjects of pod events."""

from __future__ import annotations

from typing import Any

import immutables

from aether.core.events import Pod
from aether.testing import make_pod, pod_added, pod_removed, pod_updated


def test_a_pod_key_is_namespace_slash_name() -> None:
    """`Pod.key` is `<namespace>/<name>`."""
    assert make_pod("web-1", namespace="shop").key == "shop/web-1"


def test_a_pod_freezes_its_maps_and_lists() -> None:
    """Labels and annotations become immutable maps, IPs a tuple; defaults are empty."""
    ips: Any = ["10.0.0.1"]  # a list on purpose: the converter makes it a tuple
    pod = Pod(namespace="default", name="web-1", labels={"app": "web"}, ips=ips)
    assert pod.labels == immutables.Map({"app": "web"})
    assert isinstance(pod.labels, immutables.Map)
    assert pod.ips == ("10.0.0.1",)
    assert (pod.annotations, pod.service_account, pod.uid) == (immutables.Map(), "default", "")


def test_pod_events_are_about_the_pod() -> None:
    """Added, updated and removed events all have the subject `pod/<namespace>/<name>`."""
    pod = make_pod("web-1", namespace="shop")
    assert pod_added(pod).subject == "pod/shop/web-1"
    assert pod_updated(pod).subject == "pod/shop/web-1"
    assert pod_removed("web-1", namespace="shop").subject == "pod/shop/web-1"
