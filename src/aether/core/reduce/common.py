"""The two ways a reducer ends: the event applied, or it folded into a rejection."""

from __future__ import annotations

from typing import Any

from aether.core.events.base import Event
from aether.core.state.diagnostics import Rejection, RejectionReason
from aether.core.state.state import State


def next_state(state: State, seq: int, changes: dict[str, Any]) -> State:
    """Return `state` at `seq` with the sub-states in `changes` replaced (a total constructor: no rejection lifted)."""
    # `attrs.evolve` looks the fields up on every call; on the endpoint-churn path this explicit constructor is
    # about 3x cheaper. A misspelt key in `changes` makes State() raise TypeError: a bug shows at once.
    fields: dict[str, Any] = {
        "pods": state.pods,
        "captured_nodes": state.captured_nodes,
        "registry": state.registry,
        "kube": state.kube,
        "identity": state.identity,
        "feedback": state.feedback,
        "diagnostics": state.diagnostics,
    }
    fields.update(changes)
    return State(seq=seq, **fields)


def applied(state: State, event: Event, seq: int, **changes: Any) -> State:
    """Return `state` with `changes` applied at `seq`; a rejection in force for the event's subject is lifted."""
    diagnostics = state.diagnostics
    if diagnostics.rejections:
        changes["diagnostics"] = diagnostics.cleared(event.subject)
    return next_state(state, seq, changes)


def rejected(state: State, event: Event, seq: int, *, reason: RejectionReason, message: str) -> State:
    """Return `state` at `seq` with the event recorded as rejected (nothing else changes)."""
    rejection = Rejection(subject=event.subject, reason=reason, message=message, seq=seq)
    return next_state(state, seq, {"diagnostics": state.diagnostics.with_rejection(rejection)})
