"""`guard_command(PARENT_PID, ENVOY_ARGS)`: run Envoy, and stop it when its owner dies.

A process killed with -9 runs no cleanup, so an Envoy it started would outlive it, holding its ports. The kernel's
parent-death signal (`prctl(PR_SET_PDEATHSIG)`) cannot help under trio: it fires when the *thread* that forked
the child exits, and trio forks from a worker thread that its thread cache retires after a few idle seconds, which
would stop a healthy Envoy. So the guard sits between them: it runs Envoy as its child, forwards SIGTERM, SIGINT
and SIGHUP to it, and polls its own parent: when the owner is gone (the guard was re-parented), it stops Envoy and
exits. The guard is single-threaded, so there the parent-death signal is reliable: if the guard itself is killed,
Envoy gets SIGTERM. Its exit status is Envoy's.

The guard runs as a script in isolated mode, not with `-m`: it imports only the standard library, never this
package (`aether.envoy` imports trio, whose import alone takes a tenth of a second and runs `/sbin/ldconfig`).
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

__all__ = ["GRACE", "POLL", "guard_command", "main"]

POLL = 0.2
"""Seconds between two checks that the owner is alive."""
GRACE = 1.5
"""Seconds Envoy gets to exit after SIGTERM before it is killed."""


_PR_SET_PDEATHSIG = 1


_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""The signals the guard passes on to Envoy."""


def _end_with_guard(guard: int) -> None:
    """In Envoy before exec: SIGTERM when the guard's (only) thread ends, however it ends (Linux prctl); and the
    forwarded signals unblocked again (the guard blocks them while it starts Envoy, and a child inherits the mask)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDED)
    if os.getppid() != guard:
        # The guard died before the parent-death signal was armed: it will never come, so do not start.
        os._exit(128 + signal.SIGTERM)


def _status(returncode: int) -> int:
    """An exit status for Envoy's `returncode`: a death by signal N becomes 128 + N, as shells report it."""
    return 128 - returncode if returncode < 0 else returncode


def _stop(child: subprocess.Popen[bytes]) -> int:
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(timeout=GRACE)
        except subprocess.TimeoutExpired:
            child.kill()
    return _status(child.wait())


def guard_command(owner: int, command: Sequence[str]) -> list[str]:
    """Return the command line that runs `command` (Envoy's) under the guard, for the owner process `owner`."""
    # -I: no user site, no PYTHON* variables and, above all, not this directory on sys.path (its http.py would
    # shadow the standard library's).
    return [sys.executable, "-I", str(Path(__file__).resolve()), str(owner), *command]


def main(argv: list[str]) -> int:
    """Run `argv[1:]` as Envoy for owner pid `argv[0]`; return Envoy's exit status."""
    owner, command = int(argv[0]), argv[1:]
    # Blocked until the handler is in place: a signal sent while Envoy is being started waits instead of killing
    # the guard (whose Envoy would then get only the parent-death SIGTERM, and its exit status would be lost).
    signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARDED)
    child = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, preexec_fn=functools.partial(_end_with_guard, os.getpid())
    )

    def forward(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(_stop(child))

    for signum in _FORWARDED:
        signal.signal(signum, forward)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDED)  # a signal that came meanwhile is handled now
    while child.poll() is None:
        if os.getppid() != owner:
            return _stop(child)
        time.sleep(POLL)
    return _status(child.returncode)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
