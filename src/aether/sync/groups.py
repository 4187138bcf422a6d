"""What a nursery raised: the exceptions inside the `ExceptionGroup`s that nested nurseries wrap, one per level.

A failure three nurseries down reaches its caller as a group in a group in a group; `first_leaf` digs out the one
exception that says what happened (what a role prints, or re-raises as itself), `leaves` lists them all (when a
caller sorts them by kind).
"""

from __future__ import annotations

__all__ = ["first_leaf", "leaves"]


def leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """The exceptions of `group`, nested groups flattened, in order."""
    found: list[BaseException] = []
    for item in group.exceptions:
        found.extend(leaves(item) if isinstance(item, BaseExceptionGroup) else [item])
    return found


def first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first exception of `group` that is not a group itself."""
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error
