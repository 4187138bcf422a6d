"""`shared_parts`: a body cut where known pieces occur, the pieces themselves kept by reference."""

from __future__ import annotations

from aether.core.project.messages import shared_parts


def test_the_pieces_found_are_the_very_objects_given_and_the_parts_join_into_the_body() -> None:
    """Pieces are looked for in order, each after the previous; the parts always join into the body."""
    first, second = b"BB" * 8, b"DD" * 8
    body = b"a" + first + b"c" + second + b"e"
    parts = shared_parts(body, (first, second))
    assert parts == (b"a", first, b"c", second, b"e")
    assert parts[1] is first
    assert parts[3] is second
    assert b"".join(parts) == body


def test_a_piece_not_found_or_empty_is_not_cut_out() -> None:
    """A missing piece, an empty one and a piece at either end leave no empty part."""
    body = b"xyz"
    assert shared_parts(body, (b"nope", b"")) == (body,)
    assert shared_parts(body, (b"x", b"z")) == (b"x", b"y", b"z")
    assert shared_parts(body, (b"xyz",)) == (b"xyz",)
    assert shared_parts(b"", (b"x",)) == ()
