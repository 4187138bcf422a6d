"""Tests of `aether.core.reduce.pods`: pods added, updated and removed on this node."""

from __future__ import annotations

import immutables
import pytest

from aether.core.events import HealthCheckMode, Pod, Protocol
from aether.core.state import Diagnostics, PodConfig, PodRecord, Rejection, RejectionReason, State
from aether.testing import (
    domain_of,
    fold_events,
    make_pod,
    node_capture_configured,
    pod_added,
    pod_removed,
    pod_updated,
)

WEB = make_pod("web-1", uid="uid-1")


def _with_web() -> State:
    return fold_events(pod_added(WEB))


def _rejected(
    subject: str, reason: RejectionReason, message: str, *, seq: int, total: int = 1
) -> Diagnostics:
    rejection = Rejection(subject=subject, reason=reason, message=message, seq=seq)
    return Diagnostics(rejections=immutables.Map({subject: rejection}), rejected_total=total)


def test_a_managed_pod_is_added_with_default_settings() -> None:
    """A managed pod without annotations is stored under its key with the default settings."""
    state = fold_events(pod_added(WEB))
    assert state == State(
        seq=1, pods=immutables.Map({"default/web-1": PodRecord(pod=WEB, config=PodConfig())})
    )
    assert state.pods["default/web-1"].service == "default/web"


def test_a_pod_is_added_with_the_settings_of_its_annotations() -> None:
    """The pod's mesh annotations become its settings."""
    pod = make_pod(
        annotations={
            "endpoint.aether.io/port": "9090",
            "endpoint.aether.io/ports": "9091, 9092=h2",
            "endpoint.aether.io/weight": "10",
            "endpoint.aether.io/protocol": "tcp",
            "endpoint.aether.io/health-check-mode": "active",
            "config.aether.io/upstreams": "db, shop/web",
        }
    )
    state = fold_events(pod_added(pod))
    config = PodConfig(
        port=9090,
        ports=(9090, 9091, 9092),
        weight=10,
        protocol=Protocol.TCP,
        upstreams=("default/db", "shop/web"),
        health_check_mode=HealthCheckMode.ACTIVE,
    )
    assert state.pods == immutables.Map({"default/web-1": PodRecord(pod=pod, config=config)})
    assert state.diagnostics == Diagnostics()


def test_adding_a_known_pod_again_replaces_it() -> None:
    """A second add of the same pod key replaces the stored pod (a re-ADD or a replay)."""
    moved = make_pod("web-1", uid="uid-2", ips=("10.0.0.9",))
    state = fold_events(pod_added(moved), state=_with_web())
    assert state.pods == immutables.Map({"default/web-1": PodRecord(pod=moved, config=PodConfig())})
    assert state.seq == 2


def test_an_update_without_a_sandbox_keeps_the_one_the_cni_reported() -> None:
    """The API never knows a pod's network namespace: its updates keep the one CNI ADD reported for the same
    incarnation; another incarnation (a new uid) does not inherit it."""
    sandboxed = make_pod("web-1", uid="uid-1", netns="/run/netns/cni-1", container_id="c1")
    relabelled = make_pod("web-1", uid="uid-1", labels={"aether.io/managed": "true", "tier": "front"})
    state = fold_events(pod_added(sandboxed), pod_updated(relabelled))
    kept = state.pods["default/web-1"].pod
    assert (kept.netns, kept.container_id, kept.labels["tier"]) == ("/run/netns/cni-1", "c1", "front")
    reborn = make_pod("web-1", uid="uid-2")
    assert fold_events(pod_updated(reborn), state=state).pods["default/web-1"].pod.netns == ""
    anonymous = make_pod("web-1", uid="")
    assert (
        fold_events(pod_updated(anonymous), state=state).pods["default/web-1"].pod.netns == "/run/netns/cni-1"
    )


def test_an_update_of_an_unknown_pod_adds_it() -> None:
    """`PodUpdated` for a pod never added upserts it (another source observed the add)."""
    state = fold_events(pod_updated(WEB))
    assert state == State(
        seq=1, pods=immutables.Map({"default/web-1": PodRecord(pod=WEB, config=PodConfig())})
    )


@pytest.mark.parametrize(
    ("pod", "message"),
    [
        (
            make_pod(namespace="Bad_NS"),
            "pod 'Bad_NS/web-1': namespace must be an RFC 1123 label (lowercase alphanumerics and '-', at most 63)"
            " (got 'Bad_NS')",
        ),
        (make_pod("-web"), "pod 'default/-web': pod name must be an RFC 1123 subdomain (got '-web')"),
        (
            make_pod(service_account="Web"),
            "pod 'default/web-1': service account must be an RFC 1123 subdomain (got 'Web')",
        ),
    ],
    ids=["namespace", "name", "service-account"],
)
def test_a_pod_with_an_invalid_identity_is_rejected_and_changes_nothing(pod: Pod, message: str) -> None:
    """A pod whose namespace, name or service account is invalid is rejected; the known pods stay."""
    before = _with_web()
    state = fold_events(pod_added(pod), state=before)
    assert domain_of(state) == domain_of(before)
    assert state.seq == 2
    assert state.diagnostics == _rejected(f"pod/{pod.key}", RejectionReason.INVALID_POD, message, seq=2)


