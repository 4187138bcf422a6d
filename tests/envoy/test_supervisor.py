"""`aether proxy-supervisor` with a real Envoy: hot restarts (SIGHUP, a bootstrap change) under a request loop drop
nothing, a crashed Envoy is restarted, and SIGTERM is forwarded with Envoy's status as the supervisor's."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import pytest
import trio

from aether.envoy.process import ENVOY_VARIABLE, find_envoy_binary
from aether.envoy.supervisor import BACKOFF_MAX, base_id_of, crash_backoff, exit_status
from aether.http1 import http_get
from aether.testing.envoy import direct_response_bootstrap, wait_for
from aether.testing.request_loop import RequestLoop
from aether.testing.xds_resources import pick_free_port

LOOPBACK = "127.0.0.1"
CONVERGE = 20
"""Seconds a start, a hot restart or a crash restart may take (Envoy takes well under one)."""


def test_exit_status_is_what_a_shell_reports() -> None:
    """A return code passes through; a death by signal N becomes 128 + N."""
    assert [exit_status(0), exit_status(1), exit_status(-signal.SIGKILL)] == [0, 1, 137]


def test_a_missing_bootstrap_is_a_usage_error_naming_the_file(tmp_path: Path) -> None:
    """No Envoy is started (it would only say "Invalid path" and be restarted forever): exit 2 naming the file."""
    missing = tmp_path / "absent.json"
    command = [sys.executable, "-m", "aether.cli", "proxy-supervisor", "--bootstrap", str(missing)]
    command += ["--node-name", "node-a", "--runtime-dir", str(tmp_path / "run")]
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 2
    assert f"--bootstrap {missing} is not a file" in result.stderr
    assert not (tmp_path / "run").exists()


def test_the_crash_backoff_doubles_up_to_its_cap() -> None:
    """0.1 s, 0.2 s, 0.4 s... and never more than `BACKOFF_MAX`."""
    assert [crash_backoff(n) for n in (1, 2, 3)] == [0.1, 0.2, 0.4]
    assert crash_backoff(30) == BACKOFF_MAX


def test_the_base_id_is_stable_per_node() -> None:
    """The old and the new proxy pod of a node compute the same base id; another node gets another."""
    assert base_id_of("node-a") == base_id_of("node-a") != base_id_of("node-b")
    assert 0 <= base_id_of("node-a") < 100_000_000


@attrs.frozen
class Supervised:
    process: trio.Process
    runtime: Path
    bootstrap: Path
    port: int
    command: list[str]

    def envoy_pid(self) -> int:
        return int((self.runtime / "envoy.pid").read_text())

    def epoch(self) -> int:
        return int((self.runtime / "epoch").read_text())


@asynccontextmanager
async def open_supervisor(
    short_dir: Path,
    *,
    body: str = "one",
    env: dict[str, str] | None = None,
    parent_shutdown_time_s: int = 2,
) -> AsyncIterator[Supervised]:
    port = pick_free_port()
    bootstrap = short_dir / "bootstrap.json"
    bootstrap.write_text(json.dumps(direct_response_bootstrap(port, body)))
    runtime = short_dir / "run"
    command = [
        *(sys.executable, "-m", "aether.cli", "proxy-supervisor", "--bootstrap", str(bootstrap)),
        *("--node-name", short_dir.name, "--runtime-dir", str(runtime)),
        *("--drain-time-s", "1", "--parent-shutdown-time-s", str(parent_shutdown_time_s)),
        *("--ready-file", str(short_dir / "ready")),
        *("--", "--concurrency", "1", "-l", "warning"),
    ]
    # The supervisor's log, for the tests that read what it said.
    with (short_dir / "supervisor.stderr").open("ab") as stderr:
        async with trio.open_nursery() as nursery:
            process: trio.Process = await nursery.start(
                functools.partial(
                    trio.run_process, command, check=False, stdout=subprocess.DEVNULL, stderr=stderr, env=env
                )
            )
            supervised = Supervised(
                process=process, runtime=runtime, bootstrap=bootstrap, port=port, command=command
            )
            await wait_for(functools.partial(_answers, port), timeout=CONVERGE, interval=0.02)
            yield supervised
            if process.returncode is None:
                await _stop(process)


async def _answers(port: int, body: str | None = None) -> bool:
    try:
        response = await http_get(LOOPBACK, port, "/", timeout=2)
    except (OSError, ValueError, trio.BrokenResourceError, trio.TooSlowError):
        return False
    return response.status == 200 and (body is None or response.body == body.encode())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by the supervisor) counts as gone.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] != "Z"


async def _gone(pid: int) -> bool:
    return not _alive(pid)


async def _stop(process: trio.Process) -> None:
    """SIGTERM to a supervisor (the kubelet stopping its pod), and its exit, bounded in time."""
    process.send_signal(signal.SIGTERM)
    with trio.fail_after(CONVERGE):
        await process.wait()


async def test_hot_restarts_under_a_request_loop_fail_no_request(short_dir: Path) -> None:
    """A SIGHUP and a bootstrap change each start the next epoch, which takes the listener over while the old one
    drains and exits; requests sent all along (a fresh connection each) never fail."""
    async with open_supervisor(short_dir) as supervised:
        loop = RequestLoop(LOOPBACK, supervised.port)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(loop.run)
            first = supervised.envoy_pid()
            supervised.process.send_signal(signal.SIGHUP)
            await wait_for(functools.partial(_gone, first), timeout=CONVERGE, interval=0.05)
            assert supervised.epoch() == 1
            second = supervised.envoy_pid()
            supervised.bootstrap.write_text(json.dumps(direct_response_bootstrap(supervised.port, "two")))
            await wait_for(
                functools.partial(_answers, supervised.port, "two"), timeout=CONVERGE, interval=0.05
            )
            await wait_for(functools.partial(_gone, second), timeout=CONVERGE, interval=0.05)
            assert supervised.epoch() == 2
            nursery.cancel_scope.cancel()

    assert loop.failures == []
    assert loop.answered > 0
    assert supervised.process.returncode == 0


async def test_a_crashed_envoy_is_restarted_and_sigterm_is_forwarded(short_dir: Path) -> None:
    """Envoy killed with SIGKILL comes back (a new pid, serving again); SIGTERM to the supervisor stops Envoy and
    the supervisor exits with Envoy's status (0 for a clean stop)."""
    async with open_supervisor(short_dir) as supervised:
        crashed = supervised.envoy_pid()
        os.kill(crashed, signal.SIGKILL)

        async def restarted() -> bool:
            return supervised.envoy_pid() != crashed and await _answers(supervised.port)

        await wait_for(restarted, timeout=CONVERGE, interval=0.05)
        assert (
            supervised.epoch() == 0
        )  # no parent to hand over from: a cold start, its shared memory made anew
        envoy = supervised.envoy_pid()
        supervised.process.send_signal(signal.SIGTERM)
        with trio.fail_after(CONVERGE):
            await supervised.process.wait()

    assert supervised.process.returncode == 0
    assert not _alive(envoy)


