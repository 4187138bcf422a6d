"""`aether-cni`: the chained CNI plugin (spec 1.0/1.1) — ADD, DEL, CHECK, GC, STATUS and VERSION.

ADD registers the pod with the agent first and programs the pod's namespace only when the agent answered that
the pod is managed: an agent that is down fails the ADD with code 11 (try again later) and nothing programmed.
The previous plugin's result is our result, unchanged but for `cniVersion`. A pod that CNI_ARGS does not name
(no `K8S_POD_NAME`) is not a Kubernetes pod: every command passes it through.

Errors are the spec's JSON error objects on stdout, with exit status 1; warnings go to stderr (the runtime logs it).

The commands run in one of two places, with the same code (`run_command`):

* the Python console script (`run_plugin`, `main`) on a host that has this package: it reaches the agent's CNI
  service over gRPC (`GrpcChannel`) and programs the namespace itself;
* the agent, for the host's Python-free executable (`shim/aether-cni.c`, `aether.cni.plugin_server`): the agent
  calls its own CNI service in-process (`LocalChannel`) and programs the namespace, privileged on the host.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Protocol, TypeVar

import attrs
import trio
from google.protobuf.message import Message

from aether.cni.capture import CapturePlan, CaptureSettings
from aether.cni.client import ResponseT, agent_errors, call_agent
from aether.cni.config import Command, Invocation, NetworkConfig, PodArgs, version_result
from aether.cni.errors import (
    AgentRefused,
    AgentUnavailable,
    CaptureDrifted,
    CniError,
    InvalidEnvironment,
    InvalidNetworkConfig,
    NetnsProgrammingFailed,
    PluginUnavailable,
)
from aether.cni.netns import apply_capture, capture_problems, remove_capture
from aether.proto.cni.v1 import cni_pb2

__all__ = [
    "EXIT_FAILED",
    "GRPC_CHANNEL",
    "AgentChannel",
    "GrpcChannel",
    "LocalChannel",
    "PluginOutcome",
    "main",
    "run_command",
    "run_plugin",
]

EXIT_FAILED = 1
"""Exit status of a failed command (the error object is on stdout)."""

ResultT = TypeVar("ResultT")

ROLLBACK_TIMEOUT = 2.0
"""Seconds to undo a registration after programming failed: best effort, the runtime's DEL follows anyway."""


@attrs.frozen(kw_only=True)
class PluginOutcome:
    """What one command answers: `output` for stdout (the result or the error object; may be empty), the exit
    `status`, and `warnings` for stderr (one line each)."""

    output: str
    status: int
    warnings: tuple[str, ...] = ()


class AgentChannel(Protocol):
    """How a command reaches the agent's CNI service (`aether.cni.server.CniServer`)."""

    def address(self, config: NetworkConfig) -> Path:
        """Where the agent is, as messages name it."""
        ...

    async def call(
        self, config: NetworkConfig, method: str, request: Message, response_type: type[ResponseT]
    ) -> ResponseT:
        """Call `method`; raise what `aether.cni.client.agent_errors` translates (gRPC errors, OSError)."""
        ...


@attrs.frozen
class GrpcChannel:
    """The Python plugin's channel: one gRPC call over the config's `agentSocket`."""

    def address(self, config: NetworkConfig) -> Path:
        return config.agent_socket

    async def call(
        self, config: NetworkConfig, method: str, request: Message, response_type: type[ResponseT]
    ) -> ResponseT:
        return await call_agent(config.agent_socket, method, request, response_type)


GRPC_CHANNEL = GrpcChannel()


@attrs.frozen(kw_only=True)
class LocalChannel:
    """The agent's own channel: its CNI service's handler, called in-process (for the host's executable).

    Args:
        handle: `CniServer.handle`.
        where: What messages name as the agent (the socket the executable dialled).
    """

    handle: Callable[[str, Message], Awaitable[Message]]
    where: Path

    def address(self, config: NetworkConfig) -> Path:
        return self.where

    async def call(
        self, config: NetworkConfig, method: str, request: Message, response_type: type[ResponseT]
    ) -> ResponseT:
        response = await self.handle(method, request)
        assert isinstance(response, response_type), (
            f"{method} returns {response_type.__name__}; this is a bug"
        )
        return response


def main() -> None:
    """The `aether-cni` console script: reads CNI_* and stdin, writes the result or the error, exits."""
    output, status = run_plugin(os.environ, sys.stdin.buffer.read())
    if output:
        sys.stdout.write(output + "\n")
    sys.exit(status)


