"""The fault loops of `faults/` (`nox -s faults`), small: the same code, a few cycles each.

Real processes from the outside: `aether edge` and `aether agent` killed -9 and restarted under traffic through
their Envoy, agent hand-overs to a `--standby` under the fixed-rate load, the registrar killed -9 under concurrent
writes, bad inputs on every interface.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from faults.bad_inputs import bad_inputs
from faults.handovers import standby_handovers
from faults.registrar_kills import registrar_kills
from faults.restarts import role_restarts
from tests.needs import needs

pytestmark = pytest.mark.slow

RESTARTS = {"edge": 3, "agent": 2}
"""Kill -9 restarts per role. The agent gets two: each of its starts costs 2-5 s of imports on a loaded machine,
and the test must stay well under 30 s there."""
RATE = 100.0
"""Requests per second in the short loops: enough that every restart happens under traffic."""
RESYNC_AIM = 1.0
"""Seconds from the restarted plane answering to Envoy SYNCED with it (the issue's aim)."""


@pytest.mark.parametrize("role", ["edge", "agent"])
async def test_a_plane_killed_and_restarted_under_traffic_fails_no_request_and_resyncs_within_a_second(
    tmp_path: Path, role: str
) -> None:
    """Kill -9 restarts of the plane under traffic: no request fails, and Envoy is SYNCED with each new process
    within a second of it answering (with Envoy's default ADS redial backoff, the agent's took up to 7 s)."""
    figures = await role_restarts(role, tmp_path, restarts=RESTARTS[role], rate=RATE)
    assert (figures.restarts, figures.failed, figures.failures) == (RESTARTS[role], 0, ())
    assert figures.requests > 0
    assert figures.resync_max <= RESYNC_AIM, figures.resync


@needs("cc")
async def test_agent_hand_overs_to_a_standby_fail_no_request(tmp_path: Path) -> None:
    """Two hand-overs (the owner stopped with SIGTERM, then with SIGKILL) to a `--standby` agent under the
    fixed-rate load: each standby takes over, Envoy gets SYNCED with it, and not one request fails."""
    figures = await standby_handovers(tmp_path, handovers=2, rate=RATE)
    assert (figures.handovers, figures.killed, figures.failed, figures.failures) == (2, 1, 0, ())
    assert figures.requests > 0
    assert len(figures.resync) == 2


async def test_the_registrar_killed_mid_write_keeps_every_acknowledged_write(tmp_path: Path) -> None:
    """Three kill -9 trials under four concurrent writers: every acknowledged registration and unregistration holds
    after the restart."""
    figures = await registrar_kills(tmp_path, trials=3)
    assert (figures.trials, figures.lost, figures.losses) == (3, 0, ())
    assert figures.acknowledged > 0


async def test_bad_inputs_on_every_interface_crash_nothing_and_the_good_state_holds(tmp_path: Path) -> None:
    """A handful of bad inputs on each interface: none crashes a process or a handler; afterwards the edge's Envoy
    follows a route change and every state holds exactly the good inputs."""
    figures = await bad_inputs(tmp_path, count=40)
    assert figures.crashes == ()
    assert set(figures.tried) == {"xds", "registrar", "cni-plugin", "cni-server", "mesh-dns", "manifests"}
    assert figures.checks == {
        "route change reached envoy": True,
        "edge state is the good manifests": True,
        "registrar holds the good registrations": True,
        "mesh-dns answers its record": True,
        "cni service answers Status": True,
    }
