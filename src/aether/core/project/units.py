"""What the incremental projectors (`NodeProjector`, `EdgeProjector`) share: the test that a unit's inputs are
the same, and the record of the resources one projection added, replaced and dropped, unit by unit."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aether.core.snapshot import Resource

_VALUES = (bool, int, str)
"""Input types compared by equality: plain values, which Python may or may not share between equal instances."""


def same_inputs(old: tuple[Any, ...] | None, new: tuple[Any, ...]) -> bool:
    """True when `old` holds the very objects of `new` (plain values: equal ones)."""
    if old is None or len(old) != len(new):
        return False
    return all(a is b or (type(a) in _VALUES and a == b) for a, b in zip(old, new, strict=True))


class ResourceChanges:
    """The resources added, replaced and dropped by one projection, unit by unit."""

    def __init__(self) -> None:
        self.upserted: list[Resource] = []
        self.removed: list[tuple[str, str]] = []
        """`(type_url, name)` of each resource dropped."""

    def replace(self, old: Iterable[Resource], new: Iterable[Resource]) -> tuple[Resource, ...]:
        """Record a unit going from `old` to `new`; return `new` with the unchanged resources of `old` reused."""
        held = {(item.type_url, item.name): item for item in old}
        kept: list[Resource] = []
        for item in new:
            previous = held.pop((item.type_url, item.name), None)
            if (
                previous is not None
                and previous.digest == item.digest
                and previous.references == item.references
            ):
                kept.append(previous)
            else:
                kept.append(item)
                self.upserted.append(item)
        self.removed.extend(held)
        return tuple(kept)
