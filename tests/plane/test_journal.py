"""The journal appends events durably, folds them, notifies subscribers, and replays them after a restart."""

from __future__ import annotations

from pathlib import Path

import trio

from aether.core.events import KubeService, KubeServiceUpserted, ObjectMeta, ServicePort
from aether.core.state import State
from aether.plane.journal import open_journal
from aether.testing import fold_events, make_pod, pod_added, pod_removed


async def test_events_sent_to_the_journal_are_folded_and_survive_a_restart(tmp_path: Path) -> None:
    """Two events in, the folded state out; reopening the directory replays exactly that state."""
    events = [pod_added(make_pod("web-1")), pod_added(make_pod("web-2")), pod_removed("web-1")]
    seen: list[State] = []
    folded = trio.Event()

    def record(state: State, now: int) -> None:
        seen.append(state)
        if state.seq == len(events):
            folded.set()

    async with open_journal(tmp_path / "log") as journal:
        journal.subscribe(record)
        async with journal.sender() as send:
            for event in events:
                await send.send(event)
        with trio.fail_after(5):
            await folded.wait()
        live = journal.state
    assert live == fold_events(*events)
    assert seen[0] == State()
    assert seen[-1] == live
    async with open_journal(tmp_path / "log") as reopened:
        assert reopened.state == live
        assert reopened.replay.records_folded == 3


async def test_the_journal_knows_when_its_last_record_was_observed_across_restarts(tmp_path: Path) -> None:
    """`last_observed_at` is the observation time of the newest folded record, live and after replay."""
    events = [pod_added(make_pod("web-1"), at=5), pod_added(make_pod("web-2"), at=9)]
    folded = trio.Event()
    async with open_journal(tmp_path / "log") as journal:
        journal.subscribe(lambda state, now: folded.set() if state.seq == 2 else None)
        async with journal.sender() as send:
            for event in events:
                await send.send(event)
        with trio.fail_after(5):
            await folded.wait()
        assert journal.last_observed_at == 9
    async with open_journal(tmp_path / "log") as reopened:
        assert reopened.last_observed_at == 9


async def test_an_event_the_log_cannot_hold_is_refused_and_the_journal_goes_on(tmp_path: Path) -> None:
    """A Service port of -1 cannot be encoded: the journal refuses that event (counted, never appended) and
    appends the events around it; the log replays them intact."""
    bad = KubeServiceUpserted(
        observed_at=1,
        source="directory",
        service=KubeService(
            meta=ObjectMeta(kind="Service", namespace="shop", name="web"), ports=(ServicePort(port=-1),)
        ),
    )
    events = [pod_added(make_pod("web-1")), bad, pod_added(make_pod("web-2"))]
    folded = trio.Event()
    async with open_journal(tmp_path / "log") as journal:
        journal.subscribe(lambda state, now: folded.set() if state.seq == 2 else None)
        async with journal.sender() as send:
            for event in events:
                await send.send(event)
        with trio.fail_after(5):
            await folded.wait()
        statistics = journal.statistics()
        assert (statistics.appended, statistics.refused) == (2, 1)
        live = journal.state
    assert live == fold_events(events[0], events[2])
    async with open_journal(tmp_path / "log") as reopened:
        assert reopened.state == live
