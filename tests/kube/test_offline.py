"""Offline folding: pods joined as the CNI would join them, and the pods a render cannot place."""

from __future__ import annotations

from aether.core.events import MeshConfig, MeshConfigUpdated, Pod, PodAdded, PodUpdated
from aether.kube.offline import addressless_pods, cni_joined, cni_netns

MANAGED = {"aether.io/managed": "true"}


def _added(pod: Pod) -> PodAdded:
    return PodAdded(observed_at=0, source="directory", pod=pod)


def test_a_pods_namespace_path_is_the_runtimes_kind_and_the_same_every_time() -> None:
    """`/var/run/netns/cni-<uuid>` from the uid (a new incarnation, a new sandbox), else from namespace/name."""
    by_name = Pod(namespace="shop", name="web-1")
    assert cni_netns(by_name) == cni_netns(Pod(namespace="shop", name="web-1", ips=("10.0.0.1",)))
    assert cni_netns(by_name).startswith("/var/run/netns/cni-")
    assert cni_netns(by_name) != cni_netns(Pod(namespace="shop", name="web-2"))
    assert cni_netns(Pod(namespace="shop", name="web-1", uid="u1")) != cni_netns(
        Pod(namespace="shop", name="web-1", uid="u2")
    )


def test_cni_joined_gives_each_pod_a_namespace_and_keeps_a_given_one() -> None:
    config = MeshConfigUpdated(observed_at=0, source="directory", config=MeshConfig())
    given = Pod(namespace="shop", name="db-0", netns="/run/netns/db")
    joined = cni_joined(
        [
            config,
            _added(Pod(namespace="shop", name="web-1")),
            PodUpdated(observed_at=0, source="x", pod=given),
        ]
    )
    assert joined[0] is config
    assert [event.pod.netns for event in joined[1:]] == [  # type: ignore[attr-defined]
        cni_netns(Pod(namespace="shop", name="web-1")),
        "/run/netns/db",
    ]


def test_addressless_pods_are_the_meshed_valid_ones_without_an_ip() -> None:
    events = [
        _added(Pod(namespace="shop", name="web-1", labels=MANAGED)),
        _added(Pod(namespace="shop", name="web-2", labels=MANAGED, ips=("10.0.0.2",))),
        _added(Pod(namespace="shop", name="other")),
        _added(Pod(namespace="kube-system", name="dns", labels=MANAGED)),
        _added(Pod(namespace="shop", name="Bad_Name", labels=MANAGED)),
    ]
    assert [pod.key for pod in addressless_pods(events)] == ["shop/web-1"]
