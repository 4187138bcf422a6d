"""`aether demo`: the whole mesh on one machine (registrar, agent, Envoy, workloads, routes, traffic)."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aether.cli.commands import summary
from aether.cli.common import add_verbose_argument, configure_logging
from aether.sync import first_leaf


def add_parser(roles: Any) -> None:
    """Add `aether demo` to the root parser's subparsers `roles`."""
    parser = roles.add_parser(
        "demo",
        help=summary("demo"),
        description=(
            "Start a registrar, a node agent, a real Envoy and sample workloads on loopback addresses, route "
            "traffic between them from the YAML in the run's manifests/ folder (edit it while the demo runs), "
            "and walk through a scenario: canary split, weight shift, replica kill, invalid route."
        ),
    )
    parser.add_argument(
        "--log-dir",
        type=Path,
        metavar="DIR",
        help="where the run's files and event log go (default: a new directory)",
    )
    parser.add_argument(
        "--check", action="store_true", help="run the scenario headless; exit 0 only if every step behaved"
    )
    parser.add_argument(
        "--address-base",
        default="127.0.10",
        metavar="A.B.C",
        help="the loopback /24 the pods' addresses come from (default 127.0.10)",
    )
    parser.add_argument("--no-live", action="store_true", help="print the narration only, no live view")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the steps and timings as JSON")
    parser.add_argument(
        "--netns",
        action="store_true",
        help="a network namespace per pod, joined to the mesh by aether-cni (needs root, iproute2 and nftables)",
    )
    add_verbose_argument(parser)
    parser.set_defaults(run=run_demo_command)


NETNS_TOOLS = {"nft": "nftables", "ip": "iproute2"}
"""What `--netns` runs (the CNI plugin's capture rules, the namespaces and veth pairs), and its Debian package."""


def netns_problem(
    *, euid: int | None = None, which: Callable[[str], str | None] = shutil.which
) -> str | None:
    """Why `aether demo --netns` cannot run on this machine (naming the fix), or None when it can.

    `euid` defaults to the process's; `which` finds a tool on PATH.
    """
    if (os.geteuid() if euid is None else euid) != 0:
        return "--netns creates network namespaces and needs root: run the demo as root, or without --netns"
    missing = [tool for tool in NETNS_TOOLS if which(tool) is None]
    if missing:
        packages = " ".join(NETNS_TOOLS[tool] for tool in missing)
        return (
            f"--netns needs {' and '.join(missing)}, not found on PATH: install them (Debian: apt-get install"
            f" {packages}), or run the demo without --netns"
        )
    return None


def run_demo_command(arguments: argparse.Namespace) -> int:
    """`aether demo`: exits 1, before starting anything, when `--netns` cannot run here."""
    problem = netns_problem() if arguments.netns else None
    if problem is not None:
        print(f"aether: error: {problem}", file=sys.stderr)
        return 1
    import trio

    from aether.demo.app import DemoOptions, run_demo
    from aether.demo.mesh import DemoError
    from aether.envoy.process import EnvoyStartFailed

    configure_logging(arguments, quiet=logging.ERROR)
    options = DemoOptions(
        log_dir=arguments.log_dir,
        check=arguments.check,
        live=not arguments.no_live,
        address_base=arguments.address_base,
        json_report=arguments.json,
        netns=arguments.netns,
    )
    try:
        try:
            return trio.run(run_demo, options)
        except (
            BaseExceptionGroup
        ) as group:  # raised inside the demo's nurseries: unwrap what is handled below
            if group.subgroup(KeyboardInterrupt) is not None:
                raise KeyboardInterrupt from None
            handled, rest = group.split((DemoError, EnvoyStartFailed))
            if handled is None or rest is not None:
                raise
            raise first_leaf(handled) from None
    except DemoError as error:
        print(f"aether: error: {error}", file=sys.stderr)
        return 1
    except EnvoyStartFailed as error:
        print(f"aether: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("aether demo: stopped; everything it started has stopped", file=sys.stderr)
        return 130
