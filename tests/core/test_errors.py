"""Tests of `aether.core.errors`: the tree of the core's exceptions and their messages."""

from __future__ import annotations

import pytest

from aether.core.errors import CodecError, CoreError, InternalError, UnknownEvent, UnknownEventKind


def test_every_error_descends_from_core_error_and_the_nearest_builtin() -> None:
    """The tree of the module docstring: each error is a `CoreError` and subclasses the right builtin."""
    assert issubclass(UnknownEvent, CoreError)
    assert issubclass(UnknownEvent, TypeError)
    assert issubclass(CodecError, CoreError)
    assert issubclass(CodecError, ValueError)
    assert issubclass(UnknownEventKind, CodecError)
    assert issubclass(InternalError, CoreError)
    assert not issubclass(InternalError, ValueError | TypeError)


def test_unknown_event_names_the_type_and_the_fix() -> None:
    """`UnknownEvent` names the value's type and says to add it to the table."""
    error = UnknownEvent(value_type="Stray")
    assert str(error) == "no reducer handles values of type 'Stray': add it to the dispatch table"
    assert error.value_type == "Stray"


def test_codec_error_names_what_and_why() -> None:
    """`CodecError` names what could not be decoded and why."""
    assert str(CodecError(what="event record", reason="truncated")) == "cannot decode event record: truncated"


def test_unknown_event_kind_lists_the_field_numbers() -> None:
    """`UnknownEventKind` lists the unknown oneof field numbers and suggests a newer writer."""
    error = UnknownEventKind(what="event record", reason="unknown kind", field_numbers=(80, 81))
    assert str(error) == (
        "cannot decode event record: unknown event kind (oneof field numbers [80, 81]);"
        " it was probably written by a newer version of aether"
    )


def test_internal_error_says_it_is_a_bug() -> None:
    """`InternalError` says that it is a bug and shows the detail."""
    with pytest.raises(InternalError, match=r"^internal error \(this is a bug\): seq went backwards$"):
        raise InternalError(detail="seq went backwards")