@pytest.mark.parametrize(
    ("pod", "message"),
    [
        (
            make_pod(labels={}),
            "pod 'default/web-1': label 'aether.io/managed' must be 'true' to join the mesh (got None)",
        ),
        (
            make_pod(labels={"aether.io/managed": "yes"}),
            "pod 'default/web-1': label 'aether.io/managed' must be 'true' to join the mesh (got 'yes')",
        ),
        (
            make_pod(namespace="kube-system"),
            "pod 'kube-system/web-1': namespace 'kube-system' is never meshed",
        ),
        (
            make_pod(namespace="aether-system"),
            "pod 'aether-system/web-1': namespace 'aether-system' is never meshed",
        ),
        (
            make_pod(namespace="spire-server"),
            "pod 'spire-server/web-1': namespace 'spire-server' is never meshed",
        ),
    ],
    ids=["no-label", "label-not-true", "kube-system", "aether-system", "spire"],
)
def test_an_unmanaged_pod_is_rejected_as_not_managed(pod: Pod, message: str) -> None:
    """A pod without the managed label, or in a namespace never meshed, is not stored and is rejected."""
    state = fold_events(pod_added(pod))
    assert domain_of(state) == domain_of(State())
    assert state.diagnostics == _rejected(f"pod/{pod.key}", RejectionReason.NOT_MANAGED, message, seq=1)


def test_an_unmanaged_pod_is_not_managed_whatever_its_identity_says() -> None:
    """Outside the mesh comes first (as the CNI answers it: IGNORED, never refused): an unlabelled pod with an
    invalid service account is NotManaged, and a known record of it is dropped."""
    pod = make_pod("web-1", uid="uid-1", service_account="Web", labels={})
    state = fold_events(pod_updated(pod), state=_with_web())
    assert state.pods == immutables.Map()
    assert state.diagnostics == _rejected(
        "pod/default/web-1",
        RejectionReason.NOT_MANAGED,
        "pod 'default/web-1': label 'aether.io/managed' must be 'true' to join the mesh (got None)",
        seq=2,
    )


def test_a_known_pod_that_leaves_the_mesh_is_removed() -> None:
    """An update that drops the managed label removes the pod and records why."""
    state = fold_events(pod_updated(make_pod("web-1", uid="uid-1", labels={"app": "web"})), state=_with_web())
    assert state.pods == immutables.Map()
    assert state.diagnostics == _rejected(
        "pod/default/web-1",
        RejectionReason.NOT_MANAGED,
        "pod 'default/web-1': label 'aether.io/managed' must be 'true' to join the mesh (got None)",
        seq=2,
    )


def test_a_pod_with_invalid_annotations_is_stored_with_defaults_and_rejected() -> None:
    """Invalid annotations keep their defaults; the pod is stored and every problem is in one rejection."""
    pod = make_pod(
        annotations={
            "endpoint.aether.io/port": "http",
            "endpoint.aether.io/weight": "0",
            "endpoint.aether.io/protocol": "udp",
        }
    )
    state = fold_events(pod_added(pod))
    assert state.pods == immutables.Map({"default/web-1": PodRecord(pod=pod, config=PodConfig())})
    assert state.diagnostics == _rejected(
        "pod/default/web-1",
        RejectionReason.INVALID_ANNOTATION,
        "pod 'default/web-1': annotation 'endpoint.aether.io/port' must be an integer 1..65535 (got 'http');"
        " annotation 'endpoint.aether.io/weight' must be an integer 1..1000000 (got '0');"
        " annotation 'endpoint.aether.io/protocol' must be one of ['http', 'tcp'] (got 'udp')",
        seq=1,
    )


def test_a_later_valid_update_lifts_the_rejection_of_the_pod() -> None:
    """Once the pod's annotations are fixed, its rejection is lifted (the total keeps counting)."""
    bad = make_pod(annotations={"endpoint.aether.io/weight": "heavy"})
    good = make_pod(annotations={"endpoint.aether.io/weight": "7"})
    state = fold_events(pod_added(bad), pod_updated(good))
    assert state == State(
        seq=2,
        pods=immutables.Map({"default/web-1": PodRecord(pod=good, config=PodConfig(weight=7))}),
        diagnostics=Diagnostics(rejected_total=1),
    )


def test_a_known_pod_is_removed() -> None:
    """Removing a known pod forgets it."""
    state = fold_events(pod_removed("web-1"), state=_with_web())
    assert state == State(seq=2)


