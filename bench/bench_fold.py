"""Fold throughput for endpoint churn, and how one fold step scales from 100 to 10,000 services.

Structural sharing (immutables.Map, a HAMT) should make a fold step cost O(log n): the ratio of a step at 10,000
services to one at 100 services is the figure that shows it. The reference is the 100-service step, measured in
the same run.

`fold_all` folds as replay and the journal do (`fold_many`: a run of endpoint upserts as one step); the second
reference, measured in the same run, is `fold_event` applied to each event in turn (what every fold cost before).
"""

from __future__ import annotations

import sys

from _common import best_of, churn_records, registry_state, timed, write_results

from aether.core.events import Record
from aether.core.reduce import fold_all, fold_event
from aether.core.state import State

EVENTS = 100_000
ENDPOINTS_PER_SERVICE = 10


def _one_by_one(state: State, records: list[Record]) -> State:
    for record in records:
        state = fold_event(state, record.event, seq=record.seq)
    return state


def fold_rate(services: int, *, one_by_one: bool = False) -> tuple[float, float]:
    """Return (events/s, microseconds per event) of endpoint churn over `services` x 10 endpoints."""
    state = registry_state(services=services, endpoints_per_service=ENDPOINTS_PER_SERVICE)
    records = churn_records(
        services=services, endpoints_per_service=ENDPOINTS_PER_SERVICE, count=EVENTS, first_seq=2
    )
    fold = _one_by_one if one_by_one else fold_all
    seconds = best_of(3, lambda: timed(lambda: fold(state, records)))
    return EVENTS / seconds, seconds / EVENTS * 1e6


def main() -> None:
    small_rate, small_step = fold_rate(100)
    large_rate, large_step = fold_rate(10_000)
    single_rate, single_step = fold_rate(10_000, one_by_one=True)
    ratio = large_step / small_step
    print("fold: endpoint churn (EndpointUpdated), best of 3 runs of 100,000 events")
    print(f"  100 services x 10 endpoints     {small_rate:>12,.0f} events/s   {small_step:6.2f} us/step")
    print(f"  10,000 services x 10 endpoints  {large_rate:>12,.0f} events/s   {large_step:6.2f} us/step")
    print(f"  step ratio 10,000 / 100 services: {ratio:.2f} (1.00 = size-independent)")
    print(
        f"  reference, fold_event one by one at 10,000: {single_rate:>9,.0f} events/s   {single_step:6.2f} us/step"
        f"   (fold_all is {large_rate / single_rate:.2f}x)"
    )
    print(f"  aim >= 250,000 events/s at 10,000 services: {'met' if large_rate >= 250_000 else 'NOT met'}")
    print(f"  aim >= 100,000 events/s at 10,000 services: {'met' if large_rate >= 100_000 else 'NOT met'}")
    write_results(
        "fold",
        {
            "events_per_second_100_services": round(small_rate),
            "events_per_second_10000_services": round(large_rate),
            "step_us_100_services": round(small_step, 3),
            "step_us_10000_services": round(large_step, 3),
            "step_ratio_10000_over_100": round(ratio, 3),
            "events_per_second_10000_services_one_by_one": round(single_rate),
            "fold_all_over_one_by_one": round(large_rate / single_rate, 3),
        },
    )


if __name__ == "__main__":
    sys.exit(main())
