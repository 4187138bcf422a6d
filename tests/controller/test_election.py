"""The leader-election machine, input by input (its safety over any schedule is in property_tests)."""

from __future__ import annotations

import pytest

from aether.controller.election import (
    Deposed,
    Elected,
    ElectionTiming,
    LeaderElection,
    LeaseRecord,
    ReadLease,
    WriteLease,
)

TIMING = ElectionTiming(lease_duration=15.0, renew_deadline=10.0, retry_period=2.0)


def _record(holder: str, version: str, *, transitions: int = 0) -> LeaseRecord:
    return LeaseRecord(holder=holder, lease_seconds=15, transitions=transitions, resource_version=version)


def _leader(at: float = 0.0) -> LeaderElection:
    machine = LeaderElection(identity="pod-a", timing=TIMING)
    assert machine.tick(at) == [ReadLease()]
    machine.lease_read(at, None)
    assert machine.write_succeeded(at, _record("pod-a", "1")) == [Elected(at=at)]
    return machine


def test_a_missing_lease_is_created_and_its_creator_leads() -> None:
    """No Lease: the machine creates one naming itself, and leads once the create succeeds."""
    machine = LeaderElection(identity="pod-a", timing=TIMING)
    assert machine.tick(0.0) == [ReadLease()]
    assert machine.lease_read(0.0, None) == [
        WriteLease(holder="pod-a", lease_seconds=15, transitions=0, resource_version="", acquired=True)
    ]
    assert not machine.leading(0.0)
    assert machine.write_succeeded(0.5, _record("pod-a", "1")) == [Elected(at=0.5)]
    assert machine.leading(0.5)


def test_a_held_lease_is_taken_only_once_unchanged_for_its_duration_by_our_clock() -> None:
    """Another holder's record must stay unchanged for the lease duration, counted from when we first saw it."""
    machine = LeaderElection(identity="pod-b", timing=TIMING)
    machine.tick(100.0)
    assert machine.lease_read(100.0, _record("pod-a", "7")) == []
    assert machine.next_wakeup() == 102.0
    machine.tick(114.0)
    assert machine.lease_read(114.0, _record("pod-a", "7")) == []
    assert machine.tick(115.0) == []
    assert machine.tick(116.0) == [ReadLease()]
    assert machine.lease_read(116.0, _record("pod-a", "7")) == [
        WriteLease(holder="pod-b", lease_seconds=15, transitions=1, resource_version="7", acquired=True)
    ]


def test_a_changed_record_restarts_the_wait() -> None:
    """A renewed record (new resourceVersion) is observed afresh: the wait starts again."""
    machine = LeaderElection(identity="pod-b", timing=TIMING)
    machine.tick(0.0)
    machine.lease_read(0.0, _record("pod-a", "7"))
    machine.tick(10.0)
    machine.lease_read(10.0, _record("pod-a", "8"))
    machine.tick(20.0)
    assert machine.lease_read(20.0, _record("pod-a", "8")) == []


def test_the_leader_renews_every_retry_period_keeping_its_acquisition() -> None:
    """The leader's next read comes a retry period later and its write renews (not a new acquisition)."""
    machine = _leader()
    assert machine.tick(1.0) == []
    assert machine.tick(2.0) == [ReadLease()]
    assert machine.lease_read(2.0, _record("pod-a", "1")) == [
        WriteLease(holder="pod-a", lease_seconds=15, transitions=0, resource_version="1", acquired=False)
    ]
    assert machine.write_succeeded(2.1, _record("pod-a", "2")) == []
    assert machine.leading(11.9)
    assert not machine.leading(12.0)


def test_the_leader_steps_down_when_renews_fail_past_the_deadline() -> None:
    """Failed renews keep the leader leading until the renew deadline, then it is deposed."""
    machine = _leader()
    machine.tick(2.0)
    assert machine.read_failed(2.0) == []
    machine.tick(4.0)
    machine.lease_read(4.0, _record("pod-a", "1"))
    assert machine.write_failed(4.0, conflict=False) == []
    assert machine.next_wakeup() == 6.0
    assert machine.leading(9.9)
    assert machine.tick(10.0) == [
        Deposed(at=10.0, reason="the lease was not renewed within 10.0 s"),
        ReadLease(),
    ]


def test_a_conflict_is_re_read_at_once_and_another_holder_deposes_the_leader() -> None:
    """409 on a renew re-reads now; finding another holder ends the leadership."""
    machine = _leader()
    machine.tick(2.0)
    machine.lease_read(2.0, _record("pod-a", "1"))
    machine.write_failed(2.0, conflict=True)
    assert machine.tick(2.0) == [ReadLease()]
    assert machine.lease_read(2.0, _record("pod-b", "5", transitions=1)) == [
        Deposed(at=2.0, reason="the lease is held by 'pod-b'")
    ]


def test_a_write_answered_past_the_deadline_does_not_elect() -> None:
    """A write that took longer than the renew deadline cannot be trusted to still hold the lease."""
    machine = LeaderElection(identity="pod-a", timing=TIMING)
    machine.tick(0.0)
    machine.lease_read(0.0, None)
    assert machine.write_succeeded(10.0, _record("pod-a", "1")) == []
    assert not machine.leading(10.0)


def test_an_answer_nobody_asked_for_is_a_bug_of_the_adapter() -> None:
    """Inputs out of turn raise, naming the input and what the machine was waiting for."""
    machine = LeaderElection(identity="pod-a", timing=TIMING)
    with pytest.raises(
        RuntimeError, match=r"^leader election 'pod-a': write_succeeded while waiting for nothing"
    ):
        machine.write_succeeded(0.0, _record("pod-a", "1"))


def test_timings_out_of_order_are_refused() -> None:
    """The renew deadline must sit between the retry period and the lease duration."""
    with pytest.raises(ValueError, match=r"^leader election: need 0 < retry period < renew deadline < lease"):
        ElectionTiming(lease_duration=10.0, renew_deadline=10.0, retry_period=2.0)
