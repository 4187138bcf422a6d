"""`aether cni-install`: the DaemonSet's installer container (`aether.cni.install`).

By default it installs and chains, then keeps the entry there while the primary CNI rewrites its conflist, until
SIGTERM or SIGINT, when it takes the entry out again (uninstall: `kubectl delete` of the DaemonSet leaves no node
whose pods cannot start). `--once` installs and chains once and exits; `--uninstall` only takes the entry out.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

from aether.cli.commands import summary
from aether.cli.common import add_verbose_argument, configure_logging

EXIT_FAILED = 1

DEFAULT_PLUGIN = Path("/opt/aether/libexec/aether-cni")
"""Where the image holds the host executable (Containerfile's `shim` stage)."""


def add_parser(roles: Any) -> None:
    """Add `aether cni-install` to the root parser's subparsers `roles`."""
    parser = roles.add_parser("cni-install", help=summary("cni-install"))
    parser.add_argument(
        "--plugin",
        type=Path,
        default=DEFAULT_PLUGIN,
        metavar="FILE",
        help=f"the Python-free aether-cni executable to install (default {DEFAULT_PLUGIN})",
    )
    parser.add_argument(
        "--bin-dir",
        type=Path,
        default=Path("/opt/cni/bin"),
        metavar="DIR",
        help="the host's CNI bin directory (default /opt/cni/bin)",
    )
    parser.add_argument(
        "--net-dir",
        type=Path,
        default=Path("/etc/cni/net.d"),
        metavar="DIR",
        help="the host's CNI config directory, where the primary CNI writes its conflist (default /etc/cni/net.d)",
    )
    parser.add_argument(
        "--mesh-dns",
        metavar="IPv4[:PORT]",
        help="the node's mesh-dns, for our conflist entry's meshDNS (default: pod DNS is left alone)",
    )
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="seconds between two looks at the config directory (default 1)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--once", action="store_true", help="install and chain once, then exit (1: what failed)"
    )
    mode.add_argument(
        "--uninstall", action="store_true", help="take our entry out of every conflist, then exit"
    )
    add_verbose_argument(parser)
    parser.set_defaults(run=run_cni_install)


def run_cni_install(arguments: argparse.Namespace) -> int:
    """`aether cni-install`: 0 when done (watch: when stopped by a signal), 1 with the message when `--once`
    fails, 2 for options that cannot work."""
    import trio

    from aether.cni.errors import InstallFailed
    from aether.cni.install import Installer, plugin_entry

    configure_logging(arguments, quiet=20)
    if not arguments.poll_interval > 0:
        print(
            f"aether: error: --poll-interval must be > 0 (got {arguments.poll_interval!r})", file=sys.stderr
        )
        return 2
    installer = Installer(
        plugin=arguments.plugin,
        bin_dir=arguments.bin_dir,
        net_dir=arguments.net_dir,
        entry=plugin_entry(mesh_dns=arguments.mesh_dns),
    )
    if arguments.uninstall:
        installer.uninstall()
        return 0
    if arguments.once:
        try:
            installer.install_once()
        except InstallFailed as error:
            print(f"aether: error: {error}", file=sys.stderr)
            return EXIT_FAILED
        return 0

    async def main() -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                await nursery.start(
                    lambda task_status: installer.serve(
                        poll_interval=arguments.poll_interval, task_status=task_status
                    )
                )
                async for _signal in signals:
                    nursery.cancel_scope.cancel()
                    break

    trio.run(main)
    return 0
