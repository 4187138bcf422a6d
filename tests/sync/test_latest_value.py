"""`LatestValue`: no lost wake-ups, waiters see the latest value, and close and cancellation leave nothing behind."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from aether.sync import LatestValue, LatestValueStatistics


async def test_a_wait_whose_condition_holds_returns_the_value_after_a_checkpoint() -> None:
    """`wait_value` on a condition that already holds returns at once, yet is a checkpoint (STYLE C4)."""
    cell = LatestValue(3)
    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(trio.Cancelled):
            await cell.wait_value(lambda value: value == 3)
    assert await cell.wait_value(lambda value: value == 3) == 3


async def test_a_waiter_blocks_until_the_condition_holds() -> None:
    """A set that leaves the condition false wakes the waiter, which blocks again; the one that makes it true ends it."""
    cell = LatestValue(0)
    got: list[int] = []

    async def waiter() -> None:
        got.append(await cell.wait_value(lambda value: value >= 2))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        cell.set(1)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []
        assert cell.statistics().tasks_waiting == 1
        cell.set(2)
    assert got == [2]


async def test_a_waiter_sees_the_latest_value_not_the_one_that_woke_it() -> None:
    """Two sets before the waiter runs: it returns the second, and the condition holds on what it returns."""
    cell = LatestValue("a")
    got: list[str] = []

    async def waiter() -> None:
        got.append(await cell.wait_changed("a"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        cell.set("b")
        cell.set("c")
    assert got == ["c"]


async def test_a_change_made_before_the_wait_is_not_lost() -> None:
    """`wait_changed(seen)` after the value moved on returns the new value without blocking: no lost wake-up."""
    cell: LatestValue[tuple[int, ...]] = LatestValue(())
    seen = cell.value
    cell.set((1,))  # while the reader was busy elsewhere
    with trio.testing.assert_checkpoints():
        assert await cell.wait_changed(seen) == (1,)


async def test_wait_changed_compares_by_identity() -> None:
    """A new but equal object is a change; the very object seen is not."""
    first: tuple[int, ...] = tuple([1, 2])
    cell = LatestValue(first)
    equal = tuple([1, 2])
    assert equal == first
    assert equal is not first
    cell.set(equal)
    assert await cell.wait_changed(first) is equal
    async with trio.open_nursery() as nursery:
        nursery.start_soon(cell.wait_changed, equal)
        await trio.testing.wait_all_tasks_blocked()
        assert cell.statistics().tasks_waiting == 1
        nursery.cancel_scope.cancel()


async def test_every_waiter_wakes_and_each_checks_its_own_condition() -> None:
    """One set wakes all waiters; those whose condition holds return, the others wait on."""
    cell = LatestValue(0)
    done: list[str] = []

    async def waiter(name: str, at_least: int) -> None:
        await cell.wait_value(lambda value: value >= at_least)
        done.append(name)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter, "one", 1)
        nursery.start_soon(waiter, "also-one", 1)
        nursery.start_soon(waiter, "two", 2)
        await trio.testing.wait_all_tasks_blocked()
        cell.set(1)
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(done) == ["also-one", "one"]
        assert cell.statistics().tasks_waiting == 1
        cell.set(2)
    assert done[2:] == ["two"]


async def test_a_cancelled_waiter_leaves_nothing_behind() -> None:
    """Cancelling one waiter removes it from the cell; the others still wake."""
    cell = LatestValue(0)
    done: list[int] = []

    async def waiter() -> None:
        done.append(await cell.wait_value(lambda value: value == 1))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        async with trio.open_nursery() as doomed:
            doomed.start_soon(cell.wait_value, lambda value: value == 1)
            await trio.testing.wait_all_tasks_blocked()
            assert cell.statistics().tasks_waiting == 2
            doomed.cancel_scope.cancel()
        assert cell.statistics().tasks_waiting == 1
        cell.set(1)
    assert done == [1]
    assert cell.statistics() == LatestValueStatistics(sets=1, tasks_waiting=0, closed=False)


async def test_close_wakes_waiters_that_can_no_longer_succeed_with_an_error() -> None:
    """After `close`, a condition that holds on the last value still returns; one that does not raises."""
    cell = LatestValue(1)
    outcomes: list[str] = []

    async def waiter(wanted: int) -> None:
        try:
            await cell.wait_value(lambda value: value == wanted)
        except trio.ClosedResourceError as exc:
            outcomes.append(f"{wanted}: {exc}")
        else:
            outcomes.append(f"{wanted}: held")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter, 2)
        await trio.testing.wait_all_tasks_blocked()
        cell.close()
    assert outcomes == ["2: the value was closed before the condition held"]
    assert await cell.wait_value(lambda value: value == 1) == 1
    with pytest.raises(trio.ClosedResourceError, match=r"^the value was closed before the condition held$"):
        await cell.wait_changed(1)
    with pytest.raises(trio.ClosedResourceError, match=r"^the value was closed: no value may be set$"):
        cell.set(3)
    cell.close()
    assert cell.value == 1
    assert cell.statistics() == LatestValueStatistics(sets=0, tasks_waiting=0, closed=True)
