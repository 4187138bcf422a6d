"""The table of `aether`'s commands: each one's module and one-line summary.

`aether --help` is built from this table alone; only the command being run imports its module (and the module
imports its role only when the command runs), so the command line answers in about the interpreter's start-up time.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["COMMANDS", "Command", "summary"]


class Command(NamedTuple):
    """One `aether` command (a NamedTuple, not attrs: importing attrs costs more than the rest of `--help`)."""

    name: str
    module: str
    """The module whose `add_parser(roles)` adds the command's parser and its `run`."""
    summary: str
    """The line `aether --help` shows."""


COMMANDS = (
    Command(
        name="agent",
        module="aether.cli.agent_command",
        summary="run the node agent: event log, projection, xDS server, admin socket",
    ),
    Command(
        name="demo",
        module="aether.cli.demo_command",
        summary="run a whole mesh on this machine and walk through a scenario",
    ),
    Command(
        name="mesh-dns",
        module="aether.cli.dns_command",
        summary="serve <svc>.<ns>.<mesh domain> A records from the agent's record file",
    ),
    Command(
        name="registrar",
        module="aether.cli.registrar_command",
        summary="serve the endpoint registry to agents (RegistrarService)",
    ),
    Command(
        name="log",
        module="aether.cli.log_commands",
        summary="replay, inspect, verify or recover an event log",
    ),
    Command(
        name="status",
        module="aether.cli.status_command",
        summary="show each connected Envoy's xDS sync state, like istioctl proxy-status",
    ),
    Command(
        name="identity-ready",
        module="aether.cli.identity_ready_command",
        summary="wait until this pod's SVID is served by its node agent (the init container's check)",
    ),
    Command(
        name="render",
        module="aether.cli.render_command",
        summary="project Kubernetes manifests offline into Envoy config",
    ),
    Command(
        name="bootstrap",
        module="aether.cli.bootstrap_command",
        summary="print the ADS bootstrap a node's or the edge's Envoy starts with",
    ),
    Command(
        name="cni-install",
        module="aether.cli.cni_install_command",
        summary="install the host's aether-cni and keep it chained into the primary CNI's conflist",
    ),
    Command(
        name="controller",
        module="aether.cli.controller_command",
        summary="elect a leader over a Lease; the leader writes the Gateway API status back",
    ),
    Command(
        name="edge",
        module="aether.cli.edge_command",
        summary="run the edge: Gateway API routes served to the edge Envoy over xDS",
    ),
    Command(
        name="proxy-supervisor",
        module="aether.cli.proxy_supervisor_command",
        summary="run Envoy as PID 1: restart it after a crash, hot-restart it on a bootstrap change or SIGHUP",
    ),
)
"""In the order `aether --help` lists them."""


def summary(name: str) -> str:
    """The one-line summary of the command `name` (what its parser's `help` is)."""
    return next(command.summary for command in COMMANDS if command.name == name)
