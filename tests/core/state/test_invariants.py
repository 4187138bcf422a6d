"""`state_problems` finds every broken invariant of a state that did not come from folding."""

from __future__ import annotations

import attrs
import immutables

from aether.core.events import Protocol
from aether.core.state import (
    MAX_REJECTIONS,
    Diagnostics,
    RegistryState,
    Rejection,
    RejectionReason,
    state_problems,
)
from aether.testing import (
    endpoint_added,
    fold_events,
    make_endpoint,
    make_pod,
    pod_added,
    registry_service_added,
)


def test_a_folded_state_has_no_problems() -> None:
    """Folding keeps every invariant."""
    state = fold_events(
        registry_service_added("default/web"), endpoint_added(make_endpoint()), pod_added(make_pod())
    )
    assert state_problems(state) == ()


def test_endpoints_outside_the_catalog_and_misfiled_endpoints_are_reported() -> None:
    """An endpoint map for an uncatalogued service, an empty map and a misfiled endpoint are each named."""
    endpoint = make_endpoint("10.0.0.1")
    registry = RegistryState(
        services=immutables.Map({"default/web": True}),
        endpoints=immutables.Map(
            {
                "default/web": immutables.Map({(Protocol.HTTP, "10.0.0.9"): endpoint}),
                "default/gone": immutables.Map(),
            }
        ),
    )
    state = attrs.evolve(fold_events(), registry=registry)
    assert state_problems(state) == (
        "endpoints of 'default/gone' but the service is not in the catalog",
        "service 'default/gone' holds an empty endpoint map",
        "endpoint ('default/web', <Protocol.HTTP: 1>, '10.0.0.1') stored under"
        " ('default/web', <Protocol.HTTP: 1>, '10.0.0.9')",
    )


def test_a_misfiled_pod_is_reported() -> None:
    """A pod stored under another key than its own is named."""
    state = fold_events(pod_added(make_pod()))
    record = next(iter(state.pods.values()))
    state = attrs.evolve(state, pods=immutables.Map({"default/other": record}))
    assert state_problems(state) == (f"pod {record.pod.key!r} stored under 'default/other'",)


def test_rejection_bookkeeping_problems_are_reported() -> None:
    """Too many rejections, a total below the count kept, and a misfiled or future rejection are each named."""
    rejection = Rejection(subject="pod/default/a", reason=RejectionReason.UNKNOWN_POD, message="m", seq=5)
    rejections = immutables.Map({f"pod/default/{index}": rejection for index in range(MAX_REJECTIONS + 1)})
    state = attrs.evolve(fold_events(), diagnostics=Diagnostics(rejections=rejections, rejected_total=1))
    problems = state_problems(state)
    assert problems[:2] == (
        f"{MAX_REJECTIONS + 1} rejections kept, more than {MAX_REJECTIONS}",
        f"rejected_total 1 < {MAX_REJECTIONS + 1} rejections kept",
    )
    assert problems[2] == "rejection of 'pod/default/a' at seq 5 stored under 'pod/default/0'"
    assert len(problems) == 2 + MAX_REJECTIONS + 1
