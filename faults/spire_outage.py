"""The SPIRE agent down under traffic: `spire_outage(work_dir, outage=60.0)` takes both nodes' SPIFFE endpoints (the
Broker API and the Workload API, the two sockets of one SPIRE agent) down for `outage` seconds while requests flow
between two real Envoys over mTLS with broker-issued SVIDs, then brings them back, and reports `OutageFigures`.

What must hold: not one request fails, Envoy serves the very SVIDs it held before the outage until the endpoints are
back (the journal keeps them; nothing expires within the outage), the agents redial with backoff (never a busy loop,
never a wait above `SPIFFE_BACKOFF.cap`), and a rotation the broker made while it was unreachable reaches Envoy
once it is back.

The mesh is `tests.integration.test_spiffe_mesh`'s (two agents in-process, each with its real Envoy; fake SPIFFE
servers of the published protos), so it needs root (transparent capture listeners).
"""

from __future__ import annotations

import functools
from pathlib import Path

import attrs
import trio

from aether.identity.broker import BrokerClient
from aether.identity.streams import SPIFFE_BACKOFF
from aether.identity.workload_api import WorkloadIdentity
from aether.rpc.backoff import Backoff
from aether.testing.envoy import wait_for
from tests.integration.test_mesh_e2e import CART_ID, CART_IPS, NAMESPACE, request
from tests.integration.test_spiffe_mesh import Mesh, Node, open_mesh, served_chain

RATE = 50.0
"""Requests per second from node-a's pod to node-b's during the loop."""
BACK_TIMEOUT = 60.0
"""Seconds the agents get to be connected again, and the rotation to reach Envoy, once the endpoints are back."""
WATCH_INTERVAL = 0.5
"""Seconds between two looks at the chain node-b's Envoy serves during the outage."""


@attrs.frozen(kw_only=True)
class OutageFigures:
    """What one outage measured."""

    outage: float
    """Seconds the endpoints were down (measured)."""
    requests: int
    failed: int
    """Requests without a 200 (the aim: 0)."""
    failures: tuple[str, ...]
    """The first few failed requests, described."""
    looks: int
    """Times node-b's Envoy config was read during the outage."""
    served_unchanged: bool
    """Every look found the SVID served before the outage."""
    redials: int
    """Failed connections of node-b's two SPIFFE clients during the outage (each followed by a backoff)."""
    redial_bound: int
    """The most redials the backoff allows in `outage` seconds (more would be a busy loop)."""
    longest_wait: float
    """The longest backoff either client of node-b waited (the aim: at most `cap`)."""
    cap: float
    reconnect: float
    """Seconds from the endpoints back to both SPIFFE clients of both nodes connected again."""
    rotated_after: bool
    """The rotation made during the outage reached node-b's Envoy after it."""

    @property
    def healthy(self) -> bool:
        """Every aim met (`reconnect` within the cap plus a second of slack for the dial and a loaded machine)."""
        return (
            self.failed == 0
            and self.served_unchanged
            and 1 <= self.redials <= self.redial_bound
            and self.longest_wait <= self.cap
            and self.reconnect <= self.cap + 1.0
            and self.rotated_after
        )

    def lines(self) -> list[str]:
        """The figures, as the loop prints them."""
        return [
            f"spire: SPIFFE endpoints down {self.outage:.1f} s under traffic: {self.requests} requests,"
            f" {self.failed} failed (aim 0); last good SVID served at {self.looks} looks:"
            f" {'unchanged' if self.served_unchanged else 'CHANGED'}; {self.redials} redials"
            f" (backoff bound {self.redial_bound}), longest wait {self.longest_wait:.2f} s (cap {self.cap:g} s);"
            f" reconnected {self.reconnect * 1000:.0f} ms after the endpoints came back (aim <= cap + 1 s);"
            f" rotation made during the outage served after it: {self.rotated_after}",
            *(f"  failure: {failure}" for failure in self.failures),
        ]


def redial_bound(seconds: float, *, backoff: Backoff, clients: int = 1) -> int:
    """The most failed connections `clients` clients redialling with `backoff` can count in `seconds`: the one that
    broke, then one per wait, each at least half its ceiling (equal jitter); plus one each for the moment the
    count is read after `seconds`."""
    if backoff.base <= 0:
        raise ValueError(f"{backoff!r}: a backoff without a base bounds nothing")
    spent, failures = 0.0, 0
    while spent <= seconds:
        failures += 1
        spent += min(backoff.cap, backoff.base * 2.0 ** (failures - 1)) / 2
    return clients * (failures + 1)


