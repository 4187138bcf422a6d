"""The registrar watch machine (`aether.registrar.watch_machine`) against a modelled registrar that changes while its
streams break and the agent refilters: resume never skips or repeats a change, a filter change always leads to a fresh
resync, what the agent appends folds to the registrar's registry, and any input sequence gives outputs or a clean
protocol error."""

from __future__ import annotations

from collections import deque

import attrs
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from aether.core.events import Event
from aether.core.events.registry import EndpointsSnapshotCompleted, EndpointsSnapshotReceived
from aether.proto.registrar.v1 import registrar_pb2
from aether.registrar.convert import change_to_proto, filter_from_proto, version_from_proto
from aether.registrar.errors import InvalidRequestError
from aether.registrar.snapshot import (
    Change,
    ChangeKind,
    RegistrySnapshot,
    ServiceFilter,
    apply,
    empty_snapshot,
    resync,
    visible,
)
from aether.registrar.watch_machine import (
    SOURCE,
    SyncKind,
    WatchMachine,
    WatchOutput,
    WatchPhase,
    WatchProtocolError,
)
from aether.testing.builders import fold_events
from property_tests.strategies import (
    WATCH_HISTORY_LIMIT,
    WatchBroken,
    WatchConnected,
    WatchDelivered,
    WatchDisconnected,
    WatchInput,
    WatchMutated,
    WatchRefiltered,
    WatchStep,
    watch_filters,
    watch_inputs,
    watch_steps,
)

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FUZZ = settings(PROPERTY, max_examples=200)
NOW = 1_000


@attrs.define
class _Registrar:
    """A registrar as `aether.registrar.server` answers a watch: `resync` from the request, then the live changes
    its filter lets through. `changes[v]` keeps every version's changes (its history forgets them)."""

    snapshot: RegistrySnapshot = attrs.Factory(empty_snapshot)
    changes: dict[int, tuple[Change, ...]] = attrs.Factory(dict)
    pending: deque[Change] | None = None
    """What the open stream has yet to deliver; None: no stream."""
    service_filter: ServiceFilter = ServiceFilter()

    def open(self, request: registrar_pb2.WatchEndpointsRequest) -> None:
        self.service_filter = filter_from_proto(request)
        last_version = version_from_proto(request.last_version)
        self.pending = deque(
            resync(self.snapshot, last_version=last_version, service_filter=self.service_filter)
        )

    def mutate(self, step: WatchMutated) -> None:
        self.snapshot, changes = apply(self.snapshot, step.mutation, history_limit=WATCH_HISTORY_LIMIT)
        if changes:
            self.changes[self.snapshot.version] = changes
        if self.pending is not None:
            self.pending.extend(change for change in changes if visible(change, self.service_filter))

    def expected_since(self, version: int, service_filter: ServiceFilter) -> list[Change]:
        """Every change after `version` a watcher with `service_filter` must get, in order."""
        return [
            change
            for at in range(version + 1, self.snapshot.version + 1)
            for change in self.changes.get(at, ())
            if visible(change, service_filter)
        ]


def _check_output(output: WatchOutput) -> None:
    for one in output.events:
        assert isinstance(one, Event)
        assert one.source == SOURCE
        assert one.observed_at == NOW


def _incremental(events: list[Event]) -> list[Event]:
    return [one for one in events if not isinstance(one, EndpointsSnapshotCompleted)]