def run_plugin(environ: Mapping[str, str], stdin: bytes) -> tuple[str, int]:
    """Run one CNI command over gRPC (`GrpcChannel`), warnings to stderr; return stdout's text and the exit status.

    Never raises for bad input or a failed operation: every `CniError` becomes the spec's error object.
    """
    if environ.get("CNI_COMMAND") == Command.VERSION.value:
        return version_result(stdin), 0
    outcome = trio.run(run_command, environ, stdin, GRPC_CHANNEL)
    for warning in outcome.warnings:
        print(warning, file=sys.stderr)
    return outcome.output, outcome.status


async def run_command(environ: Mapping[str, str], stdin: bytes, channel: AgentChannel) -> PluginOutcome:
    """Run one CNI command (CNI_* in `environ`, the network config in `stdin`), reaching the agent by `channel`.

    Never raises for bad input or a failed operation: every `CniError` becomes the spec's error object, and a bug
    becomes one too (its traceback among the warnings).
    """
    warnings: list[str] = []
    try:
        invocation = Invocation.from_environ(environ)
        if invocation.command is Command.VERSION:
            return PluginOutcome(output=version_result(stdin), status=0)
        config = NetworkConfig.from_json(stdin)
        output = await _run(_Run(invocation=invocation, config=config, channel=channel, warnings=warnings))
        return PluginOutcome(output=output, status=0, warnings=tuple(warnings))
    except CniError as exc:
        output = exc.to_json(cni_version=NetworkConfig.version_of(stdin))
    except Exception as exc:  # a bug: the runtime still gets the spec's error object, the traceback on stderr
        warnings.append(traceback.format_exc().rstrip())
        error = CniError(
            f"aether-cni failed unexpectedly (this is a bug): {type(exc).__name__}", details=str(exc)
        )
        output = error.to_json(cni_version=NetworkConfig.version_of(stdin))
    return PluginOutcome(output=output, status=EXIT_FAILED, warnings=tuple(warnings))


@attrs.define(kw_only=True)
class _Run:
    """One command's inputs, and the warnings it collects for stderr."""

    invocation: Invocation
    config: NetworkConfig
    channel: AgentChannel
    warnings: list[str]

    async def call(self, method: str, request: Message, response_type: type[ResponseT]) -> ResponseT:
        where = self.channel.address(self.config)
        with agent_errors(where, method), trio.fail_after(self.config.agent_timeout):
            return await self.channel.call(self.config, method, request, response_type)


async def _in_netns(function: Callable[..., ResultT], netns: Path, *arguments: object) -> ResultT:
    """Run a blocking `aether.cni.netns` function in a worker thread.

    Raises:
        InvalidEnvironment: `netns` is not (or no longer) a network namespace: setns refused it.
    """
    try:
        return await trio.to_thread.run_sync(function, netns, *arguments)
    except OSError as exc:
        raise InvalidEnvironment(
            f"CNI_NETNS {str(netns)!r}: not a network namespace", details=str(exc)
        ) from exc


async def _run(run: _Run) -> str:
    invocation, config = run.invocation, run.config
    match invocation.command:
        case Command.ADD:
            return await _add(run)
        case Command.DEL:
            await _delete(run)
        case Command.CHECK:
            await _check(run)
        case Command.GC:
            request = cni_pb2.CollectGarbageRequest(valid_container_ids=list(config.valid_container_ids))
            await run.call("CollectGarbage", request, cni_pb2.CollectGarbageResponse)
        case Command.STATUS:
            try:
                await run.call("Status", cni_pb2.StatusRequest(), cni_pb2.StatusResponse)
            except AgentUnavailable as exc:
                raise PluginUnavailable(
                    f"aether-cni cannot add pods: {exc.message}", details=exc.details
                ) from exc
        case _:  # pragma: no cover - VERSION is answered before the config is read
            raise AssertionError(f"unhandled command {invocation.command!r}; this is a bug")
    return ""


def _pod_message(invocation: Invocation, config: NetworkConfig, pod: PodArgs) -> cni_pb2.CNIPod:
    return cni_pb2.CNIPod(
        name=pod.name,
        namespace=pod.namespace,
        uid=pod.uid,
        network_namespace=str(invocation.netns or ""),
        container_id=invocation.container_id,
        interface_name=invocation.ifname,
        ips=list(config.pod_ips),
        annotations=dict(config.pod_annotations),
    )