def _clients(node: Node) -> tuple[BrokerClient, WorkloadIdentity]:
    broker, identity = node.agent.broker, node.agent.workload_identity
    assert broker is not None, "the mesh's agents broker their pods' SVIDs"
    assert identity is not None, "the mesh's agents take their own SVID from the Workload API"
    return broker, identity


def _redials(node: Node) -> int:
    broker, identity = _clients(node)
    return broker.statistics().failures + identity.failures


def _connects(node: Node) -> tuple[int, int]:
    broker, identity = _clients(node)
    return broker.statistics().connects, identity.connects


def _longest_wait(node: Node) -> float:
    broker, identity = _clients(node)
    return max(broker.statistics().longest_wait, identity.longest_wait)


async def _stop(node: Node) -> None:
    await node.broker.stop()
    await node.workload.stop()


async def _start(mesh: Mesh, node: Node) -> None:
    await mesh.nursery.start(node.workload.serve, node.broker_socket.parent / "workload.sock")
    await mesh.nursery.start(node.broker.serve, node.broker_socket)


async def spire_outage(work_dir: Path, *, outage: float = 60.0, rate: float = RATE) -> OutageFigures:
    """Run the loop of the module docstring with the endpoints down `outage` seconds; return its figures."""
    async with open_mesh(work_dir) as mesh:
        statuses: list[int] = []
        failures: list[str] = []
        stop = trio.Event()

        async def traffic() -> None:
            while not stop.is_set():
                try:
                    status = (await request()).status
                except (OSError, trio.TooSlowError, ValueError) as exc:
                    status, detail = 0, f"{type(exc).__name__}: {exc}"
                else:
                    detail = f"status {status}"
                statuses.append(status)
                if status != 200 and len(failures) < 5:
                    failures.append(f"request {len(statuses)}: {detail}")
                await trio.sleep(1 / rate)

        async def at_least(count: int) -> bool:
            return len(statuses) >= count

        async with trio.open_nursery() as nursery:
            nursery.start_soon(traffic)
            await wait_for(functools.partial(at_least, 5), timeout=BACK_TIMEOUT)
            before = await served_chain(mesh.b.envoy)
            redials_before = _redials(mesh.b)
            connects_before = {node.name: _connects(node) for node in (mesh.a, mesh.b)}
            down_at = trio.current_time()
            for node in (mesh.a, mesh.b):
                await _stop(node)
            for name in CART_IPS:  # rotated while unreachable: served once the broker is back
                mesh.b.broker.set_svids(f"{NAMESPACE}/{name}", [mesh.ca.issue(CART_ID)])
            looks, unchanged = 0, True
            while trio.current_time() - down_at < outage:
                looks += 1
                unchanged &= await served_chain(mesh.b.envoy) == before
                await trio.sleep(min(WATCH_INTERVAL, max(0.0, outage - (trio.current_time() - down_at))))
            redials = _redials(mesh.b) - redials_before
            for node in (mesh.a, mesh.b):
                await _start(mesh, node)
            up_at = trio.current_time()
            measured = up_at - down_at

            async def reconnected() -> bool:
                return all(
                    all(
                        now > then
                        for now, then in zip(_connects(node), connects_before[node.name], strict=True)
                    )
                    for node in (mesh.a, mesh.b)
                )

            await wait_for(reconnected, timeout=BACK_TIMEOUT, interval=0.01)
            reconnect = trio.current_time() - up_at

            async def rotated() -> bool:
                return await served_chain(mesh.b.envoy) not in ("", before)

            rotated_after = True
            try:
                await wait_for(rotated, timeout=BACK_TIMEOUT, interval=0.05)
            except trio.TooSlowError:
                rotated_after = False
            await wait_for(functools.partial(at_least, len(statuses) + 10), timeout=BACK_TIMEOUT)
            stop.set()
        return OutageFigures(
            outage=measured,
            requests=len(statuses),
            failed=sum(status != 200 for status in statuses),
            failures=tuple(failures),
            looks=looks,
            served_unchanged=unchanged,
            redials=redials,
            redial_bound=redial_bound(measured, backoff=SPIFFE_BACKOFF, clients=2),
            longest_wait=_longest_wait(mesh.b),
            cap=SPIFFE_BACKOFF.cap,
            reconnect=reconnect,
            rotated_after=rotated_after,
        )
