"""A control plane run as a real process (`python -m aether.cli ROLE ...`), to kill -9 and start again, read
through its admin socket; and paced HTTP traffic through an Envoy, counting every request that fails."""

from __future__ import annotations

import math
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from aether.plane.admin_client import fetch_admin
from tests.integration.test_routing_traffic import Client

AETHER = (sys.executable, "-m", "aether.cli")
"""How a role is started: the `aether` command of this interpreter."""
POLL = 0.01
"""Seconds between two looks at a starting process's admin socket: well under the 1 s resync aim."""
START_TIMEOUT = 60.0
"""Seconds a role gets to answer on its admin socket after exec (an interpreter start takes seconds under load)."""
SYNC_TIMEOUT = 30.0
"""Seconds Envoy gets to be SYNCED with a restarted plane before the loop calls it a failure."""


class RoleFailed(RuntimeError):
    """A role exited when it should have been running, or never answered; the message ends with its stderr."""


@attrs.define
class RoleProcess:
    """One role's command line; `start` runs it (again), `kill` ends it with SIGKILL, as a crash would."""

    name: str
    """The role, for messages (`edge`, `agent`, `registrar`)."""
    arguments: Sequence[str]
    """The arguments after `aether`."""
    admin_socket: Path | None
    """Where it answers `/status` (None: the role has no admin socket; `wait_answering` is then not available)."""
    work_dir: Path
    """Where its stderr goes (`<name>.stderr`, appended over restarts)."""
    process: trio.Process | None = None
    starts: int = 0

    async def start(self) -> None:
        """Start the role (the previous process must have ended)."""
        assert self.process is None or self.process.returncode is not None, "this is a bug: started twice"
        self.work_dir.mkdir(parents=True, exist_ok=True)
        with (self.work_dir / f"{self.name}.stderr").open("ab") as stderr:
            self.process = await trio.lowlevel.open_process(
                [*AETHER, *self.arguments], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr
            )
        self.starts += 1

    async def kill(self) -> None:
        """SIGKILL the role and reap it: no cleanup runs, as in a crash or an OOM kill."""
        assert self.process is not None
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)
        await self.process.wait()

    def alive(self) -> bool:
        """True while the role's process runs."""
        return self.process is not None and self.process.returncode is None

    def stderr_tail(self) -> str:
        """The last lines the role wrote to stderr (for failure messages)."""
        path = self.work_dir / f"{self.name}.stderr"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-30:])

    def check_alive(self) -> None:
        """Raise `RoleFailed` if the role has exited."""
        if not self.alive():
            code = None if self.process is None else self.process.returncode
            raise RoleFailed(f"{self.name} exited (status {code!r}):\n{self.stderr_tail()}")

    async def admin(self, target: str) -> dict[str, Any]:
        """GET `target` from the role's admin socket (the role must have one).

        Raises:
            OSError, ValueError: The role does not answer (yet), as `fetch_admin` raises.
        """
        assert self.admin_socket is not None
        return await trio.to_thread.run_sync(fetch_admin, self.admin_socket, target)

    async def wait_answering(self) -> float:
        """Wait until the role answers `/status` on its admin socket; return `trio.current_time()` then.

        Raises:
            RoleFailed: The role exited, or did not answer within `START_TIMEOUT`.
        """
        with trio.move_on_after(START_TIMEOUT):
            while True:
                self.check_alive()
                try:
                    await self.admin("/status")
                except (OSError, ValueError):
                    await trio.sleep(POLL)
                    continue
                return trio.current_time()
        raise RoleFailed(f"{self.name} did not answer within {START_TIMEOUT} s:\n{self.stderr_tail()}")

    async def synced(self) -> bool:
        """True when an Envoy holds a stream to the role and every type of it is SYNCED."""
        try:
            document = await self.admin("/status")
        except (OSError, ValueError):
            return False
        rows = [row for stream in document["streams"] for row in stream["types"]]
        return bool(rows) and all(row["status"] == "SYNCED" for row in rows)

    async def wait_synced(self) -> float:
        """Wait until `synced()`; return `trio.current_time()` then.

        Raises:
            RoleFailed: The role exited, or Envoy was not SYNCED within `SYNC_TIMEOUT`.
        """
        with trio.move_on_after(SYNC_TIMEOUT):
            while not await self.synced():
                self.check_alive()
                await trio.sleep(POLL)
            return trio.current_time()
        raise RoleFailed(f"envoy not SYNCED with {self.name} within {SYNC_TIMEOUT} s:\n{self.stderr_tail()}")


@asynccontextmanager
async def running(role: RoleProcess) -> AsyncIterator[RoleProcess]:
    """Start `role`; kill it on exit, whatever happens in the block (a test must leave no process behind)."""
    await role.start()
    try:
        yield role
    finally:
        with trio.CancelScope(shield=True):
            await role.kill()


@attrs.frozen(kw_only=True)
class TrafficTarget:
    """Where requests go (an Envoy listener), the Host they carry, and the backend that must answer."""

    host: str
    port: int
    authority: str
    path: str = "/"
    expect_header: str = "x-upstream-name"
    expect: str = ""
    """The value `expect_header` must have in a good answer (besides status 200)."""


@attrs.define
class Traffic:
    """Requests at a steady rate through Envoy, spread over `workers` keep-alive connections; every request whose
    answer is not 200 from the expected backend (or that has no answer) counts as failed."""

    target: TrafficTarget
    rate: float
    workers: int = 4
    sent: int = 0
    failed: int = 0
    failures: list[str] = attrs.Factory(list)
    """The first few failures, described."""

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Send requests until cancelled; a worker that falls behind its pace sends at once until it has caught up."""
        async with trio.open_nursery() as nursery:
            for index in range(self.workers):
                await nursery.start(self._worker, index)
            task_status.started()

    def _fail(self, description: str) -> None:
        self.failed += 1
        if len(self.failures) < 10:
            self.failures.append(description)

    async def _worker(
        self, index: int, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        interval = self.workers / self.rate
        client: Client | None = None
        stream: trio.SocketStream | None = None
        started = trio.current_time() + index * interval / self.workers
        task_status.started()
        try:
            for step in range(sys.maxsize):
                await trio.sleep_until(started + step * interval)
                try:
                    if client is None:
                        stream = await trio.open_tcp_stream(self.target.host, self.target.port)
                        client = Client(stream)
                    self.sent += 1
                    response = await client.request(self.target.path, host=self.target.authority)
                except (
                    OSError,
                    trio.BrokenResourceError,
                    trio.TooSlowError,
                    AssertionError,
                    ValueError,
                ) as exc:
                    self._fail(f"request {self.sent}: {type(exc).__name__}: {exc}")
                    if stream is not None:
                        await stream.aclose()
                    client = stream = None
                    continue
                landed = response.headers.get(self.target.expect_header, "")
                if response.status != 200 or (self.target.expect and landed != self.target.expect):
                    self._fail(
                        f"request {self.sent}: status {response.status}, {landed!r}: {response.body[:120]!r}"
                    )
        finally:
            if stream is not None:
                with trio.CancelScope(shield=True):
                    await stream.aclose()


def quantile(values: Sequence[float], fraction: float) -> float:
    """The `fraction` quantile of `values` (nearest rank); 0.0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]
