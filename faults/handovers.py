"""Agent hand-overs with `--standby` under a fixed-rate load: `standby_handovers(...)` reports `HandoverFigures`.

Each hand-over is a DaemonSet roll's on one node: a new agent starts with `--standby` on the owner's log (it
replays it and follows it), the owner stops, and the standby takes the log's lock, binds the sockets and serves
the node's Envoy, which reconnects and gets SYNCED again. The owner stops with SIGTERM (the kubelet's stop of the
old pod) and, every other time, with SIGKILL (a crash or an OOM kill of the owner while a standby waits). The
load (`aether.testing.fixed_rate`, 250 requests/s by default, a fresh connection each) goes from the caller pod's
outbound listener through mTLS to the callee's application; Envoy serves on with the config it holds while no
agent answers, so not one request may fail.
"""

from __future__ import annotations

import signal
from contextlib import AsyncExitStack
from pathlib import Path

import attrs
import trio

from aether.testing.fixed_rate import compile_fixed_rate, fixed_rate_load
from faults.processes import RoleFailed, RoleProcess, quantile, running
from faults.restarts import open_agent_scene

HANDOVER_RATE = 250.0
"""Requests per second through Envoy during the hand-overs (the issue's figure)."""
STANDBY_TIMEOUT = 60.0
"""Seconds a standby gets to say it stands by (it replays the owner's log first; interpreter starts are slow under
load)."""
POLL = 0.01


@attrs.frozen(kw_only=True)
class HandoverFigures:
    """What one hand-over loop measured."""

    handovers: int
    """Owners stopped whose standby took over (SIGTERM and SIGKILL together)."""
    killed: int
    """Of them, owners stopped with SIGKILL."""
    requests: int
    """Requests the load started."""
    failed: int
    """Requests without a 200 (the aim: 0)."""
    late: int
    """Requests that started more than 10 ms after they were due (`LoadResult.late`)."""
    waited: int
    """Requests due while the load's bound on requests in flight was reached (`LoadResult.waited`)."""
    most_in_flight: int
    """The most requests the load had in flight at once (its bound: 64)."""
    rate: float
    """Requests/s the load achieved."""
    take_over: tuple[float, ...]
    """Seconds from the owner's stop to the standby answering on the admin socket, one per hand-over."""
    resync: tuple[float, ...]
    """Seconds from the owner's stop to Envoy SYNCED with the new owner, one per hand-over."""
    failures: tuple[str, ...]
    """The first few failed requests, described."""

    def lines(self) -> list[str]:
        """The figures, as the loop prints them."""
        return [
            f"standby: {self.handovers} agent hand-overs ({self.handovers - self.killed} SIGTERM,"
            f" {self.killed} SIGKILL), {self.requests} requests at {self.rate:.0f}/s ({self.late} late,"
            f" {self.waited} waited for one of {self.most_in_flight} in flight),"
            f" {self.failed} failed (aim 0); the standby answered after the owner's stop: p50"
            f" {quantile(self.take_over, 0.5) * 1000:.0f} ms, max {max(self.take_over, default=0) * 1000:.0f} ms;"
            f" Envoy SYNCED again: p50 {quantile(self.resync, 0.5) * 1000:.0f} ms,"
            f" max {max(self.resync, default=0) * 1000:.0f} ms",
            *(f"  failure: {failure}" for failure in self.failures),
        ]


def standby_of(owner: RoleProcess, index: int) -> RoleProcess:
    """The owner's command line with `--standby`, its stderr in a file of its own."""
    return RoleProcess(
        name=f"agent-standby-{index}",
        arguments=[*owner.arguments, "--standby"],
        admin_socket=owner.admin_socket,
        work_dir=owner.work_dir,
    )


async def wait_standing_by(standby: RoleProcess) -> None:
    """Wait until the standby's stderr says it stands by (it has replayed the owner's log).

    Raises:
        RoleFailed: It exited, or did not say so within `STANDBY_TIMEOUT`.
    """
    path = trio.Path(standby.work_dir / f"{standby.name}.stderr")
    with trio.move_on_after(STANDBY_TIMEOUT):
        while not (await path.exists() and "standing by" in await path.read_text(errors="replace")):
            standby.check_alive()
            await trio.sleep(POLL)
        return
    raise RoleFailed(f"{standby.name} did not stand by within {STANDBY_TIMEOUT} s:\n{standby.stderr_tail()}")


async def _stop(owner: RoleProcess, signum: signal.Signals) -> None:
    assert owner.process is not None
    owner.process.send_signal(signum)
    await owner.process.wait()


async def standby_handovers(
    work_dir: Path, *, handovers: int, rate: float = HANDOVER_RATE
) -> HandoverFigures:
    """Hand the node over `handovers` times from the owning agent to its `--standby` under `rate` requests/s.

    Raises:
        RoleFailed: An agent exited on its own, a standby never stood by or took over, or Envoy did not sync.
    """
    await trio.Path(work_dir).mkdir(parents=True, exist_ok=True)
    load_binary = await trio.to_thread.run_sync(compile_fixed_rate, work_dir)
    take_over: list[float] = []
    resync: list[float] = []
    killed = 0
    async with open_agent_scene(work_dir / "agent") as scene, AsyncExitStack() as standbys:
        owner = scene.plane
        target = scene.target
        async with fixed_rate_load(
            load_binary, target.host, target.port, rate=rate, host_header=target.authority
        ) as load:
            for index in range(handovers):
                await owner.wait_synced()
                standby = await standbys.enter_async_context(running(standby_of(owner, index)))
                await wait_standing_by(standby)
                signum = signal.SIGKILL if index % 2 else signal.SIGTERM
                killed += signum == signal.SIGKILL
                stopped = trio.current_time()
                await _stop(owner, signum)
                take_over.append(await standby.wait_answering() - stopped)
                resync.append(await standby.wait_synced() - stopped)
                owner = standby
            await owner.wait_synced()
    assert load.result is not None
    return HandoverFigures(
        handovers=len(take_over),
        killed=killed,
        requests=load.result.started,
        failed=load.result.failed,
        late=load.result.late,
        waited=load.result.waited,
        most_in_flight=load.result.most_in_flight,
        rate=load.result.rate,
        take_over=tuple(take_over),
        resync=tuple(resync),
        failures=tuple(f"at {moment:.3f}: {why}" for moment, why in load.result.failures[:10]),
    )
