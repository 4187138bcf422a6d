"""Tests of `aether.core.order`: every output order is decided by key, never by iteration order."""

from __future__ import annotations

import immutables

from aether.core.order import sorted_items, sorted_unique, sorted_values


def test_sorted_items_orders_by_key() -> None:
    """Items come sorted by key, whatever the mapping's own order."""
    assert sorted_items({"b": 2, "c": 3, "a": 1}) == [("a", 1), ("b", 2), ("c", 3)]


def test_sorted_items_orders_tuple_keys() -> None:
    """Tuple keys sort element by element."""
    mapping: immutables.Map[tuple[str, str], int] = immutables.Map(
        {("node-b", "x"): 1, ("node-a", "y"): 2, ("node-a", "x"): 3}
    )
    assert sorted_items(mapping) == [(("node-a", "x"), 3), (("node-a", "y"), 2), (("node-b", "x"), 1)]


def test_sorted_values_follow_their_sorted_keys() -> None:
    """Values come in the order of their sorted keys (not of their own values)."""
    assert sorted_values({"b": "first", "a": "second"}) == ["second", "first"]


def test_sorted_unique_drops_duplicates_and_sorts() -> None:
    """Distinct values, sorted, as a tuple."""
    assert sorted_unique(["b", "a", "b", "c", "a"]) == ("a", "b", "c")
    assert sorted_unique([]) == ()
