"""`aether-cni`'s entry point: VERSION is answered from `aether.cni.config` alone; every other command runs the
plugin (`aether.cni.plugin.main`), which loads trio, the gRPC client and netlink.

A runtime asks VERSION often (on every config load): it should cost about the interpreter's start-up.
"""

from __future__ import annotations

import os
import sys

from aether.cni.config import Command, version_result

__all__ = ["main"]


def main() -> None:
    """The `aether-cni` console script."""
    if os.environ.get("CNI_COMMAND") == Command.VERSION.value:
        sys.stdout.write(version_result(sys.stdin.buffer.read()) + "\n")
        sys.exit(0)
    from aether.cni.plugin import main as run_plugin_command

    run_plugin_command()
