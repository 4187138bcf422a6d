"""Errors of the pure core.

The tree::

    CoreError                      root of every error the core raises
    ├── UnknownEvent (TypeError)   a value that is no event of the catalog reached a dispatch table
    ├── CodecError (ValueError)    bytes that do not decode to an event or a state, or a value that cannot encode
    │   └── UnknownEventKind       an event kind this version does not know (written by a newer version)
    └── InternalError              a broken invariant: this is a bug

Bad *input* (an annotation that does not parse, a pod removed that was never added) is not an error here: reducers
fold it into a `Rejection` (see `aether.core.state.diagnostics`).
"""

from __future__ import annotations

import attrs


class CoreError(Exception):
    """Root of the errors the core raises."""


@attrs.define(kw_only=True, str=False)
class UnknownEvent(CoreError, TypeError):
    """A dispatch table met a value that is not an event of the catalog."""

    value_type: str

    def __str__(self) -> str:
        return f"no reducer handles values of type {self.value_type!r}: add it to the dispatch table"


@attrs.define(kw_only=True, str=False)
class CodecError(CoreError, ValueError):
    """Bytes that do not decode to what the codec was asked for, or a value that cannot be encoded."""

    what: str
    reason: str
    operation: str = "decode"
    """`decode`, or `encode` for a value its wire type cannot hold."""

    def __str__(self) -> str:
        return f"cannot {self.operation} {self.what}: {self.reason}"


@attrs.define(kw_only=True, str=False)
class UnknownEventKind(CodecError):
    """An event record whose kind this version does not know, most likely written by a newer version."""

    field_numbers: tuple[int, ...]

    def __str__(self) -> str:
        return (
            f"cannot decode {self.what}: unknown event kind (oneof field numbers {list(self.field_numbers)!r});"
            " it was probably written by a newer version of aether"
        )


@attrs.define(kw_only=True, str=False)
class InternalError(CoreError):
    """An invariant of the core does not hold: this is a bug."""

    detail: str

    def __str__(self) -> str:
        return f"internal error (this is a bug): {self.detail}"
