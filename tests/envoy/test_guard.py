"""The Envoy guard stops its child when the owner dies, and when the guard itself is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from aether.envoy.guard import guard_command


def _gone(pid: int, *, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return True
        if (
            stat.rsplit(")", 1)[1].split()[0] == "Z"
        ):  # a zombie: dead, waiting for its (new) parent to reap it
            return True
        time.sleep(0.05)
    return False


def _child_of(pid: int) -> int:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.05)
    raise AssertionError(f"process {pid} started no child")


def _guarded(owner: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(guard_command(owner, ["sleep", "60"]))


# The owner imports nothing of ours (the `aether.envoy` package imports trio, which runs a child of its own), so
# its only child is the guard: the command is built here, with 0 standing for the owner's pid.
OWNER = f"""
import os, subprocess, time
command = {guard_command(0, ["sleep", "60"])!r}
command[command.index("0")] = str(os.getpid())
subprocess.Popen(command)
time.sleep(60)
"""


def test_the_child_stops_when_the_owner_is_killed() -> None:
    owner = subprocess.Popen([sys.executable, "-c", OWNER])
    try:
        guard = _child_of(owner.pid)
        child = _child_of(guard)
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
        assert _gone(child)
        assert _gone(guard)
    finally:
        if owner.poll() is None:
            owner.kill()


def test_the_child_stops_when_the_guard_is_killed() -> None:
    guard = _guarded(os.getpid())
    try:
        child = _child_of(guard.pid)
        os.kill(guard.pid, signal.SIGKILL)
        guard.wait()
        assert _gone(child)
    finally:
        if guard.poll() is None:
            guard.kill()


def test_sigterm_reaches_the_child_and_the_exit_status_is_its() -> None:
    guard = _guarded(os.getpid())
    child = _child_of(guard.pid)
    guard.terminate()
    assert guard.wait(timeout=10) == 128 + signal.SIGTERM  # Envoy's death by SIGTERM, as a shell reports it
    assert _gone(child)


def _spawning_child_of(guard: subprocess.Popen[bytes]) -> int:
    """The guard's child, caught as soon as it exists: between its fork and its exec, while the guard starts it."""
    children = Path(f"/proc/{guard.pid}/task/{guard.pid}/children")
    deadline = time.monotonic() + 5
    # Spin, no sleep: a sleep would let the start-up finish first.
    while not children.read_text().split() and time.monotonic() < deadline:
        pass
    return int(children.read_text().split()[0])


def test_sigterm_the_moment_the_child_exists_still_reaches_it() -> None:
    """A SIGTERM sent while the guard is still starting Envoy waits for the guard's handler: never lost, never fatal."""
    guard = _guarded(os.getpid())
    child = _spawning_child_of(guard)
    guard.terminate()
    assert guard.wait(timeout=10) == 128 + signal.SIGTERM
    assert _gone(child)


def test_the_child_stops_when_the_guard_is_killed_while_starting_it() -> None:
    """A guard killed before its child armed the parent-death signal still leaves no child behind."""
    guard = _guarded(os.getpid())
    child = _spawning_child_of(guard)
    os.kill(guard.pid, signal.SIGKILL)
    guard.wait()
    assert _gone(child)
