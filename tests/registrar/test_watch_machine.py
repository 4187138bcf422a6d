"""The registrar watch machine, sans-IO: the requests it asks for, the events it returns for resyncs and resumes,
what a resume skips, and the watch events it refuses."""

from __future__ import annotations

import pytest

from aether.core.events.registry import (
    EndpointAdded,
    EndpointsSnapshotCompleted,
    EndpointsSnapshotReceived,
    Protocol,
    RegistryServiceAdded,
)
from aether.proto.registrar.v1 import registrar_pb2 as pb
from aether.registrar.convert import change_to_proto
from aether.registrar.snapshot import Change, ChangeKind, resync, snapshot_of
from aether.registrar.watch_machine import (
    SyncKind,
    WatchMachine,
    WatchOutput,
    WatchPhase,
    WatchProtocolError,
)
from tests.registrar._builders import DB, WEB, endpoint

NOW = 1_000
WEB_1 = endpoint("10.0.0.1")
SERVICE_ADDED = Change(kind=ChangeKind.SERVICE_ADDED, version=2, service=DB)
ENDPOINT_ADDED = Change(
    kind=ChangeKind.ENDPOINT_ADDED,
    version=2,
    service=DB,
    protocol=Protocol.HTTP,
    ip="10.0.1.1",
    endpoint=endpoint("10.0.1.1", service=DB),
)


def _machine(last_version: int | None = None) -> WatchMachine:
    return WatchMachine(cluster_name="c", node_name="node-a", last_version=last_version)


def _feed(machine: WatchMachine, *changes: Change) -> list[WatchOutput]:
    return [machine.receive_message(change_to_proto(change), now=NOW) for change in changes]


def _synced(machine: WatchMachine) -> WatchMachine:
    """`machine` after a full resync of WEB_1 at version 1."""
    machine.connect(None)
    _feed(machine, *resync(snapshot_of([WEB_1], version=1), last_version=None))
    return machine


def test_a_first_stream_asks_for_everything_with_its_sorted_filter_and_no_resume_point() -> None:
    """The request names the watcher, has no last_version, and lists the filter's services sorted."""
    request = _machine().connect(frozenset({WEB, DB}))
    expected = pb.WatchEndpointsRequest(cluster_name="c", node_name="node-a", last_version="")
    expected.filter.services.extend([DB, WEB])
    assert request == expected
    assert not _machine().connect(None).HasField("filter")


def test_a_full_resync_is_one_snapshot_and_its_completion() -> None:
    """FULL_SNAPSHOT, the catalog, the endpoints, SNAPSHOT_COMPLETE: nothing until the completion, then both events."""
    machine = _machine()
    machine.connect(None)
    outputs = _feed(machine, *resync(snapshot_of([WEB_1], version=1), last_version=None))
    assert outputs == [
        WatchOutput(),
        WatchOutput(),
        WatchOutput(),
        WatchOutput(
            events=(
                EndpointsSnapshotReceived(
                    observed_at=NOW, source="registrar", version="1", endpoints=[WEB_1], services=[WEB]
                ),
                EndpointsSnapshotCompleted(observed_at=NOW, source="registrar", version="1"),
            ),
            synced=SyncKind.RESYNC,
        ),
    ]
    assert (machine.phase, machine.synced, machine.last_version) == (WatchPhase.LIVE, True, 1)


def test_a_stream_broken_inside_a_version_resumes_from_the_one_before_and_skips_what_it_returned() -> None:
    """Version 2 is SERVICE_ADDED + ENDPOINT_ADDED; the break falls between them: resume from 1, skip the first."""
    machine = _synced(_machine())
    [added] = _feed(machine, SERVICE_ADDED)
    assert added.events == (
        RegistryServiceAdded(observed_at=NOW, source="registrar", version="2", service=DB),
    )
    assert machine.disconnect() is True
    assert machine.connect(None).last_version == "1"
    complete = Change(kind=ChangeKind.SNAPSHOT_COMPLETE, version=2)
    assert _feed(machine, SERVICE_ADDED, ENDPOINT_ADDED, complete) == [
        WatchOutput(),
        WatchOutput(
            events=(
                EndpointAdded(
                    observed_at=NOW,
                    source="registrar",
                    version="2",
                    endpoint=endpoint("10.0.1.1", service=DB),
                ),
            )
        ),
        WatchOutput(
            events=(EndpointsSnapshotCompleted(observed_at=NOW, source="registrar", version="2"),),
            synced=SyncKind.RESUME,
        ),
    ]
    assert machine.last_version == 2


