"""Every output order of the core is decided here, so no dict or set iteration order reaches the log or Envoy."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

K = TypeVar("K", bound=str | tuple[str, ...])
V = TypeVar("V")


def sorted_items(mapping: Mapping[K, V]) -> list[tuple[K, V]]:
    """Return the items of `mapping` sorted by key."""
    return sorted(mapping.items(), key=lambda item: item[0])


def sorted_values(mapping: Mapping[K, V]) -> list[V]:
    """Return the values of `mapping` in the order of their sorted keys."""
    return [value for _, value in sorted_items(mapping)]


def sorted_unique(values: Iterable[str]) -> tuple[str, ...]:
    """Return the distinct `values`, sorted."""
    return tuple(sorted(set(values)))
