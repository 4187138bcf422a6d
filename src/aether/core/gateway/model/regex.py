"""A pure check that a regular expression is one Envoy (RE2) compiles: the API leaves the dialect to us.

Python's `re` parses a superset of the RE2 syntax Envoy's `safe_regex` accepts; what `re` compiles and RE2 refuses
is a short list of constructs (back-references, look-around, possessive and atomic groups, conditionals), refused
here by a scan of the pattern outside character classes.
"""

from __future__ import annotations

import re

_RE2_REFUSED = (
    (re.compile(r"\\[1-9]"), "back-references are not supported by RE2"),
    (re.compile(r"\(\?P="), "named back-references are not supported by RE2"),
    (re.compile(r"\(\?<?[=!]"), "look-around assertions are not supported by RE2"),
    (re.compile(r"\(\?>"), "atomic groups are not supported by RE2"),
    (re.compile(r"\(\?\("), "conditionals are not supported by RE2"),
    (re.compile(r"[*+?}][+]"), "possessive quantifiers are not supported by RE2"),
    (re.compile(r"\\Z"), "\\Z is not supported by RE2 (use $)"),
)


def regex_problem(pattern: str) -> str:
    """Return why `pattern` is not an RE2 expression Envoy would accept, or "" when it is."""
    try:
        re.compile(pattern)
    except re.error as error:
        return f"invalid regular expression: {error}"
    except (RecursionError, OverflowError):  # pragma: no cover - a pattern nested past Python's limits
        return "invalid regular expression: too deeply nested"
    scanned = _outside_classes(pattern)
    for construct, reason in _RE2_REFUSED:
        if construct.search(scanned):
            return reason
    return ""


def _outside_classes(pattern: str) -> str:
    """Return `pattern` with character classes (`[...]`) and escaped characters inside them blanked out."""
    out: list[str] = []
    index, depth = 0, False
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern):
            out.append("  " if depth else pattern[index : index + 2])
            index += 2
            continue
        if depth:
            if char == "]":
                depth = False
            out.append(" ")
        else:
            if char == "[":
                depth = True
                # A `]` right after `[` or `[^` is a literal member of the class.
                lead = 2 if pattern[index + 1 : index + 2] == "^" else 1
                if pattern[index + lead : index + lead + 1] == "]":
                    out.append(" " * (lead + 1))
                    index += lead + 1
                    continue
            out.append(char)
        index += 1
    return "".join(out)
