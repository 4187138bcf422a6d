"""The two ways a reducer ends: the event applied, or it folded into a rejection."""

from __future__ import annotations

from typing import Any

import attrs

from aether.core.events.base import Event
from aether.core.state.diagnostics import Rejection, RejectionReason
from aether.core.state.state import State


def applied(state: State, event: Event, seq: int, **changes: Any) -> State:
    """Return `state` with `changes` applied at `seq`; a rejection in force for the event's subject is lifted."""
    diagnostics = state.diagnostics
    if diagnostics.rejections:
        changes["diagnostics"] = diagnostics.cleared(event.subject)
    return attrs.evolve(state, seq=seq, **changes)


def rejected(state: State, event: Event, seq: int, *, reason: RejectionReason, message: str) -> State:
    """Return `state` at `seq` with the event recorded as rejected (nothing else changes)."""
    rejection = Rejection(subject=event.subject, reason=reason, message=message, seq=seq)
    return attrs.evolve(state, seq=seq, diagnostics=state.diagnostics.with_rejection(rejection))
