"""`LatestValue`: a value one owner replaces and any task waits on, where the latest value wins (STYLE C10).

It replaces the hand-re-armed `trio.Event` (`event.set(); event = trio.Event()`): a waiter states the condition it
waits for (`wait_value`) or the value it last saw (`wait_changed`), so a change made while it was busy elsewhere is
never lost, and a burst of changes wakes it once, to the latest value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import attrs
import trio

__all__ = ["LatestValue", "LatestValueStatistics"]

T = TypeVar("T")


@attrs.frozen(kw_only=True)
class LatestValueStatistics:
    """What a `LatestValue` holds."""

    sets: int
    """Calls of `set` since the cell was made."""
    tasks_waiting: int
    """Tasks blocked in `wait_value` or `wait_changed`."""
    closed: bool
    """Whether `close` was called: no value will come."""


class LatestValue(Generic[T]):
    """A value that its owner replaces with `set` and any task reads (`value`) or waits on.

    Every `set` wakes every waiter, which then re-checks its condition against the value at the moment it runs, so
    a waiter always sees the latest value (never one a later `set` replaced) and needs no re-arming. The owner
    decides what a change is by when it calls `set`: the cell does not compare values.

    Resource handling:
        `close()` says no value will come: a waiter whose condition does not hold on the last value raises
        `trio.ClosedResourceError` (at once, or when it would block), and so does `set`. The value stays readable.
        A cancelled waiter leaves nothing behind.
    """

    def __init__(self, value: T) -> None:
        self._value = value
        self._sets = 0
        self._closed = False
        self._lot = trio.lowlevel.ParkingLot()

    @property
    def value(self) -> T:
        """The latest value set (the initial one before any `set`)."""
        return self._value

    def set(self, value: T) -> None:
        """Replace the value and wake every waiter.

        Raises:
            trio.ClosedResourceError: The cell was closed.
        """
        if self._closed:
            raise trio.ClosedResourceError("the value was closed: no value may be set")
        self._value = value
        self._sets += 1
        self._lot.unpark_all()

    def close(self) -> None:
        """Say that no value will come: wake every waiter, which returns if its condition holds or raises. Idempotent."""
        self._closed = True
        self._lot.unpark_all()

    async def wait_value(self, predicate: Callable[[T], bool]) -> T:
        """Return the value as soon as `predicate(value)` holds: after one checkpoint if it already does.

        The value returned is the latest one, and `predicate` holds on it when this returns.

        Raises:
            trio.ClosedResourceError: The cell is closed and `predicate` does not hold on its last value.
        """
        if predicate(self._value) or self._closed:
            await trio.lowlevel.checkpoint()
        else:
            # Parking is the checkpoint: a waiter that parks is not scheduled once more for nothing.
            await self._lot.park()
        while True:
            value = self._value
            if predicate(value):
                return value
            if self._closed:
                raise trio.ClosedResourceError("the value was closed before the condition held")
            await self._lot.park()

    async def wait_changed(self, seen: T) -> T:
        """Return the value as soon as it is not `seen` (by identity: a new but equal object counts as a change).

        Pass the value last read, so a change between that read and this call is not lost. For numbers, whose
        identity means nothing, use `wait_value` with a comparison.

        Raises:
            trio.ClosedResourceError: The cell is closed and its last value is `seen`.
        """
        return await self.wait_value(lambda value: value is not seen)

    def statistics(self) -> LatestValueStatistics:
        """Return what the cell holds."""
        return LatestValueStatistics(
            sets=self._sets, tasks_waiting=self._lot.statistics().tasks_waiting, closed=self._closed
        )
