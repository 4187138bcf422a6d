"""Property: incremental projection equals full projection, and every projected snapshot is consistent (T5)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aether.core.events import Event, Record
from aether.core.project import NodeProjector, project_node
from aether.core.reduce import fold
from aether.core.snapshot import TYPE_ORDER
from aether.core.state import EMPTY_STATE
from property_tests.strategies import event_sequences


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=event_sequences(),
    node_name=st.sampled_from(("node-a", "")),
    projected=st.lists(st.booleans(), min_size=40, max_size=40),
)
def test_incremental_projection_equals_full_projection(
    events: tuple[Event, ...], node_name: str, projected: list[bool]
) -> None:
    """After any event sequence, a projector that saw some of the intermediate states (in order) projects what
    `project_node` projects from scratch: the same resources, versions and not-found names, consistent."""
    projector = NodeProjector(node_name=node_name)
    state = EMPTY_STATE
    for seq, (event, project_now) in enumerate(zip(events, projected, strict=False), 1):
        state = fold(state, Record(seq=seq, event=event))
        if not project_now and seq != len(events):
            continue
        now = event.observed_at
        incremental = projector.project(state, now=now)
        full = project_node(state, node_name=node_name, now=now)
        assert incremental == full
        assert [incremental.version(type_url) for type_url in TYPE_ORDER] == [
            full.version(type_url) for type_url in TYPE_ORDER
        ]
        assert full.consistent() == ()