def test_a_pod_is_removed_when_the_uids_match() -> None:
    """A removal that names the known incarnation's uid removes the pod."""
    state = fold_events(pod_removed("web-1", uid="uid-1"), state=_with_web())
    assert state == State(seq=2)


def test_removing_an_unknown_pod_is_rejected() -> None:
    """Removing a pod this node does not know is a rejection; nothing else changes."""
    before = _with_web()
    state = fold_events(pod_removed("web-2"), state=before)
    assert domain_of(state) == domain_of(before)
    assert state.diagnostics == _rejected(
        "pod/default/web-2",
        RejectionReason.UNKNOWN_POD,
        "pod 'default/web-2' removed but not known on this node",
        seq=2,
    )


def test_removing_another_incarnation_of_a_pod_is_rejected() -> None:
    """A removal whose uid differs from the known pod's is stale: the pod stays."""
    before = _with_web()
    state = fold_events(pod_removed("web-1", uid="uid-0"), state=before)
    assert domain_of(state) == domain_of(before)
    assert state.diagnostics == _rejected(
        "pod/default/web-1",
        RejectionReason.STALE_POD,
        "pod 'default/web-1' removed with uid 'uid-0' but the known pod has uid 'uid-1'",
        seq=2,
    )


def test_a_removal_without_uid_removes_any_incarnation() -> None:
    """A removal with an empty uid removes the known pod whatever its uid."""
    assert fold_events(pod_removed("web-1", uid=""), state=_with_web()).pods == immutables.Map()


def test_a_removal_lifts_an_earlier_rejection_of_the_pod() -> None:
    """After a stale removal, the right removal applies and lifts the rejection."""
    state = fold_events(
        pod_removed("web-1", uid="uid-0"), pod_removed("web-1", uid="uid-1"), state=_with_web()
    )
    assert state == State(seq=3, diagnostics=Diagnostics(rejected_total=1))


def test_an_unmanaged_pod_keeps_the_rejections_of_other_subjects() -> None:
    """Rejecting one pod leaves another pod's rejection in place."""
    state = fold_events(pod_removed("ghost"), pod_added(make_pod("web-2", labels={})))
    assert sorted(state.diagnostics.rejections) == ["pod/default/ghost", "pod/default/web-2"]
    assert state.diagnostics.rejected_total == 2


def test_a_managed_pod_without_an_ip_is_rejected_until_it_has_one() -> None:
    """No IP: not stored, `InvalidPod` with the reason; the update that brings an IP adds it and lifts it."""
    state = fold_events(pod_added(make_pod("web-1", ips=())))
    assert state.pods == immutables.Map()
    rejection = state.diagnostics.rejections["pod/default/web-1"]
    assert (rejection.reason, rejection.message) == (
        RejectionReason.INVALID_POD,
        "pod 'default/web-1': has no IP address yet; it joins the mesh once one is assigned",
    )
    later = fold_events(pod_updated(make_pod("web-1", ips=("10.0.0.1",))), state=state)
    assert list(later.pods) == ["default/web-1"]
    assert "pod/default/web-1" not in later.diagnostics.rejections


def test_a_managed_pod_with_a_malformed_ip_is_rejected() -> None:
    """An IP that does not parse is named."""
    state = fold_events(pod_added(make_pod("web-1", ips=("10.0.0.1", "10.0.0.999"))))
    assert state.pods == immutables.Map()
    assert state.diagnostics.rejections["pod/default/web-1"].message == (
        "pod 'default/web-1': ip must be an IP address (got '10.0.0.999')"
    )


def test_a_managed_pod_with_a_zoned_ipv6_address_is_rejected() -> None:
    """An IPv6 address with a zone (`fe80::1%eth0`) is refused with the rule, as the registrar refuses it."""
    state = fold_events(pod_added(make_pod("web-1", ips=("fe80::1%eth0",))))
    assert state.pods == immutables.Map()
    assert state.diagnostics.rejections["pod/default/web-1"].message == (
        "pod 'default/web-1': ip must be an IPv6 address without a zone ('%...') (got 'fe80::1%eth0')"
    )


def test_a_node_capture_fact_is_recorded_and_withdrawn() -> None:
    """`NodeCaptureConfigured` adds the node to `captured_nodes` (once) and removes it when no longer captured."""
    captured = fold_events(node_capture_configured("node-a"), node_capture_configured("node-a"))
    assert captured.captured_nodes == frozenset({"node-a"})
    again = fold_events(node_capture_configured("node-a"), state=captured)
    assert again.captured_nodes is captured.captured_nodes  # unchanged: the same set, for identity checks
    released = fold_events(node_capture_configured("node-a", captured=False), state=captured)
    assert released.captured_nodes == frozenset()
    assert released.diagnostics == Diagnostics()
