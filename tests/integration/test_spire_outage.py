"""The SPIRE agent (both SPIFFE endpoints of both nodes) down for a few seconds under traffic: the loop of
`faults/spire_outage.py`, whose full run (`nox -s faults -- --only spire`) keeps them down for a minute."""

from __future__ import annotations

from pathlib import Path

import pytest

from aether.identity.streams import SPIFFE_BACKOFF
from faults.spire_outage import redial_bound, spire_outage
from tests.needs import ROOT, needs

pytestmark = [needs(ROOT), pytest.mark.slow]
"""The projected capture listeners are transparent (IP_TRANSPARENT); the outage and the mesh take ~10 s."""

OUTAGE = 3.0
"""Seconds the endpoints stay down: long enough for several redials with a growing backoff."""


async def test_envoy_serves_the_last_good_svids_through_an_outage_and_the_agents_redial_with_backoff(
    tmp_path: Path,
) -> None:
    """No request fails while the endpoints are down, node-b's Envoy serves the SVID it held before at every
    look, the clients redial (never more often than the backoff allows, never waiting above its cap), both nodes
    connect again once the endpoints are back, and the rotation made during the outage is then served."""
    figures = await spire_outage(tmp_path, outage=OUTAGE)
    assert (figures.failed, figures.failures) == (0, ()), figures.lines()
    assert figures.requests > 0
    assert figures.looks >= 1
    assert figures.served_unchanged
    assert 1 <= figures.redials <= figures.redial_bound, figures.lines()
    assert figures.longest_wait <= SPIFFE_BACKOFF.cap
    assert figures.rotated_after


def test_the_redial_bound_counts_the_waits_that_fit() -> None:
    """0.1 s base: waits of at least 0.05, 0.1, 0.2 s...; in 0.3 s the broken connection and two redials fit (at
    0.05 and 0.15 s; the next would be at 0.35 s), plus one for the late read; with the 5 s cap, a minute allows
    about 60 / 2.5 more."""
    assert redial_bound(0.3, backoff=SPIFFE_BACKOFF) == 4
    assert redial_bound(0.3, backoff=SPIFFE_BACKOFF, clients=2) == 8
    assert 24 <= redial_bound(60.0, backoff=SPIFFE_BACKOFF) <= 32