@pytest.mark.parametrize("stopped", ["after the drain", "during the drain"])
async def test_a_second_supervisor_on_the_node_takes_over_and_the_first_ends_on_its_sigterm(
    short_dir: Path, stopped: str
) -> None:
    """A DaemonSet roll: a new supervisor on the same node and runtime directory hot-restarts from the running
    Envoy (the next epoch); the old Envoy drains and exits. The old supervisor stays (an exit would have the kubelet
    restart it) until its SIGTERM, then exits 0; a SIGTERM while its Envoy still drains is not forwarded (it would
    cut the drain short): the Envoy leaves as a parent does. No request fails meanwhile, and on SIGTERM the last
    supervisor leaves no shared memory behind."""
    async with open_supervisor(short_dir, parent_shutdown_time_s=5) as old:
        old_envoy = old.envoy_pid()
        loop = RequestLoop(LOOPBACK, old.port)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(loop.run)
            new: trio.Process = await nursery.start(
                functools.partial(trio.run_process, old.command, check=False, stdout=subprocess.DEVNULL)
            )

            async def new_epoch_serves() -> bool:
                return old.epoch() == 1 and old.envoy_pid() != old_envoy and await _answers(old.port)

            await wait_for(new_epoch_serves, timeout=CONVERGE, interval=0.02)
            if stopped == "after the drain":
                await wait_for(functools.partial(_gone, old_envoy), timeout=CONVERGE, interval=0.05)
                assert old.process.returncode is None
            else:
                assert _alive(old_envoy)  # it drains for --parent-shutdown-time-s (5 s here)
            await _stop(old.process)
            assert old.process.returncode == 0
            assert not _alive(old_envoy)
            await wait_for(functools.partial(_answers, old.port), timeout=CONVERGE)
            nursery.cancel_scope.cancel()
        await _stop(new)

    assert loop.failures == []
    assert new.returncode == 0
    assert not await trio.Path(f"/dev/shm/envoy_shared_memory_{base_id_of(short_dir.name) * 10}").exists()


