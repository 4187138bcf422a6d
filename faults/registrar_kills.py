"""`aether registrar` (embedded store) killed -9 in the middle of concurrent writes, `trials` times: every write it
acknowledged must be there after the restart (a registration listed, an unregistration not), `RegistrarFigures`.

A write the kill cut off (no answer) may or may not have happened; only acknowledged ones are checked.
"""

from __future__ import annotations

import random
from pathlib import Path

import attrs
import grpc
import trio

from aether.proto.registrar.v1 import registrar_pb2 as pb
from faults.processes import POLL, START_TIMEOUT, RoleFailed, RoleProcess, running
from tests.registrar._grpc import WEB, call, registration

WRITERS = 4
"""Concurrent writers (each its own connection), as several agents registering at once."""
WRITE_WINDOW = (0.2, 1.0)
"""Seconds of writing before the kill, drawn per trial: kills land anywhere in a commit, early and late."""
UNREGISTER_EVERY = 4
"""Each writer unregisters one of its acknowledged endpoints every this many writes."""


@attrs.frozen(kw_only=True)
class RegistrarFigures:
    """What the kill -9 trials measured."""

    trials: int
    acknowledged: int
    """Writes the registrar answered OK (registrations and unregistrations)."""
    lost: int
    """Acknowledged writes not in the store after the restart (the aim: 0)."""
    cut: int
    """Writes the kill cut off (no answer): either outcome is right for those."""
    losses: tuple[str, ...]

    def lines(self) -> list[str]:
        return [
            f"registrar: {self.trials} kill -9 trials under {WRITERS} concurrent writers: {self.acknowledged}"
            f" writes acknowledged, {self.lost} acknowledged but lost (aim 0), {self.cut} cut off by the kill",
            *(f"  lost: {loss}" for loss in self.losses),
        ]


def registrar_role(work_dir: Path) -> RoleProcess:
    """`aether registrar` with the embedded store in `work_dir/data`, on the Unix socket `work_dir/registrar.sock`."""
    arguments = ["registrar", "--backend", "embedded", "--data-dir", str(work_dir / "data")]
    arguments += ["--listen", f"unix:{work_dir / 'registrar.sock'}"]
    return RoleProcess(name="registrar", arguments=arguments, admin_socket=None, work_dir=work_dir)


async def list_endpoints(role: RoleProcess) -> set[str]:
    """The IPs of `WEB` the registrar lists, once it answers.

    Raises:
        RoleFailed: It exited, or did not answer within `START_TIMEOUT`.
    """
    socket = role.work_dir / "registrar.sock"
    with trio.move_on_after(START_TIMEOUT):
        while True:
            role.check_alive()
            try:
                listing = await trio.to_thread.run_sync(
                    call, socket, "ListAllEndpoints", pb.ListAllEndpointsRequest()
                )
            except grpc.RpcError:
                await trio.sleep(POLL)
                continue
            return (
                {endpoint.ip for endpoint in listing.services[WEB].endpoints}
                if WEB in listing.services
                else set()
            )
    raise RoleFailed(f"registrar did not answer within {START_TIMEOUT} s:\n{role.stderr_tail()}")


@attrs.define
class _Ledger:
    """What the writers were told: the IPs whose registration (and unregistration) the registrar acknowledged."""

    registered: set[str] = attrs.Factory(set)
    unregistered: set[str] = attrs.Factory(set)
    in_doubt: set[str] = attrs.Factory(set)
    """IPs with a write cut off by a kill: either state is right for them."""
    acknowledged: int = 0
    cut: int = 0

    def expected(self) -> tuple[set[str], set[str]]:
        """(IPs that must be listed, IPs that must not be)."""
        present = self.registered - self.unregistered - self.in_doubt
        return present, self.unregistered - self.in_doubt


async def _write(socket: Path, ledger: _Ledger, ip: str, request: object) -> bool:
    try:
        await trio.to_thread.run_sync(call, socket, type(request).__name__.removesuffix("Request"), request)
    except grpc.RpcError:
        ledger.cut += 1
        ledger.in_doubt.add(ip)
        return False
    ledger.acknowledged += 1
    return True


async def _writer(socket: Path, ledger: _Ledger, trial: int, writer: int) -> None:
    """Register fresh endpoints (and unregister some acknowledged ones) until the registrar stops answering."""
    mine: list[str] = []
    for step in range(1, 60_000):
        ip = f"10.{trial % 250}.{writer * 60 + step // 250}.{step % 250 + 1}"
        if not await _write(socket, ledger, ip, registration(ip)):
            return
        ledger.registered.add(ip)
        mine.append(ip)
        if step % UNREGISTER_EVERY == 0:
            gone = mine.pop(0)
            if not await _write(
                socket, ledger, gone, pb.UnregisterEndpointRequest(service_name=WEB, ips=[gone])
            ):
                return
            ledger.unregistered.add(gone)


async def registrar_kills(work_dir: Path, *, trials: int, seed: int = 13) -> RegistrarFigures:
    """Run `trials` kill -9 trials against one registrar's store (it keeps its data over every restart)."""
    rng = random.Random(seed)
    role = registrar_role(work_dir / "registrar")
    ledger = _Ledger()
    losses: list[str] = []
    lost = 0
    async with running(role):
        for trial in range(trials):
            await list_endpoints(role)
            async with trio.open_nursery() as nursery:
                for writer in range(WRITERS):
                    nursery.start_soon(_writer, role.work_dir / "registrar.sock", ledger, trial, writer)
                await trio.sleep(rng.uniform(*WRITE_WINDOW))
                await role.kill()
            await role.start()
            listed = await list_endpoints(role)
            present, absent = ledger.expected()
            missing, resurrected = present - listed, absent & listed
            lost += len(missing) + len(resurrected)
            for ip in sorted(missing)[:3]:
                losses.append(f"trial {trial}: acknowledged registration of {ip} not listed")
            for ip in sorted(resurrected)[:3]:
                losses.append(f"trial {trial}: acknowledged unregistration of {ip} undone")
    return RegistrarFigures(
        trials=trials, acknowledged=ledger.acknowledged, lost=lost, cut=ledger.cut, losses=tuple(losses[:10])
    )
