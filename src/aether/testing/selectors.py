"""Label and field selectors in their string form (`app=web,tier in (a,b),!canary`): parsed once, then matched.

The grammar is the API server's: a comma-separated conjunction of requirements.
Labels take `=`, `==`, `!=`, `in (...)`, `notin (...)`, `key` (exists) and `!key` (does not exist);
fields take `=`, `==` and `!=` only.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping

import attrs

__all__ = ["FieldSelector", "LabelSelector", "Operator", "Requirement", "SelectorError"]


class SelectorError(ValueError):
    """A selector string does not parse: `problem` says where."""

    def __init__(self, selector: str, *, problem: str) -> None:
        super().__init__(selector, problem)
        self.selector = selector
        self.problem = problem

    def __str__(self) -> str:
        return f"selector {self.selector!r}: {self.problem}"


class Operator(enum.Enum):
    """How a requirement compares a key's value."""

    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"


@attrs.frozen(kw_only=True)
class Requirement:
    """One term of a selector: `key` compared with `values` by `operator`."""

    key: str
    operator: Operator
    values: frozenset[str] = frozenset()

    def matches(self, value: str | None) -> bool:
        """Return whether a key with `value` (None when absent) satisfies this term."""
        match self.operator:
            case Operator.EQUALS | Operator.IN:
                return value is not None and value in self.values
            case Operator.NOT_EQUALS | Operator.NOT_IN:
                # The API server's rule: a missing key satisfies `!=` and `notin`.
                return value is None or value not in self.values
            case Operator.EXISTS:
                return value is not None
            case Operator.DOES_NOT_EXIST:
                return value is None


_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET_TERM = re.compile(rf"^\s*(?P<key>{_KEY})\s+(?P<op>in|notin)\s+\((?P<values>[^()]*)\)\s*$")
_COMPARE_TERM = re.compile(rf"^\s*(?P<key>{_KEY})\s*(?P<op>==|=|!=)\s*(?P<value>{_VALUE})\s*$")
_EXISTS_TERM = re.compile(rf"^\s*(?P<bang>!?)\s*(?P<key>{_KEY})\s*$")
_FIELD_TERM = re.compile(r"^\s*(?P<key>[A-Za-z0-9_.]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^,]*?)\s*$")


def _split_terms(text: str) -> list[str]:
    """Split on the commas that are not inside a `( )` value set."""
    terms: list[str] = []
    depth = 0
    start = 0
    for index, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            terms.append(text[start:index])
            start = index + 1
    terms.append(text[start:])
    return terms


def _label_term(selector: str, term: str) -> Requirement:
    if found := _SET_TERM.match(term):
        values = frozenset(item.strip() for item in found["values"].split(","))
        if any(not re.fullmatch(_VALUE, value) for value in values):
            raise SelectorError(selector, problem=f"term {term.strip()!r}: invalid value in the set")
        operator = Operator.IN if found["op"] == "in" else Operator.NOT_IN
        return Requirement(key=found["key"], operator=operator, values=values)
    if found := _COMPARE_TERM.match(term):
        operator = Operator.NOT_EQUALS if found["op"] == "!=" else Operator.EQUALS
        return Requirement(key=found["key"], operator=operator, values=frozenset({found["value"]}))
    if found := _EXISTS_TERM.match(term):
        operator = Operator.DOES_NOT_EXIST if found["bang"] else Operator.EXISTS
        return Requirement(key=found["key"], operator=operator)
    raise SelectorError(
        selector, problem=f"term {term.strip()!r} is not 'key=value', 'key in (a,b)' or '!key'"
    )


def _field_term(selector: str, term: str) -> Requirement:
    found = _FIELD_TERM.match(term)
    if found is None:
        raise SelectorError(selector, problem=f"term {term.strip()!r} is not 'field=value' or 'field!=value'")
    operator = Operator.NOT_EQUALS if found["op"] == "!=" else Operator.EQUALS
    return Requirement(key=found["key"], operator=operator, values=frozenset({found["value"]}))


def _parse(text: str, term: Callable[[str, str], Requirement]) -> tuple[Requirement, ...]:
    if not text.strip():
        return ()
    return tuple(term(text, item) for item in _split_terms(text))


@attrs.frozen(kw_only=True)
class LabelSelector:
    """A conjunction of label requirements; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str) -> LabelSelector:
        """Parse the string form, as in `?labelSelector=`.

        Raises:
            SelectorError: If a term does not parse.
        """
        return cls(requirements=_parse(text, _label_term))

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Return whether `labels` satisfy every requirement."""
        return all(item.matches(labels.get(item.key)) for item in self.requirements)


@attrs.frozen(kw_only=True)
class FieldSelector:
    """A conjunction of field requirements (`spec.nodeName=node-1`); the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str) -> FieldSelector:
        """Parse the string form, as in `?fieldSelector=`.

        Raises:
            SelectorError: If a term does not parse.
        """
        return cls(requirements=_parse(text, _field_term))

    @property
    def fields(self) -> frozenset[str]:
        """The field paths the selector reads (a server checks each is supported for the kind)."""
        return frozenset(item.key for item in self.requirements)

    def matches(self, fields: Mapping[str, str]) -> bool:
        """Return whether an object whose selectable fields are `fields` satisfies every requirement.

        A field the object lacks reads as the empty string, as the API server's field sets do.
        """
        return all(item.matches(fields.get(item.key, "")) for item in self.requirements)