async def test_a_runtime_dir_left_without_shared_memory_starts_cold(short_dir: Path) -> None:
    """An epoch recorded by an earlier supervisor whose shared memory is gone (a node reboot, the DaemonSet
    deleted and applied again): the next start is a cold epoch 0, not an Envoy refusing to start for ever."""
    runtime = short_dir / "run"
    runtime.mkdir()
    (runtime / "epoch").write_text("7\n")
    assert not await trio.Path(f"/dev/shm/envoy_shared_memory_{base_id_of(short_dir.name) * 10}").exists()
    async with open_supervisor(short_dir) as supervised:
        assert supervised.epoch() == 0


def _own_envoy(short_dir: Path) -> tuple[Path, dict[str, str]]:
    """An Envoy executable of the test's own (a hard link to the real one) and the environment running it."""
    binary = short_dir / "bin" / "envoy"
    binary.parent.mkdir()
    os.link(find_envoy_binary(), binary)
    return binary, {**os.environ, ENVOY_VARIABLE: str(binary)}


def _swap_in_envoy(binary: Path) -> None:
    """Replace `binary` with a new hard link to the real Envoy, as a package upgrade replaces a file."""
    os.link(find_envoy_binary(), binary.with_name("envoy.new"))
    os.replace(binary.with_name("envoy.new"), binary)


async def test_a_new_envoy_binary_is_hot_restarted_into_and_a_broken_one_changes_nothing(
    short_dir: Path,
) -> None:
    """Replacing the Envoy executable starts the next epoch from it. First a binary that cannot start (a script
    exiting 1): its hot restart fails, the running Envoy serves on and its epoch is recorded as the node's again;
    then a good one (a hard link swapped in) hot-restarts from it (epoch 1, not 2, which would find no parent) and
    the old Envoy drains and leaves. No request fails."""
    binary, env = _own_envoy(short_dir)
    async with open_supervisor(short_dir, env=env) as supervised, trio.open_nursery() as nursery:
        loop = RequestLoop(LOOPBACK, supervised.port)
        nursery.start_soon(loop.run)
        first = supervised.envoy_pid()
        broken = binary.with_name("envoy.broken")
        broken.write_text("#!/bin/sh\nexit 1\n")
        broken.chmod(0o755)
        os.replace(broken, binary)

        async def failed_and_recorded_back() -> bool:
            said = await trio.Path(short_dir / "supervisor.stderr").read_text()
            failed = "epoch 1 exited with status 1 during its hot restart; epoch 0 keeps serving" in said
            return failed and supervised.epoch() == 0 and supervised.envoy_pid() == first

        await wait_for(failed_and_recorded_back, timeout=CONVERGE, interval=0.05)
        _swap_in_envoy(binary)
        await wait_for(functools.partial(_gone, first), timeout=CONVERGE, interval=0.05)
        assert supervised.epoch() == 1
        await wait_for(functools.partial(_answers, supervised.port), timeout=CONVERGE)
        nursery.cancel_scope.cancel()

    assert loop.failures == []


async def test_the_ready_file_is_kept_by_the_supervisor_whose_envoy_serves_the_node(short_dir: Path) -> None:
    """The readiness probe's file: present once the supervisor's Envoy is ready; in a roll it moves to the new
    pod's supervisor (the old one's goes as soon as the epoch is not its own); gone when a supervisor stops."""
    async with open_supervisor(short_dir) as old, trio.open_nursery() as nursery:
        old_ready, new_ready = short_dir / "ready", short_dir / "ready-new"
        await wait_for(trio.Path(old_ready).exists, timeout=CONVERGE, interval=0.05)
        command = [str(new_ready) if word == str(old_ready) else word for word in old.command]
        new: trio.Process = await nursery.start(
            functools.partial(trio.run_process, command, check=False, stdout=subprocess.DEVNULL)
        )

        async def moved() -> bool:
            return await trio.Path(new_ready).exists() and not await trio.Path(old_ready).exists()

        await wait_for(moved, timeout=CONVERGE, interval=0.05)
        await _stop(old.process)
        await _stop(new)
        assert not await trio.Path(new_ready).exists()
        assert not await trio.Path(old_ready).exists()
