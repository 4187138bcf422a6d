"""The agent's side of the host's Python-free `aether-cni` (`shim/aether-cni.c`): `PluginServer` on
`/run/aether/cni-plugin.sock`.

The executable forwards each CNI request (its CNI_* variables and stdin, `aether.cni.wire`) and prints what comes
back. Here the agent runs the command with the Python plugin's own code (`aether.cni.plugin.run_command`),
calling its CNI service in-process (`LocalChannel`) and programming the pod's network namespace itself, so it
needs what that needs on the host: CAP_NET_ADMIN and CAP_SYS_ADMIN (setns), the runtime's /var/run/netns, `nft`.

One request per connection; connections are served concurrently (a runtime adds pods in parallel). A frame that
breaks the wire is answered with the spec's error object (`WireMismatch`, code 1004) when the peer still listens;
a peer that sends nothing in `REQUEST_TIMEOUT` seconds is dropped. Every failed command is logged.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import anyio
import anyio.abc
import attrs
import trio

from aether.cni.config import LATEST_VERSION
from aether.cni.errors import WireMismatch
from aether.cni.plugin import EXIT_FAILED, LocalChannel, PluginOutcome, run_command
from aether.cni.server import CniServer
from aether.cni.wire import PluginRequest, PluginResponse, WireError
from aether.rpc.listen import ListenAddress, serve_unix_streams
from aether.telemetry import CniMetrics, current_telemetry

__all__ = ["REQUEST_TIMEOUT", "PluginServer", "PluginServerStatistics"]

LOG = logging.getLogger("aether.cni")

REQUEST_TIMEOUT = 10.0
"""Seconds to receive a whole request: the executable writes it at once, right after connecting."""

_CHUNK = 65536
_COMMANDS = frozenset(("ADD", "DEL", "CHECK", "VERSION", "GC", "STATUS"))


@attrs.frozen(kw_only=True)
class PluginServerStatistics:
    """Counters of a `PluginServer`."""

    commands: int
    """Requests answered (whatever their outcome)."""
    failed: int
    """Commands answered with an error object (exit status 1)."""
    bad_frames: int
    """Connections whose request broke the wire, or came too slowly, or not whole."""


class PluginServer:
    """Runs the host executable's CNI commands in the agent.

    Args:
        cni: The agent's CNI service (the pods' registration, the proxy's ACK).
        socket: Where to listen; also what messages name as the agent.
    """

    def __init__(self, *, cni: CniServer, socket: Path) -> None:
        self._channel = LocalChannel(handle=cni.handle, where=socket)
        self._socket = socket
        self._commands = self._failed = self._bad_frames = 0
        self._duration = CniMetrics.of(current_telemetry()).command_duration

    def statistics(self) -> PluginServerStatistics:
        """Return the server's counters."""
        return PluginServerStatistics(
            commands=self._commands, failed=self._failed, bad_frames=self._bad_frames
        )

    async def serve(self, *, task_status: trio.TaskStatus[ListenAddress] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the socket until cancelled (`aether.rpc.listen.serve_unix_streams`: mode 0660)."""
        await serve_unix_streams(self._connection, path=self._socket, task_status=task_status)

    async def answer(self, request: PluginRequest) -> PluginOutcome:
        """Run one forwarded command (what a connection does once its request is read)."""
        started = time.perf_counter()
        outcome = await run_command(request.environ, request.stdin, self._channel)
        command = request.environ.get("CNI_COMMAND", "")
        self._duration.record(
            time.perf_counter() - started,
            {
                "aether.cni.command": command
                if command in _COMMANDS
                else "other",  # bounded: not the caller's
                "aether.cni.result": "ok" if outcome.status == 0 else "failed",
            },
        )
        self._commands += 1
        if outcome.status != 0:
            self._failed += 1
            container = request.environ.get("CNI_CONTAINERID", "")
            LOG.warning("aether-cni %s of container %r failed: %s", command, container, outcome.output)
        for warning in outcome.warnings:
            LOG.warning("%s", warning)
        return outcome

    async def _connection(self, stream: anyio.abc.SocketStream) -> None:
        try:
            with trio.fail_after(REQUEST_TIMEOUT):
                frame = await _receive_request(stream)
            request = PluginRequest.from_bytes(frame)
        except WireError as exc:
            self._bad_frames += 1
            LOG.warning("cni plugin socket %r: %s", str(self._socket), exc)
            error = WireMismatch(
                f"the aether agent at {str(self._socket)!r} cannot read the request of this aether-cni;"
                " install the aether-cni of the agent's image",
                details=exc.reason,
            )
            outcome = PluginOutcome(output=error.to_json(cni_version=LATEST_VERSION), status=EXIT_FAILED)
        except (trio.TooSlowError, anyio.EndOfStream, anyio.BrokenResourceError, OSError) as exc:
            self._bad_frames += 1
            LOG.warning("cni plugin socket %r: no whole request received: %r", str(self._socket), exc)
            return
        else:
            outcome = await self.answer(request)
        response = PluginResponse(
            status=outcome.status,
            stdout=(outcome.output + "\n").encode() if outcome.output else b"",
            stderr="".join(f"{warning}\n" for warning in outcome.warnings).encode(),
        )
        try:
            await stream.send(response.to_bytes())
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            # The executable was killed (the runtime's timeout) before our answer: the runtime retries or DELs.
            LOG.warning("cni plugin socket %r: the plugin left before its answer: %r", str(self._socket), exc)


async def _receive_request(stream: anyio.abc.SocketStream) -> bytes:
    """Receive one whole request frame.

    Raises:
        WireError: what arrived breaks the wire's rules, or the peer closed before the whole frame.
    """
    frame = bytearray()
    expected: int | None = None
    while expected is None or len(frame) < expected:
        try:
            chunk = await stream.receive(_CHUNK)
        except anyio.EndOfStream:
            raise WireError(
                f"the request ended after {len(frame)} bytes"
                + (f" of {expected}" if expected is not None else " (its headers are not whole)")
            ) from None
        frame += chunk
        if expected is None:
            expected = PluginRequest.expected_length(bytes(frame))
    if len(frame) > expected:
        raise WireError(f"{len(frame) - expected} bytes follow the request")
    return bytes(frame)
