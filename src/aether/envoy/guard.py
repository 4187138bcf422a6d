"""`python -m aether.envoy.guard PARENT_PID ENVOY_ARGS...`: run Envoy, and stop it when its owner dies.

A process killed with -9 runs no cleanup, so an Envoy it started would outlive it, holding its ports. The kernel's
parent-death signal (`prctl(PR_SET_PDEATHSIG)`) cannot help under trio: it fires when the *thread* that forked
the child exits, and trio forks from a worker thread that its thread cache retires after a few idle seconds, which
would stop a healthy Envoy. So the guard sits between them: it runs Envoy as its child, forwards SIGTERM, SIGINT
and SIGHUP to it, and polls its own parent: when the owner is gone (the guard was re-parented), it stops Envoy and
exits. The guard is single-threaded, so there the parent-death signal is reliable: if the guard itself is killed,
Envoy gets SIGTERM. Its exit status is Envoy's.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from types import FrameType

POLL = 0.2
"""Seconds between two checks that the owner is alive."""
GRACE = 1.5
"""Seconds Envoy gets to exit after SIGTERM before it is killed."""


_PR_SET_PDEATHSIG = 1


def _end_with_guard() -> None:
    """In Envoy before exec: SIGTERM when the guard's (only) thread ends, however it ends (Linux prctl)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


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


def main(argv: list[str]) -> int:
    """Run `argv[1:]` as Envoy for owner pid `argv[0]`; return Envoy's exit status."""
    owner, command = int(argv[0]), argv[1:]
    child = subprocess.Popen(command, stdin=subprocess.DEVNULL, preexec_fn=_end_with_guard)

    def forward(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(_stop(child))

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    while child.poll() is None:
        if os.getppid() != owner:
            return _stop(child)
        time.sleep(POLL)
    return _status(child.returncode)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
