"""Tests of `aether.core.values`: frozen string maps and redacted secrets."""

from __future__ import annotations

import attrs
import immutables
import pytest

from aether.core.values import EMPTY_STR_MAP, Redacted, freeze_str_map


def test_a_dict_is_frozen_into_an_equal_immutable_map() -> None:
    """A dict becomes an `immutables.Map` with the same items."""
    frozen = freeze_str_map({"app": "web", "track": "canary"})
    assert isinstance(frozen, immutables.Map)
    assert frozen == immutables.Map({"app": "web", "track": "canary"})


def test_pairs_are_frozen_into_a_map() -> None:
    """An iterable of pairs becomes a map (a later pair of the same key wins)."""
    assert freeze_str_map([("a", "1"), ("b", "2"), ("a", "3")]) == immutables.Map({"a": "3", "b": "2"})


def test_an_immutable_map_is_returned_as_is() -> None:
    """An `immutables.Map` is not copied."""
    original = immutables.Map({"a": "1"})
    assert freeze_str_map(original) is original


def test_frozen_maps_compare_by_content_whatever_the_insertion_order() -> None:
    """Two maps of the same items inserted in opposite orders are equal and hash alike."""
    forward = freeze_str_map({"a": "1", "b": "2"})
    backward = freeze_str_map({"b": "2", "a": "1"})
    assert forward == backward
    assert hash(forward) == hash(backward)


def test_the_empty_map_is_empty() -> None:
    """`EMPTY_STR_MAP` holds nothing."""
    assert len(EMPTY_STR_MAP) == 0
    assert freeze_str_map({}) == EMPTY_STR_MAP


def test_redacted_never_shows_its_content() -> None:
    """`repr` and `str` of a secret show only its length."""
    secret = Redacted(b"-----BEGIN PRIVATE KEY-----")
    assert repr(secret) == "Redacted(<27 bytes>)"
    assert str(secret) == "Redacted(<27 bytes>)"
    assert f"{secret}" == "Redacted(<27 bytes>)"


def test_redacted_compares_and_hashes_by_content() -> None:
    """Two secrets of the same bytes are equal and hash alike; different bytes differ."""
    assert Redacted(b"key") == Redacted(b"key")
    assert hash(Redacted(b"key")) == hash(Redacted(b"key"))
    assert Redacted(b"key") != Redacted(b"other")


def test_redacted_is_frozen() -> None:
    """A secret cannot be changed in place."""
    secret = Redacted(b"key")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        secret.secret = b"other"  # type: ignore[misc]
