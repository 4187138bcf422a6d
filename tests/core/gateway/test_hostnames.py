"""Hostname arithmetic: wildcard coverage, listener/route intersection and precedence specificity."""

from __future__ import annotations

import pytest

from aether.core.gateway.hostnames import covers, intersect, specificity


@pytest.mark.parametrize(
    ("pattern", "host", "expected"),
    [
        ("*", "anything.example.com", True),
        ("a.example.com", "a.example.com", True),
        ("*.example.com", "a.example.com", True),
        ("*.example.com", "a.b.example.com", True),
        ("*.example.com", "*.a.example.com", True),
        ("*.example.com", "example.com", False),
        ("*.example.com", "*", False),
        ("a.example.com", "b.example.com", False),
        ("a.example.com", "*.example.com", False),
    ],
)
def test_covers(pattern: str, host: str, expected: bool) -> None:
    """A wildcard label stands for one or more labels, never none."""
    assert covers(pattern, host) is expected


@pytest.mark.parametrize(
    ("listener", "route", "expected"),
    [
        ("", (), ("*",)),
        ("", ("b.com", "a.com", "a.com"), ("a.com", "b.com")),
        ("a.example.com", (), ("a.example.com",)),
        (
            "*.example.com",
            ("a.example.com", "a.example.net", "*.example.com"),
            ("*.example.com", "a.example.com"),
        ),
        ("a.example.com", ("*.com",), ("a.example.com",)),
        ("a.example.com", ("b.example.com",), ()),
    ],
)
def test_intersect(listener: str, route: tuple[str, ...], expected: tuple[str, ...]) -> None:
    """The most specific name of each intersecting pair, sorted."""
    assert intersect(listener, route) == expected


def test_specificity_orders_exact_before_wildcard_and_longer_first() -> None:
    """Non-wildcard characters first, then all characters; `*` counts nothing."""
    assert specificity("a.example.com") == (13, 13)
    assert specificity("*.example.com") == (0, 13)
    assert specificity("*") == (0, 0)
