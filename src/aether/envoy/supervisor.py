"""`aether proxy-supervisor`: PID 1 of the proxy container. It runs Envoy, restarts it after a crash (with backoff),
and hot-restarts it (Envoy's own `--restart-epoch` hand-over) when its bootstrap file or its binary changes, or on
SIGHUP. (A new binary whose hot-restart version differs cannot take over: its epoch exits, the old one serves on,
and `statistics().failed_hot_restarts` counts it.)

Hot restart, as Envoy does it: the new Envoy (epoch N+1) connects to the running one (epoch N) over a Unix socket
(`--socket-path`) and through shared memory (`/dev/shm/envoy_shared_memory_<base id>`), takes its listening sockets,
and starts serving; the old one drains its connections for `--drain-time-s` (two phases: listeners stop accepting at
once, open connections are told to close over the drain time) and is told to exit after `--parent-shutdown-time-s`.
No listening socket is ever closed, so no connection is refused. Both processes find each other by the base id
(one per node, from the node's name) and the socket path, which is why both live on a node-local path: an old and a
new proxy pod of a DaemonSet roll hand over exactly as two epochs in one pod do (the new pod's supervisor reads the
epoch the old one left in the runtime directory, and Envoy's `--skip-hot-restart-on-no-parent` starts cold when
there is no parent after all).

A start with no parent to hand over from is a cold start at epoch 0, which makes Envoy's shared memory anew: the
first start on a node whose shared memory is gone (a node reboot, the last supervisor stopped, a runtime directory
left from before) and every restart after a crash (a crashed Envoy can leave the memory marked "initializing", and
Envoy refuses any later epoch on such memory: the supervisor would restart it into the same refusal for ever).

In a roll the old supervisor outlives its Envoy: once another supervisor's Envoy has taken over, it waits for its
own stop signal and exits 0 then (a container that exits is restarted by the kubelet, and a restarted supervisor
would take the node's Envoy back from the new pod). A stop signal while its Envoy is the draining parent of another
supervisor's is not forwarded: the drain runs to its end (the new Envoy stops the old one after
`--parent-shutdown-time-s`), so the pod's grace period must be longer than that.

Signals: SIGHUP hot-restarts; SIGTERM, SIGINT and SIGQUIT are forwarded to every running Envoy and the supervisor
exits once they have, with the newest Envoy's status as a shell reports it (128 + N for a death by signal N);
SIGUSR1 (reopen the logs) is forwarded.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import logging
import math
import os
import signal
import subprocess
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import trio

from aether.envoy.process import find_envoy_binary
from aether.http1 import http_get

__all__ = [
    "BACKOFF_MAX",
    "BACKOFF_MIN",
    "ProxySupervisor",
    "SupervisorConfig",
    "SupervisorStatistics",
    "base_id_of",
    "crash_backoff",
    "exit_status",
]

BACKOFF_MIN = 0.1
"""Seconds before the first restart after a crash: a crash at once after a good run is usually transient."""
BACKOFF_MAX = 10.0
"""The longest wait between restarts of an Envoy that keeps crashing (a bad bootstrap): it must not spin a core."""
STABLE_AFTER = 10.0
"""Seconds an Envoy must run before its crash counts as a first one again (the backoff resets)."""
WATCH_INTERVAL = 0.5
"""Seconds between two reads of the bootstrap file: a config change reaches Envoy within half a second."""
STOP_GRACE = 20.0
"""Seconds the forwarded SIGTERM gives the Envoys before they are killed (Envoy exits in milliseconds; a drain in
progress ends with it)."""

_FORWARDED_STOP = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)
_HANDLED = (*_FORWARDED_STOP, signal.SIGHUP, signal.SIGUSR1)

_log = logging.getLogger(__name__)


def exit_status(returncode: int) -> int:
    """The exit status a shell reports for `returncode` (a `subprocess` one: negative for a death by signal)."""
    return 128 - returncode if returncode < 0 else returncode


def base_id_of(node_name: str) -> int:
    """The hot-restart base id of a node: stable per node name, so the old and the new proxy pod of a roll agree.

    Envoy derives its shared memory's name and its sockets' ids from the base id (the socket id is `base id * 10 +
    epoch % 3` style arithmetic in 32 bits), so the id is kept under 10^8.
    """
    return zlib.crc32(node_name.encode()) % 100_000_000


def _mark(path: Path, present: bool) -> None:
    """Create `path` (empty) or remove it."""
    if present:
        path.touch()
    else:
        path.unlink(missing_ok=True)


def crash_backoff(crashes: int) -> float:
    """Seconds to wait before restarting after the `crashes`-th crash in a row (1, 2, ...): doubling, capped."""
    return float(min(BACKOFF_MAX, BACKOFF_MIN * 2.0 ** max(0, crashes - 1)))


@attrs.frozen(kw_only=True)
class SupervisorConfig:
    """What the supervisor runs and where its node-local files live."""

    bootstrap: Path
    """Envoy's bootstrap file; a change to its content hot-restarts Envoy."""
    node_name: str
    """The node's name: the base id comes from it (unless `base_id` is given)."""
    runtime_dir: Path
    """A node-local directory (a hostPath in Kubernetes) shared by the old and the new proxy pod: the hot-restart
    socket, the current epoch and Envoy's pid and admin address live here."""
    base_id: int | None = None
    """Envoy's `--base-id`; None: `base_id_of(node_name)`."""
    drain_time_s: int = 5
    """`--drain-time-s`: how long the old Envoy drains its connections after a hot restart."""
    parent_shutdown_time_s: int = 10
    """`--parent-shutdown-time-s`: when the old Envoy is told to exit (after its drain)."""
    envoy_binary: Path | None = None
    """The executable; `find_envoy_binary()` by default."""
    extra_args: tuple[str, ...] = ()
    """More Envoy arguments (log level, concurrency...)."""
    ready_file: Path | None = None
    """A pod-local file kept while the node's newest Envoy is this supervisor's and its admin API answers /ready
    200, absent otherwise (a readiness probe tests for it: a DaemonSet roll deletes the old pod only once the new
    pod's Envoy has taken over); None: no such file."""

    @property
    def socket_path(self) -> Path:
        """Envoy's `--socket-path` (it appends the socket id)."""
        return self.runtime_dir / "hot-restart"

    @property
    def epoch_path(self) -> Path:
        """The epoch of the newest Envoy (read by the next supervisor on this node)."""
        return self.runtime_dir / "epoch"

    @property
    def pid_path(self) -> Path:
        """The newest Envoy's pid."""
        return self.runtime_dir / "envoy.pid"

    @property
    def admin_address_path(self) -> Path:
        """Envoy's `--admin-address-path`: the newest Envoy writes it once its admin API listens."""
        return self.runtime_dir / "admin-address"