def _passthrough(config: NetworkConfig) -> str:
    """The previous plugin's result as ours (`cniVersion` set to the config's, as the spec asks)."""
    return json.dumps({**(config.prev_result or {}), "cniVersion": config.cni_version}, sort_keys=True)


def _netns_exists(netns: Path) -> bool:
    """Whether `netns` exists; a path the kernel refuses to look up (EACCES, ELOOP...) is an invalid environment."""
    try:
        return netns.exists()
    except OSError as exc:
        raise InvalidEnvironment(
            f"CNI_NETNS {str(netns)!r:.80}: cannot be looked up", details=str(exc)
        ) from exc


def _existing_netns(invocation: Invocation) -> Path:
    netns = invocation.netns
    if netns is None or not _netns_exists(netns):
        raise InvalidEnvironment(f"CNI_NETNS {str(netns)!r}: no such network namespace")
    return netns


def _plan(config: NetworkConfig, capture: cni_pb2.CaptureSettings) -> CapturePlan:
    return CapturePlan.merge(
        CaptureSettings.from_proto(capture),
        node_ports=config.exclude_ports,
        node_ranges=config.exclude_ranges,
        mesh_dns=config.mesh_dns,
    )


def _chained(config: NetworkConfig) -> None:
    if config.prev_result is None:
        raise InvalidNetworkConfig(
            "network config: 'prevResult' is missing; aether-cni is a chained plugin: list it after the plugin"
            " that assigns the pod's addresses"
        )


async def _add(run: _Run) -> str:
    invocation, config = run.invocation, run.config
    pod = invocation.pod
    if pod is None:
        return _passthrough(config)
    _chained(config)
    netns = _existing_netns(invocation)
    request = cni_pb2.AddPodRequest(pod=_pod_message(invocation, config, pod))
    response = await run.call("AddPod", request, cni_pb2.AddPodResponse)
    if response.result == cni_pb2.RESULT_IGNORED:
        # A pod that left the mesh keeps no capture from an earlier ADD.
        await _in_netns(remove_capture, netns)
        return _passthrough(config)
    if response.result != cni_pb2.RESULT_SUCCESS:
        raise AgentRefused(f"pod {pod.key!r}: the agent refused it", details=response.message)
    run.warnings.extend(f"aether-cni: pod {pod.key!r}: {warning}" for warning in response.warnings)
    try:
        await _in_netns(apply_capture, netns, _plan(config, response.capture))
    except (NetnsProgrammingFailed, InvalidEnvironment):
        # Either all of it or none: the namespace has no capture; take the registration back too.
        removal = cni_pb2.RemovePodRequest(
            name=pod.name, namespace=pod.namespace, container_id=invocation.container_id
        )
        with trio.move_on_after(ROLLBACK_TIMEOUT):
            try:
                await run.call("RemovePod", removal, cni_pb2.RemovePodResponse)
            except CniError as exc:
                run.warnings.append(
                    f"aether-cni: pod {pod.key!r}: could not take the registration back: {exc}"
                )
        raise
    return _passthrough(config)


async def _delete(run: _Run) -> None:
    invocation = run.invocation
    pod = invocation.pod
    if pod is None:
        return
    netns = invocation.netns
    if netns is not None and _netns_exists(netns):  # a namespace already gone took its rules with it
        await _in_netns(remove_capture, netns)
    request = cni_pb2.RemovePodRequest(
        name=pod.name, namespace=pod.namespace, container_id=invocation.container_id
    )
    response = await run.call("RemovePod", request, cni_pb2.RemovePodResponse)
    if response.result != cni_pb2.RESULT_SUCCESS:
        raise AgentRefused(f"pod {pod.key!r}: the agent did not remove it", details=response.message)


async def _check(run: _Run) -> None:
    invocation, config = run.invocation, run.config
    pod = invocation.pod
    if pod is None:
        return
    _chained(config)
    netns = _existing_netns(invocation)
    request = cni_pb2.CheckPodRequest(pod=_pod_message(invocation, config, pod))
    response = await run.call("CheckPod", request, cni_pb2.CheckPodResponse)
    if response.result == cni_pb2.RESULT_ERROR:
        raise AgentRefused(
            f"pod {pod.key!r}: the agent's registration does not match", details=response.message
        )
    plan = _plan(config, response.capture) if response.result == cni_pb2.RESULT_SUCCESS else None
    problems = await _in_netns(capture_problems, netns, plan)
    if problems:
        raise CaptureDrifted(
            f"pod {pod.key!r}: the capture in {str(netns)!r} is not as programmed",
            details="; ".join(problems),
        )
