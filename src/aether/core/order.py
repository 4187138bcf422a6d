"""Every output order of the core is decided here, so no dict or set iteration order reaches the log or Envoy."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

V = TypeVar("V")


def sorted_items(mapping: Mapping[Any, V]) -> list[tuple[Any, V]]:
    """Return the items of `mapping` sorted by key (strings, or tuples of strings and int enums)."""
    return sorted(mapping.items(), key=lambda item: item[0])


def sorted_values(mapping: Mapping[Any, V]) -> list[V]:
    """Return the values of `mapping` in the order of their sorted keys."""
    return [value for _, value in sorted_items(mapping)]


def sorted_unique(values: Iterable[str]) -> tuple[str, ...]:
    """Return the distinct `values`, sorted."""
    return tuple(sorted(set(values)))
