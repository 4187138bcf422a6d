"""The node projector's memo cells: `Last`, a value recomputed only when its inputs changed, and `interned`, which
keeps an equal value's previous object.

Both serve one rule: the node's units compare their inputs by identity (`units.same_inputs`), so a value computed
again and found equal must stay the very object it was, or every unit keyed on it is recomputed for nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from aether.core.project.units import same_inputs

T = TypeVar("T")


class Last:
    """The value last computed from some inputs, recomputed only when one of them changed (see `same_inputs`)."""

    __slots__ = ("inputs", "value")

    def __init__(self) -> None:
        self.inputs: tuple[Any, ...] | None = None
        self.value: Any = None

    def get(self, inputs: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
        """Return the value of `inputs`: the held one when they are the inputs it came from, else `compute()`."""
        if not same_inputs(self.inputs, inputs):
            self.inputs, self.value = inputs, compute()
        return self.value


def interned(previous: T | None, current: T) -> T:
    """Return `previous` when it equals `current`, so that equal contexts stay one object (identity checks)."""
    return previous if previous is not None and previous == current else current
