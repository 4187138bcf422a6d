"""Tests of `aether.testing.selectors`: the API server's label and field selector grammar, parsed and matched."""

from __future__ import annotations

import pytest

from aether.testing.selectors import FieldSelector, LabelSelector, Operator, Requirement, SelectorError


def test_label_terms_parse_into_requirements() -> None:
    """Equality, inequality, set membership and existence, comma-joined outside parentheses."""
    selector = LabelSelector.parse("app=web, tier in (a,b),env!=prod,canary,!legacy,x==1")
    assert selector.requirements == (
        Requirement(key="app", operator=Operator.EQUALS, values=frozenset({"web"})),
        Requirement(key="tier", operator=Operator.IN, values=frozenset({"a", "b"})),
        Requirement(key="env", operator=Operator.NOT_EQUALS, values=frozenset({"prod"})),
        Requirement(key="canary", operator=Operator.EXISTS),
        Requirement(key="legacy", operator=Operator.DOES_NOT_EXIST),
        Requirement(key="x", operator=Operator.EQUALS, values=frozenset({"1"})),
    )


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ("", {}, True),
        ("aether.io/managed=true", {"aether.io/managed": "true"}, True),
        ("aether.io/managed=true", {"aether.io/managed": "false"}, False),
        ("env!=prod", {}, True),
        ("tier notin (a,b)", {"tier": "c"}, True),
        ("tier notin (a,b)", {}, True),
        ("tier in (a,b)", {}, False),
        ("!legacy", {"legacy": ""}, False),
        ("canary", {"canary": ""}, True),
    ],
)
def test_label_matching_follows_the_api_rules(selector: str, labels: dict[str, str], matches: bool) -> None:
    """A missing key satisfies `!=` and `notin`, never `=` or `in`."""
    assert LabelSelector.parse(selector).matches(labels) is matches


def test_bad_selectors_name_the_term() -> None:
    """A term that fits no form is refused with the selector and the term."""
    with pytest.raises(
        SelectorError,
        match=r"^selector 'app=web,=x': term '=x' is not 'key=value', 'key in \(a,b\)' or '!key'$",
    ):
        LabelSelector.parse("app=web,=x")
    with pytest.raises(
        SelectorError,
        match=r"^selector 'spec.nodeName': term 'spec.nodeName' is not 'field=value' or 'field!=value'$",
    ):
        FieldSelector.parse("spec.nodeName")


def test_field_selectors_compare_values_and_read_missing_fields_as_empty() -> None:
    """`spec.nodeName=node-1` matches only that node; a field the object lacks reads as ''."""
    selector = FieldSelector.parse("spec.nodeName=node-1,status.phase!=Failed")
    assert selector.fields == frozenset({"spec.nodeName", "status.phase"})
    assert selector.matches({"spec.nodeName": "node-1"}) is True
    assert selector.matches({"spec.nodeName": "node-2"}) is False
    assert FieldSelector.parse("spec.nodeName=").matches({}) is True
