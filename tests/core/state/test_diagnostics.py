"""Tests of `aether.core.state.diagnostics`: rejections kept per subject, bounded, and counted."""

from __future__ import annotations

import immutables

from aether.core.state import MAX_REJECTIONS, Diagnostics, Rejection, RejectionReason
from aether.testing import fold_events, pod_removed


def _rejection(subject: str, seq: int) -> Rejection:
    return Rejection(
        subject=subject, reason=RejectionReason.UNKNOWN_POD, message=f"{subject} is unknown", seq=seq
    )


def _full(order: range) -> Diagnostics:
    """Diagnostics holding MAX_REJECTIONS rejections with seqs 1..MAX_REJECTIONS, recorded in `order`."""
    diagnostics = Diagnostics()
    for seq in order:
        diagnostics = diagnostics.with_rejection(_rejection(f"pod/default/p-{seq:04d}", seq))
    return diagnostics


def test_a_rejection_is_recorded_under_its_subject_and_counted() -> None:
    """`with_rejection` records the rejection as its subject's and counts one more."""
    first = _rejection("pod/default/a", 1)
    assert Diagnostics().with_rejection(first) == Diagnostics(
        rejections=immutables.Map({"pod/default/a": first}), rejected_total=1
    )


def test_a_newer_rejection_of_the_same_subject_replaces_the_older() -> None:
    """A subject keeps only its latest rejection; the total counts both."""
    latest = _rejection("pod/default/a", 5)
    diagnostics = Diagnostics().with_rejection(_rejection("pod/default/a", 1)).with_rejection(latest)
    assert diagnostics == Diagnostics(rejections=immutables.Map({"pod/default/a": latest}), rejected_total=2)


def test_clearing_forgets_the_subject_and_keeps_the_total() -> None:
    """`cleared` forgets the subject's rejection; `rejected_total` stays."""
    kept = _rejection("pod/default/b", 2)
    diagnostics = Diagnostics().with_rejection(_rejection("pod/default/a", 1)).with_rejection(kept)
    assert diagnostics.cleared("pod/default/a") == Diagnostics(
        rejections=immutables.Map({"pod/default/b": kept}), rejected_total=2
    )


def test_clearing_a_subject_without_rejection_returns_the_same_diagnostics() -> None:
    """Clearing a subject that has no rejection changes nothing (the very same object comes back)."""
    diagnostics = Diagnostics().with_rejection(_rejection("pod/default/a", 1))
    assert diagnostics.cleared("pod/default/z") is diagnostics


def test_past_the_bound_the_lowest_seq_is_evicted() -> None:
    """At MAX_REJECTIONS, a new subject's rejection evicts the one with the lowest seq."""
    full = _full(range(1, MAX_REJECTIONS + 1))
    assert len(full.rejections) == MAX_REJECTIONS
    newest = _rejection("pod/default/new", MAX_REJECTIONS + 1)
    after = full.with_rejection(newest)
    assert len(after.rejections) == MAX_REJECTIONS
    assert "pod/default/p-0001" not in after.rejections
    assert after.rejections["pod/default/new"] == newest
    assert after.rejected_total == MAX_REJECTIONS + 1


def test_eviction_does_not_depend_on_the_order_rejections_were_recorded() -> None:
    """Recorded in ascending or descending seq order, the same rejection is evicted."""
    newest = _rejection("pod/default/new", MAX_REJECTIONS + 1)
    ascending = _full(range(1, MAX_REJECTIONS + 1)).with_rejection(newest)
    descending = _full(range(MAX_REJECTIONS, 0, -1)).with_rejection(newest)
    assert ascending == descending


def test_eviction_breaks_seq_ties_by_subject() -> None:
    """Between rejections of the same seq, the lowest subject is evicted."""
    diagnostics = Diagnostics()
    for index in range(MAX_REJECTIONS):
        diagnostics = diagnostics.with_rejection(_rejection(f"pod/default/p-{index:04d}", 1))
    after = diagnostics.with_rejection(_rejection("pod/default/new", 2))
    assert sorted(set(diagnostics.rejections) - set(after.rejections)) == ["pod/default/p-0000"]


def test_a_replacement_at_the_bound_evicts_nothing() -> None:
    """A new rejection of a subject already held does not grow the map, so nothing is evicted."""
    full = _full(range(1, MAX_REJECTIONS + 1))
    after = full.with_rejection(_rejection("pod/default/p-0001", MAX_REJECTIONS + 1))
    assert set(after.rejections) == set(full.rejections)


def test_folding_more_bad_events_than_the_bound_keeps_the_latest() -> None:
    """A flood of rejected events keeps the latest MAX_REJECTIONS subjects and counts them all."""
    events = [pod_removed(f"ghost-{index:04d}") for index in range(MAX_REJECTIONS + 2)]
    state = fold_events(*events)
    assert len(state.diagnostics.rejections) == MAX_REJECTIONS
    assert state.diagnostics.rejected_total == MAX_REJECTIONS + 2
    assert "pod/default/ghost-0000" not in state.diagnostics.rejections
    assert "pod/default/ghost-0001" not in state.diagnostics.rejections
    assert "pod/default/ghost-0002" in state.diagnostics.rejections


def test_rejection_reasons_are_their_wire_names() -> None:
    """Every reason's value is its CamelCase name, as status conditions and logs show it."""
    assert {reason.name: reason.value for reason in RejectionReason} == {
        "NOT_MANAGED": "NotManaged",
        "INVALID_ANNOTATION": "InvalidAnnotation",
        "INVALID_POD": "InvalidPod",
        "UNKNOWN_POD": "UnknownPod",
        "STALE_POD": "StalePod",
        "INVALID_ENDPOINT": "InvalidEndpoint",
        "INVALID_VERSION": "InvalidVersion",
        "STALE_VERSION": "StaleVersion",
        "UNKNOWN_SERVICE": "UnknownService",
        "UNKNOWN_ENDPOINT": "UnknownEndpoint",
        "INVALID_SERVICE": "InvalidService",
        "UNSUPPORTED_KIND": "UnsupportedKind",
        "INVALID_SPEC": "InvalidSpec",
        "STALE_OBJECT": "StaleObject",
        "UNKNOWN_OBJECT": "UnknownObject",
        "INVALID_MESH_CONFIG": "InvalidMeshConfig",
        "INVALID_SVID": "InvalidSvid",
        "UNKNOWN_SVID": "UnknownSvid",
        "INVALID_TRUST_BUNDLE": "InvalidTrustBundle",
        "UNKNOWN_TRUST_BUNDLE": "UnknownTrustBundle",
        "NOT_A_MESH_SERVICE": "NotAMeshService",
    }