@attrs.frozen(kw_only=True)
class SupervisorStatistics:
    """What the supervisor has done."""

    epoch: int
    """The newest Envoy's restart epoch."""
    pid: int | None
    """The newest Envoy's pid (None between a crash and its restart)."""
    hot_restarts: int
    """Hot restarts started (bootstrap or binary changes, and SIGHUPs)."""
    failed_hot_restarts: int
    """New Envoys that exited while their parent still ran (the parent keeps serving)."""
    crashes: int
    """Envoys that exited on their own while they were the newest."""


class _Exit(enum.Enum):
    """What an Envoy's exit was."""

    REPLACED = enum.auto()
    """A parent leaving after a hot restart."""
    FAILED_HOT_RESTART = enum.auto()
    """A new epoch dying while its parent serves on."""
    CRASHED = enum.auto()
    """The only Envoy exited on its own: restart it."""
    SUPERSEDED = enum.auto()
    """Another supervisor's Envoy took over from ours (a pod roll): this supervisor exits."""


@attrs.define(eq=False)
class _Running:
    process: trio.Process
    epoch: int
    started_at: float


class ProxySupervisor:
    """Runs Envoy under `config` until a stop signal; `run()` returns the exit status."""

    def __init__(self, config: SupervisorConfig) -> None:
        self.config = config
        self._binary = config.envoy_binary or find_envoy_binary()
        self._base_id = config.base_id if config.base_id is not None else base_id_of(config.node_name)
        self._running: list[_Running] = []
        """Every Envoy alive, oldest first; the last one is the newest (the one that serves new connections)."""
        self._epoch = -1
        self._hot_restarts = self._failed_hot_restarts = self._crashes = 0
        self._crashes_in_row = 0
        self._last_status = 0
        self._exits: trio.MemorySendChannel[_Running]
        self._bootstrap_digest = b""
        self._superseded = False

    def statistics(self) -> SupervisorStatistics:
        """Return the supervisor's counters."""
        newest = self._running[-1] if self._running else None
        return SupervisorStatistics(
            epoch=self._epoch,
            pid=newest.process.pid if newest is not None else None,
            hot_restarts=self._hot_restarts,
            failed_hot_restarts=self._failed_hot_restarts,
            crashes=self._crashes,
        )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> int:
        """Start Envoy and supervise it until SIGTERM, SIGINT or SIGQUIT; return the exit status.

        Resource handling:
            Every Envoy started is stopped (the stop signal forwarded, then SIGKILL after `STOP_GRACE`) and reaped
            before `run` returns, also when it is cancelled.
        """
        await trio.to_thread.run_sync(self._prepare_runtime_dir)
        send, exits = trio.open_memory_channel[_Running](math.inf)
        self._exits = send
        with trio.open_signal_receiver(*_HANDLED) as signals:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                try:
                    self._bootstrap_digest = await self._read_bootstrap_digest()
                    await self._start(self._first_epoch())
                    task_status.started()
                    status = await self._supervise(signals, exits)
                finally:
                    with trio.CancelScope(shield=True):
                        await self._stop_all(signal.SIGTERM)
                        await trio.to_thread.run_sync(self._release_shared_memory)
                        if self.config.ready_file is not None:
                            await trio.to_thread.run_sync(_mark, self.config.ready_file, False)
                nursery.cancel_scope.cancel()
        return status

    async def _supervise(
        self, signals: AsyncIterator[int], exits: trio.MemoryReceiveChannel[_Running]
    ) -> int:
        """The event loop: one input at a time (an exit, a signal, a bootstrap change, a restart due)."""
        inputs_send, inputs = trio.open_memory_channel[tuple[str, object]](math.inf)

        async def pump_signals() -> None:
            async for signum in signals:
                inputs_send.send_nowait(("signal", signum))

        async def pump_exits() -> None:
            async for running in exits:
                inputs_send.send_nowait(("exit", running))

        async def watch_files() -> None:
            binary = await trio.to_thread.run_sync(self._binary_mark)
            while True:
                await trio.sleep(WATCH_INTERVAL)
                digest = await self._read_bootstrap_digest()
                if digest and digest != self._bootstrap_digest:
                    self._bootstrap_digest = digest
                    inputs_send.send_nowait(("changed", "the bootstrap changed"))
                mark = await trio.to_thread.run_sync(self._binary_mark)
                if mark is not None and mark != binary:
                    binary = mark
                    inputs_send.send_nowait(("changed", "a new Envoy binary"))

        async with trio.open_nursery() as pumps:
            pumps.start_soon(pump_signals)
            pumps.start_soon(pump_exits)
            pumps.start_soon(watch_files)
            if self.config.ready_file is not None:
                pumps.start_soon(self._keep_ready_file, self.config.ready_file)
            restart_at = math.inf
            while True:
                with trio.move_on_at(restart_at):
                    kind, value = await inputs.receive()
                    if kind == "signal":
                        assert isinstance(value, int)
                        if value in _FORWARDED_STOP:
                            await self._stop(signal.Signals(value))
                            pumps.cancel_scope.cancel()
                            return self._last_status
                        if self._superseded:
                            _log.warning(
                                "signal %d ignored: this node's Envoy is another supervisor's now",
                                value,
                            )
                        elif value == signal.SIGHUP:
                            await self._hot_restart("SIGHUP")
                        else:
                            self._signal_all(signal.Signals(value))
                    elif kind == "changed":
                        assert isinstance(value, str)
                        await self._hot_restart(value)
                    else:
                        assert isinstance(value, _Running)
                        verdict = await self._exited(value)
                        if verdict is _Exit.CRASHED:
                            restart_at = trio.current_time() + crash_backoff(self._crashes_in_row)
                    continue
                restart_at = math.inf
                if not self._running:
                    await self._start(0)  # no parent after a crash: a cold start (see the module's docstring)

    async def _keep_ready_file(self, path: Path) -> None:
        """Keep `path` while `_serves_the_node()`, every `WATCH_INTERVAL`."""
        while True:
            await trio.to_thread.run_sync(_mark, path, await self._serves_the_node())
            await trio.sleep(WATCH_INTERVAL)

    async def _serves_the_node(self) -> bool:
        """The node's newest epoch is this supervisor's, and its Envoy's admin API answers /ready 200."""
        if self._superseded or not self._running:
            return False
        if await trio.to_thread.run_sync(self._recorded_epoch) != self._epoch:
            return False
        try:
            address = await trio.Path(self.config.admin_address_path).read_text()
            host, _, port = address.strip().rpartition(":")
            ready = await http_get(host, int(port), "/ready", timeout=1)
        except (OSError, ValueError, trio.BrokenResourceError, trio.TooSlowError):
            return False
        return ready.status == 200

    async def _exited(self, running: _Running) -> _Exit:
        """Book an Envoy's exit and say what it was."""
        newest = self._running[-1] is running
        self._running.remove(running)
        returncode = running.process.returncode
        assert returncode is not None, "an Envoy reported as exited has a return code; this is a bug"
        self._last_status = exit_status(returncode)
        if not newest:
            return _Exit.REPLACED  # a parent leaving after a hot restart: its normal end
        if not self._running and await trio.to_thread.run_sync(self._recorded_epoch) > running.epoch:
            # Another supervisor on this node (the new proxy pod of a roll) hot-restarted from our Envoy, which
            # then left as a parent does: this pod's work is done; it waits for its stop signal.
            _log.warning(
                "envoy epoch %d handed over to another supervisor's epoch; waiting for the stop signal",
                running.epoch,
            )
            self._superseded = True
            self._last_status = 0
            return _Exit.SUPERSEDED
        if self._running:
            # The new epoch died while its parent still serves: the parent stays the newest, and its epoch is the
            # node's again (the next hot restart, or the next pod's supervisor, must find it as epoch + 1's parent).
            self._failed_hot_restarts += 1
            parent = self._running[-1]
            self._epoch = parent.epoch
            await trio.to_thread.run_sync(self._record, parent.epoch, parent.process.pid)
            _log.error(
                "envoy epoch %d exited with status %d during its hot restart; epoch %d keeps serving",
                running.epoch,
                self._last_status,
                self._running[-1].epoch,
            )
            return _Exit.FAILED_HOT_RESTART
        self._crashes += 1
        stable = trio.current_time() - running.started_at >= STABLE_AFTER
        self._crashes_in_row = 1 if stable else self._crashes_in_row + 1
        _log.error(
            "envoy epoch %d exited with status %d; restarting in %.1f s",
            running.epoch,
            self._last_status,
            crash_backoff(self._crashes_in_row),
        )
        return _Exit.CRASHED

    async def _hot_restart(self, reason: str) -> None:
        self._hot_restarts += 1
        _log.warning("hot restart to epoch %d: %s", self._epoch + 1, reason)
        await self._start(self._epoch + 1)

    def envoy_command(self, epoch: int) -> list[str]:
        """The command line of the Envoy this supervisor starts at restart epoch `epoch`."""
        config = self.config
        return [
            str(self._binary),
            *("-c", str(config.bootstrap)),
            *("--restart-epoch", str(epoch), "--base-id", str(self._base_id)),
            *("--socket-path", str(config.socket_path)),
            *("--drain-time-s", str(config.drain_time_s)),
            *("--parent-shutdown-time-s", str(config.parent_shutdown_time_s)),
            # Epoch N with no Envoy N-1 alive (after a crash, or the first pod on a node) starts cold.
            "--skip-hot-restart-on-no-parent",
            *("--admin-address-path", str(config.admin_address_path)),
            *config.extra_args,
        ]

    async def _start(self, epoch: int) -> None:
        """Start Envoy at `epoch` (a hot restart when another Envoy runs, a cold start otherwise)."""
        process = await trio.lowlevel.open_process(self.envoy_command(epoch), stdin=subprocess.DEVNULL)
        running = _Running(process=process, epoch=epoch, started_at=trio.current_time())
        self._running.append(running)
        self._epoch = epoch
        await trio.to_thread.run_sync(self._record, epoch, process.pid)
        self._nursery.start_soon(self._reap, running)

    async def _reap(self, running: _Running) -> None:
        # Shielded: a cancelled supervisor still reaps (and reports) what it started; `_stop_all` makes it end.
        with trio.CancelScope(shield=True):
            await running.process.wait()
        self._exits.send_nowait(running)

    async def _stop(self, signum: signal.Signals) -> None:
        """Stop on `signum`: forward it, unless every Envoy of ours is the draining parent of another supervisor's
        (a roll in progress), whose drain is then waited for (`--parent-shutdown-time-s`, plus `STOP_GRACE`)."""
        handed_over = await trio.to_thread.run_sync(self._recorded_epoch) > self._epoch
        if self._running and handed_over:
            _log.warning(
                "stop signal %d: envoy epoch %d drains for another supervisor's epoch; waiting for it to end",
                signum,
                self._epoch,
            )
            with trio.move_on_after(self.config.parent_shutdown_time_s + STOP_GRACE):
                for running in list(self._running):
                    await running.process.wait()
            self._superseded = True
        await self._stop_all(signum)
        if handed_over:
            self._last_status = 0

    def _signal_all(self, signum: signal.Signals) -> None:
        for running in self._running:
            # An Envoy that exited a moment ago (its exit not booked yet) needs no signal.
            with contextlib.suppress(ProcessLookupError):
                if running.process.returncode is None:
                    running.process.send_signal(signum)

    async def _stop_all(self, signum: signal.Signals) -> None:
        """Forward `signum` to every Envoy, wait for them (SIGKILL after `STOP_GRACE`), and keep the newest's status."""
        if not self._running:
            return
        newest = self._running[-1]
        self._signal_all(signum)
        with trio.move_on_after(STOP_GRACE):
            for running in self._running:
                await running.process.wait()
        for running in self._running:
            if running.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    running.process.kill()
                await running.process.wait()
        assert newest.process.returncode is not None
        self._last_status = exit_status(newest.process.returncode)
        self._running.clear()

    def _first_epoch(self) -> int:
        """The epoch after the one a supervisor left on this node (a pod roll); 0 when no Envoy's shared memory is
        there to hand over through (the first start on the node, or after a reboot)."""
        if not self._shared_memory_path().exists():
            return 0
        return self._recorded_epoch() + 1

    def _shared_memory_path(self) -> Path:
        # Envoy's name for it: `/envoy_shared_memory_<base id * 10>` (source/server/hot_restart_impl.cc).
        return Path(f"/dev/shm/envoy_shared_memory_{self._base_id * 10}")

    def _recorded_epoch(self) -> int:
        """The newest epoch any supervisor on this node started (-1 when none did)."""
        try:
            text = self.config.epoch_path.read_text().strip()
        except FileNotFoundError:
            return -1
        return int(text) if text.isdigit() else -1

    def _release_shared_memory(self) -> None:
        """Remove Envoy's hot-restart shared memory once no Envoy of this node needs it (it outlives Envoy).

        Only when this supervisor's epoch is still the node's newest: after a hand-over to another supervisor, that
        one's Envoy maps the memory and its next hot restart needs it.
        """
        if self._superseded or self._recorded_epoch() != self._epoch:
            return
        with contextlib.suppress(FileNotFoundError):
            self._shared_memory_path().unlink()

    def _prepare_runtime_dir(self) -> None:
        self.config.runtime_dir.mkdir(parents=True, exist_ok=True)

    def _record(self, epoch: int, pid: int) -> None:
        for path, text in ((self.config.epoch_path, f"{epoch}\n"), (self.config.pid_path, f"{pid}\n")):
            temporary = path.with_name(path.name + ".tmp")
            temporary.write_text(text)
            os.replace(temporary, path)

    def _binary_mark(self) -> tuple[int, int, int, int] | None:
        """The Envoy binary's inode, size, modification and change times (a package upgrade replaces the file, a
        hard link swapped in changes the inode's link count); None while it is missing (mid-replacement)."""
        try:
            found = os.stat(self._binary)
        except FileNotFoundError:
            return None
        return found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns

    async def _read_bootstrap_digest(self) -> bytes:
        """The bootstrap's digest; empty while the file is missing (mid-replacement: not a change to act on)."""
        try:
            content = await trio.Path(self.config.bootstrap).read_bytes()
        except FileNotFoundError:
            return b""
        return hashlib.sha256(content).digest()
