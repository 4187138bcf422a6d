"""Hypothesis strategies of leader-election schedules: what replicas, a shared Lease store and time may do."""

from __future__ import annotations

from hypothesis import strategies as st

REPLICAS = 3

Step = tuple[str, int | float]
"""`("advance", seconds)`, or `(action, replica)`: `act` (tick, then every request answered at once, as a healthy
API server does), or one piece of a slow exchange: `tick`, `apply` (the store executes the outstanding request),
`deliver` (its answer reaches the replica) or `fail` (the request or its answer is lost)."""


def election_steps(*, max_steps: int = 120) -> st.SearchStrategy[list[Step]]:
    """A schedule: time advancing (in quarter seconds, often past a deadline), replicas ticking, requests reaching
    the store (or lost on the way), responses reaching their replica (or lost)."""
    replica = st.integers(0, REPLICAS - 1)
    advance = st.tuples(st.just("advance"), st.integers(0, 24).map(lambda quarters: quarters / 4))
    act = st.tuples(st.just("act"), replica)
    piece = st.tuples(st.sampled_from(("tick", "apply", "deliver", "fail")), replica)
    return st.lists(st.one_of(advance, act, piece), max_size=max_steps)