def test_a_newer_version_completes_the_partial_one() -> None:
    """Live changes of version 3 after those of version 2: a reconnect resumes from 2."""
    machine = _synced(_machine())
    _feed(
        machine,
        SERVICE_ADDED,
        ENDPOINT_ADDED,
        Change(kind=ChangeKind.SERVICE_REMOVED, version=3, service=WEB),
    )
    machine.disconnect()
    assert machine.connect(None).last_version == "2"


def test_a_refilter_forgets_the_resume_point() -> None:
    """After a sync, a filter change: the next stream has no last_version, and its filter is the new one."""
    machine = _synced(_machine())
    machine.refilter()
    machine.disconnect()
    request = machine.connect(frozenset({DB}))
    assert (request.last_version, list(request.filter.services)) == ("", [DB])
    assert machine.last_version is None


def test_a_disconnect_says_whether_the_stream_had_synced() -> None:
    """True after a sync on that stream (the backoff starts over); False for a stream that never synced."""
    machine = _machine()
    machine.connect(None)
    assert machine.disconnect() is False
    assert _synced(machine).disconnect() is True
    assert (machine.phase, machine.synced) == (WatchPhase.CLOSED, False)


@pytest.mark.parametrize(
    ("last_version", "before", "change", "message"),
    [
        pytest.param(
            None,
            (),
            SERVICE_ADDED,
            "watch event SERVICE_ADDED at version 2: not allowed as the first event",
            id="no resume point, no resync",
        ),
        pytest.param(
            1,
            (Change(kind=ChangeKind.FULL_SNAPSHOT, version=1),),
            Change(kind=ChangeKind.FULL_SNAPSHOT, version=1),
            "watch event FULL_SNAPSHOT at version 1: not allowed during a full resync",
            id="a resync inside a resync",
        ),
        pytest.param(
            1,
            (Change(kind=ChangeKind.FULL_SNAPSHOT, version=1),),
            ENDPOINT_ADDED,
            "watch event ENDPOINT_ADDED at version 2: not allowed during a full resync",
            id="a change inside a resync",
        ),
        pytest.param(
            2,
            (),
            Change(kind=ChangeKind.SERVICE_ADDED, version=1, service=DB),
            "watch event SERVICE_ADDED at version 1: not allowed as the first event",
            id="older than the resume point",
        ),
        pytest.param(
            1,
            (Change(kind=ChangeKind.SNAPSHOT_COMPLETE, version=1),),
            Change(kind=ChangeKind.SNAPSHOT_COMPLETE, version=1),
            "watch event SNAPSHOT_COMPLETE at version 1: not allowed after the sync completed",
            id="a completion in a live stream",
        ),
    ],
)
def test_an_event_out_of_protocol_is_refused_and_closes_the_stream(
    last_version: int | None, before: tuple[Change, ...], change: Change, message: str
) -> None:
    """The error names the event, its version and where the stream was; the machine waits for a new stream."""
    machine = _machine(last_version)
    machine.connect(None)
    _feed(machine, *before)
    with pytest.raises(WatchProtocolError, match=rf"^{message}$"):
        _feed(machine, change)
    assert machine.phase is WatchPhase.CLOSED
    with pytest.raises(
        WatchProtocolError, match=r"^watch event SERVICE_ADDED at version 2: not allowed with no stream open$"
    ):
        _feed(machine, SERVICE_ADDED)
