"""Properties of the leader-election machine over a shared Lease store: never two leaders at once, and a replica
leads only while its lease, by its own clock, is held and unexpired."""

from __future__ import annotations

import attrs
from hypothesis import example, given, settings

from aether.controller.election import (
    ElectionTiming,
    LeaderElection,
    LeaseRecord,
    Output,
    ReadLease,
    WriteLease,
)
from property_tests.election_strategies import REPLICAS, Step, election_steps

TIMING = ElectionTiming(lease_duration=15.0, renew_deadline=10.0, retry_period=2.0)


@attrs.define
class _Store:
    """The API server's one Lease: writes conditional on its resourceVersion, as the real one checks them."""

    record: LeaseRecord | None = None
    revision: int = 0

    def apply(self, request: ReadLease | WriteLease) -> tuple[str, LeaseRecord | None]:
        if isinstance(request, ReadLease):
            return "read", self.record
        current = self.record.resource_version if self.record is not None else ""
        if request.resource_version != current or (not current and self.record is not None):
            return "conflict", None
        self.revision += 1
        self.record = LeaseRecord(
            holder=request.holder,
            lease_seconds=request.lease_seconds,
            transitions=request.transitions,
            resource_version=str(self.revision),
        )
        return "written", self.record


@attrs.define
class _Replica:
    machine: LeaderElection
    request: ReadLease | WriteLease | None = None
    sent_at: float = 0.0
    response: tuple[str, LeaseRecord | None] | None = None
    held_since: float | None = None
    """When the write that made it the holder (per its last successful write) was sent."""


def _run(steps: list[Step]) -> list[str]:
    """Run the schedule, checking the properties after every step; return who leads at the end."""
    store = _Store()
    replicas = [_Replica(LeaderElection(identity=f"pod-{index}", timing=TIMING)) for index in range(REPLICAS)]
    now = 0.0

    def take(replica: _Replica, outputs: list[Output]) -> None:
        for output in outputs:
            if isinstance(output, ReadLease | WriteLease):
                assert replica.request is None, "two requests outstanding"
                replica.request, replica.sent_at, replica.response = output, now, None

    def answer(replica: _Replica, *, lost: bool) -> None:
        machine, request, response = replica.machine, replica.request, replica.response
        replica.request = None
        if not lost and response is not None:
            outcome, record = response
            if outcome == "read":
                take(replica, machine.lease_read(now, record))
            elif outcome == "written":
                assert record is not None
                take(replica, machine.write_succeeded(now, record))
                replica.held_since = replica.sent_at
            else:
                take(replica, machine.write_failed(now, conflict=True))
        elif isinstance(request, ReadLease):
            take(replica, machine.read_failed(now))
        else:
            take(replica, machine.write_failed(now, conflict=False))

    for action, argument in steps:
        if action == "advance":
            now += float(argument)
            continue
        replica = replicas[int(argument)]
        if action in ("tick", "act"):
            take(replica, replica.machine.tick(now))
            while action == "act" and replica.request is not None:
                replica.response = replica.response or store.apply(replica.request)
                answer(replica, lost=False)
        elif action == "apply" and replica.request is not None and replica.response is None:
            replica.response = store.apply(replica.request)
        elif action in ("deliver", "fail") and replica.request is not None:
            answer(replica, lost=action == "fail")
        leaders = [replica for replica in replicas if replica.machine.leading(now)]
        assert len(leaders) <= 1, f"two leaders at {now}: {[r.machine.identity for r in leaders]}"
        for leader in leaders:
            assert leader.held_since is not None
            assert now < leader.held_since + TIMING.lease_duration
    return [replica.machine.identity for replica in replicas if replica.machine.leading(now)]


SLOW_RENEW: list[Step] = [
    *[("tick", 0), ("apply", 0), ("deliver", 0), ("apply", 0)],
    ("act", 1),
    ("advance", 6.0),
    ("deliver", 0),
    *[("advance", 6.0), ("advance", 3.0)],
    ("act", 1),
]
"""pod-0's first write answered 6 s late, pod-1 having read the record at once: pod-0 leads from when it *sent* the
write (leading from the answer would overlap pod-1's lease by a second)."""


@settings(max_examples=400, deadline=None)
@given(election_steps())
@example(SLOW_RENEW)
def test_never_two_leaders_and_only_while_the_lease_is_held(steps: list[Step]) -> None:
    """Whatever the replicas, the store and time do, at most one replica leads at a time, and only within the lease
    duration of the write that made it the holder, by its own clock."""
    _run(steps)


def test_a_schedule_without_losses_elects_one_leader() -> None:
    """The schedule of a healthy cluster (every request answered, time passing) elects a leader: the property is
    not met by electing nobody."""
    steps: list[Step] = []
    for _ in range(3):
        steps += [("act", replica) for replica in range(REPLICAS)]
        steps.append(("advance", 1.0))
    assert _run(steps) == ["pod-0"]
