"""`aether.sync.groups`: the exceptions nested nurseries wrap, dug out."""

from __future__ import annotations

from aether.sync import first_leaf, leaves


def test_first_leaf_and_leaves_see_through_nested_groups() -> None:
    inner = ValueError("inner")
    later = KeyError("later")
    group = BaseExceptionGroup("outer", [BaseExceptionGroup("middle", [inner, OSError("sibling")]), later])
    assert first_leaf(group) is inner
    assert [type(error) for error in leaves(group)] == [ValueError, OSError, KeyError]
    assert leaves(group)[-1] is later
