"""Property: incremental projection equals full projection, and every projected snapshot is consistent (T5)."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aether.core.events import Event, Record
from aether.core.project import NodeProjector, project_node
from aether.core.reduce import fold, fold_all
from aether.core.reduce.annotations import UPSTREAMS
from aether.core.snapshot import TYPE_ORDER
from aether.core.state import EMPTY_STATE
from aether.testing import AT, make_pod, pod_added
from property_tests.strategies import MAX_EVENTS, SERVICES, event_sequences, upsert_runs
from property_tests.strategies import records as records_strategy


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


CALLER = pod_added(
    make_pod(
        "caller-1",
        namespace="default",
        service_account="caller",
        annotations={UPSTREAMS: ",".join(SERVICES)},
        ips=("10.250.0.1",),
    )
)
"""A pod of node-a declaring every service the registry strategies draw: their endpoint maps reach the snapshot."""


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.one_of(upsert_runs(), records_strategy()),
    cuts=st.lists(st.integers(0, MAX_EVENTS), max_size=8),
)
def test_incremental_projection_equals_full_projection_after_batches(
    records: tuple[Record, ...], cuts: list[int]
) -> None:
    """States folded in batches as the journal folds them (`fold_all`: runs of upserts as one step, so one step of
    the registry's history replaces many maps), each projected: the projector equals `project_node`."""
    projector = NodeProjector(node_name="node-a")
    state = fold(EMPTY_STATE, Record(seq=1, event=CALLER))
    bounds = sorted({0, *(cut for cut in cuts if cut < len(records)), len(records)})
    for start, end in itertools.pairwise(bounds):
        state = fold_all(
            state, (Record(seq=record.seq + 1, event=record.event) for record in records[start:end])
        )
        incremental = projector.project(state, now=AT)
        full = project_node(state, node_name="node-a", now=AT)
        assert incremental == full
        assert [incremental.version(type_url) for type_url in TYPE_ORDER] == [
            full.version(type_url) for type_url in TYPE_ORDER
        ]
