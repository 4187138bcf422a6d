"""Small value helpers shared by events and state: frozen string maps and redacted secrets."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeAlias

import attrs
import immutables

StrMap: TypeAlias = immutables.Map[str, str]
"""A read-only string-to-string mapping (labels, annotations, selectors, metadata)."""

EMPTY_STR_MAP: StrMap = immutables.Map()


def freeze_str_map(value: Mapping[str, str] | Iterable[tuple[str, str]]) -> StrMap:
    """Return `value` as an immutable map (an `immutables.Map` is returned as is).

    Iteration order of the result is not meaningful: everything that serializes a map sorts it first
    (see `aether.core.order`).
    """
    if isinstance(value, immutables.Map):
        return value
    return immutables.Map(value)


def freeze_strs(value: Iterable[str]) -> tuple[str, ...]:
    """Return `value` as a tuple of strings (order kept): the converter of string-list fields."""
    return tuple(value)


def freeze_ints(value: Iterable[int]) -> tuple[int, ...]:
    """Return `value` as a tuple of integers (order kept): the converter of integer-list fields."""
    return tuple(value)


@attrs.frozen(repr=False)
class Redacted:
    """Secret bytes (a private key) whose `repr` and `str` never show the content.

    Equality and hashing use the content, so events and states holding secrets still compare by value.
    """

    secret: bytes

    def __repr__(self) -> str:
        return f"Redacted(<{len(self.secret)} bytes>)"

    __str__ = __repr__