@PROPERTY
@given(first_filter=watch_filters(), steps=watch_steps())
def test_resumes_never_skip_or_repeat_a_change_and_refilters_resync(
    first_filter: frozenset[str] | None, steps: list[WatchStep]
) -> None:
    """Through breaks inside versions and filter changes, the events since the last resync are exactly the changes
    since its version, each once and in order; a refilter's next sync is a full resync with the new filter; the
    log folds to the registrar's registry."""
    registrar = _Registrar()
    machine = WatchMachine(cluster_name="c", node_name="node-a", last_version=None)
    services = first_filter
    appended: list[Event] = []
    since_resync: list[Event] = []
    base: tuple[int, ServiceFilter] | None = None
    """The last resync's version and filter."""
    refiltered = False
    """A refilter happened and no sync completed since."""
    syncs: list[SyncKind] = []
    skipped: list[Change] = []
    """Changes a resume delivered again and the machine skipped."""

    def connect() -> None:
        request = machine.connect(services)
        if refiltered:
            assert request.last_version == ""
            assert filter_from_proto(request) == ServiceFilter(services=services)
        registrar.open(request)

    def deliver(count: int) -> None:
        nonlocal base, since_resync, refiltered
        assert registrar.pending is not None
        for _ in range(min(count, len(registrar.pending))):
            change = registrar.pending.popleft()
            resuming = machine.phase is not WatchPhase.RESYNCING
            output = machine.receive_message(change_to_proto(change), now=NOW)
            _check_output(output)
            appended.extend(output.events)
            if output.synced is not None:
                syncs.append(output.synced)
            if resuming and change.kind is not ChangeKind.FULL_SNAPSHOT and not output.events:
                skipped.append(change)
            if output.synced is SyncKind.RESYNC:
                received = output.events[0]
                assert isinstance(received, EndpointsSnapshotReceived)
                base = (int(received.version), registrar.service_filter)
                since_resync = []
                refiltered = False
                continue
            assert not refiltered or output.synced is None, "a refilter's first sync must be a full resync"
            assert not refiltered or output.events == (), (
                "nothing is appended between a refilter and its resync"
            )
            since_resync.extend(output.events)
            if base is not None:
                expected = registrar.expected_since(base[0], base[1])
                got = _incremental(since_resync)
                assert got == _incremental(_events_of(expected))[: len(got)], "a change skipped or repeated"

    connect()
    for step in steps:
        match step:
            case WatchMutated():
                registrar.mutate(step)
            case WatchDelivered(count=count):
                if registrar.pending is None:
                    connect()
                deliver(count)
            case WatchBroken():
                machine.disconnect()
                registrar.pending = None
            case WatchRefiltered(services=new):
                services = new
                machine.refilter()
                machine.disconnect()  # the client cancels the stream
                registrar.pending = None
                refiltered = True
    if registrar.pending is None:
        connect()
    assert registrar.pending is not None
    deliver(len(registrar.pending))
    event(f"appended: {min(len(appended), 10)}{'+' if len(appended) >= 10 else ''}")
    event(f"resumes: {min(syncs.count(SyncKind.RESUME), 2)}, resyncs: {min(syncs.count(SyncKind.RESYNC), 2)}")
    event("a resume skipped a change already appended" if skipped else "no change skipped")
    assert base is not None, "every watch ends synced"
    # A live version counts as complete only once a newer one begins: the last one may still be partial.
    assert machine.synced
    assert machine.last_version is not None
    assert base[0] <= machine.last_version <= registrar.snapshot.version
    assert _incremental(since_resync) == _incremental(_events_of(registrar.expected_since(*base)))
    state = fold_events(*appended)
    assert state.diagnostics == fold_events().diagnostics, "no appended event was rejected"
    wanted = ServiceFilter(services=services)
    assert sorted(state.registry.services.keys()) == list(registrar.snapshot.catalog())
    folded = sorted(
        (one for items in state.registry.endpoints.values() for one in items.values()),
        key=lambda one: one.key,
    )
    assert folded == [one for one in registrar.snapshot.sorted_endpoints() if wanted.wants(one.service)]


def _events_of(changes: list[Change]) -> list[Event]:
    """The events a live stream of `changes` appends (what the machine returns for each)."""
    machine = WatchMachine(cluster_name="c", node_name="node-a", last_version=0)
    machine.connect(None)
    machine.receive(Change(kind=ChangeKind.SNAPSHOT_COMPLETE, version=0), now=NOW)
    return [one for change in changes for one in machine.receive(change, now=NOW).events]


@FUZZ
@given(last_version=st.sampled_from((None, 0, 2)), inputs=watch_inputs())
def test_any_input_sequence_gives_outputs_or_a_clean_protocol_error(
    last_version: int | None, inputs: list[WatchInput]
) -> None:
    """Streams opening and ending, refilters and any watch messages: outputs, or `WatchProtocolError` /
    `InvalidRequestError` with a message, after which the stream is closed."""
    machine = WatchMachine(cluster_name="c", node_name="node-a", last_version=last_version)
    refusals: list[tuple[WatchProtocolError | InvalidRequestError, WatchPhase]] = []
    """Each refusal, and the phase the machine was left in."""
    phases = set()
    for item in inputs:
        match item:
            case WatchConnected(services=services):
                request = machine.connect(services)
                assert machine.phase is WatchPhase.FIRST
                assert request.last_version == (
                    "" if machine.last_version is None else str(machine.last_version)
                )
            case WatchDisconnected():
                machine.disconnect()
                assert (machine.phase, machine.synced) == (WatchPhase.CLOSED, False)
            case WatchRefiltered():
                machine.refilter()
                assert machine.connect(None).last_version == ""
            case _:
                try:
                    output = machine.receive_message(item, now=NOW)
                except (WatchProtocolError, InvalidRequestError) as exc:
                    refusals.append((exc, machine.phase))
                    continue
                _check_output(output)
                phases.add(machine.phase)
                if output.synced is not None:
                    assert (machine.phase, machine.synced) == (WatchPhase.LIVE, True)
    for refusal, phase in refusals:
        assert phase is WatchPhase.CLOSED, "a refused event ends the stream"
        if isinstance(refusal, WatchProtocolError):
            assert str(refusal).startswith(f"watch event {refusal.change.kind.name} at version ")
        else:
            assert str(refusal).startswith(f"{refusal.field}: ")
    event(f"refused: {min(len(refusals), 3)}{'+' if len(refusals) >= 3 else ''}")
    event(
        f"reached {max((phase.name for phase in phases), default='nothing', key=lambda name: _DEPTH[name])}"
    )


_DEPTH = {"nothing": 0, "CLOSED": 1, "FIRST": 2, "RESYNCING": 3, "LIVE": 4}
