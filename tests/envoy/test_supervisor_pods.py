"""The hand-over between the old and the new proxy pod of a DaemonSet roll, as the manifests lay it out: two
supervisors, each PID 1 of its own PID and mount namespaces (a container's), each with its own /dev/shm onto which
the same node directory is bind-mounted (the manifests' hostPath), sharing the node's runtime directory. The new
pod's supervisor continues the epoch and hot-restarts from the old pod's Envoy through those paths; the old pod is
then stopped (SIGTERM) as the DaemonSet controller does; no request fails at any point.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import trio

from aether.envoy.supervisor import base_id_of
from aether.http1 import http_get
from aether.testing.envoy import direct_response_bootstrap, wait_for
from aether.testing.request_loop import RequestLoop
from aether.testing.xds_resources import pick_free_port
from tests.needs import ROOT, needs

pytestmark = needs(ROOT)
"""New PID and mount namespaces, and bind mounts."""

LOOPBACK = "127.0.0.1"
CONVERGE = 30
"""Seconds a start or a hand-over may take (an interpreter start in a new namespace is seconds under load)."""


def _pod_command(node_shm: Path, supervisor: list[str]) -> list[str]:
    """`supervisor` as PID 1 of new PID and mount namespaces, `node_shm` bound over its /dev/shm."""
    script = 'mount --bind "$0" /dev/shm && exec "$@"'
    return [
        "unshare",
        "--pid",
        "--mount",
        "--fork",
        "--kill-child",
        "sh",
        "-c",
        script,
        str(node_shm),
        *supervisor,
    ]


def _pid_one(unshare_pid: int) -> int:
    """The host pid of the namespace's PID 1 (the forked child of `unshare`, once it has exec'd the supervisor)."""
    children = Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children").read_text().split()
    return int(children[0])


async def _answers(port: int) -> bool:
    try:
        return (await http_get(LOOPBACK, port, "/", timeout=2)).status == 200
    except (OSError, ValueError, trio.BrokenResourceError, trio.TooSlowError):
        return False


async def _is_supervisor(unshare_pid: int) -> bool:
    try:
        command = await trio.Path(f"/proc/{_pid_one(unshare_pid)}/cmdline").read_bytes()
    except (OSError, IndexError, ValueError):
        return False
    return b"proxy-supervisor" in command


async def test_the_new_pods_supervisor_takes_over_through_the_node_paths(short_dir: Path) -> None:
    """Old pod: epoch 0. New pod: epoch 1, hot-restarted from it; the old Envoy drains and leaves; the old pod's
    SIGTERM ends its supervisor with 0; the new pod serves on; a request loop across all of it sees no failure; and
    the shared memory lives in the node directory, not in either pod's own /dev/shm."""
    port = pick_free_port()
    bootstrap = short_dir / "bootstrap.json"
    bootstrap.write_text(json.dumps(direct_response_bootstrap(port, "pods")))
    runtime, node_shm = short_dir / "run", short_dir / "shm"
    node_shm.mkdir()
    supervisor = [
        *(sys.executable, "-m", "aether.cli", "proxy-supervisor", "--bootstrap", str(bootstrap)),
        *("--node-name", short_dir.name, "--runtime-dir", str(runtime)),
        *(
            "--drain-time-s",
            "1",
            "--parent-shutdown-time-s",
            "2",
            "--",
            "--concurrency",
            "1",
            "-l",
            "warning",
        ),
    ]
    command = _pod_command(node_shm, supervisor)
    shared_memory = f"envoy_shared_memory_{base_id_of(short_dir.name) * 10}"
    loop = RequestLoop(LOOPBACK, port)
    async with trio.open_nursery() as nursery:
        start = functools.partial(trio.run_process, command, check=False, stdout=subprocess.DEVNULL)
        old: trio.Process = await nursery.start(start)
        await wait_for(functools.partial(_answers, port), timeout=CONVERGE, interval=0.05)
        assert await trio.Path(node_shm / shared_memory).exists()
        assert not await trio.Path("/dev/shm", shared_memory).exists()
        nursery.start_soon(loop.run)

        new: trio.Process = await nursery.start(start)

        async def handed_over() -> bool:
            epoch = await trio.Path(runtime / "epoch").read_text()
            return epoch.strip() == "1" and await _answers(port)

        await wait_for(handed_over, timeout=CONVERGE, interval=0.05)
        await wait_for(functools.partial(_is_supervisor, old.pid), timeout=CONVERGE, interval=0.05)
        # The DaemonSet controller deletes the old pod: the kubelet's SIGTERM to its PID 1.
        _signal_pid_one(old.pid, signal.SIGTERM)
        with trio.fail_after(CONVERGE):
            await old.wait()
        assert old.returncode == 0
        assert await _answers(port)
        loop_failures, loop_answered = list(loop.failures), loop.answered
        _signal_pid_one(new.pid, signal.SIGTERM)
        with trio.fail_after(CONVERGE):
            await new.wait()
        nursery.cancel_scope.cancel()

    assert loop_failures == []
    assert loop_answered > 0
    assert new.returncode == 0
    assert not await trio.Path(node_shm / shared_memory).exists(), "the node's last supervisor removes it"


def _signal_pid_one(unshare_pid: int, signum: signal.Signals) -> None:
    os.kill(_pid_one(unshare_pid), signum)
