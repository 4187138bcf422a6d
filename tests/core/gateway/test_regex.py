"""The RE2 check: what Python compiles but Envoy's RE2 refuses is refused, with the construct named."""

from __future__ import annotations

import pytest

from aether.core.gateway.model.regex import regex_problem

CASES = [
    ("/v[0-9]+/.*", ""),
    ("[(?=]x", ""),
    ("[]a]\\d", ""),
    ("[^]a](?:x)", ""),
    ("(a)\\1", "back-references are not supported by RE2"),
    ("(?P<x>a)(?P=x)", "named back-references are not supported by RE2"),
    ("a(?=b)", "look-around assertions are not supported by RE2"),
    ("(?<!a)b", "look-around assertions are not supported by RE2"),
    ("(?>a)", "atomic groups are not supported by RE2"),
    ("(a)?(?(1)b|c)", "conditionals are not supported by RE2"),
    ("a++", "possessive quantifiers are not supported by RE2"),
    ("a\\Z", "\\Z is not supported by RE2 (use $)"),
    ("(", "invalid regular expression: missing ), unterminated subpattern at position 0"),
]


@pytest.mark.parametrize(("pattern", "problem"), CASES)
def test_regex_problem(pattern: str, problem: str) -> None:
    """Each pattern is accepted (empty problem) or refused with its reason."""
    assert regex_problem(pattern) == problem
