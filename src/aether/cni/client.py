"""The plugin's side of the CNI service: one unary call to the agent over its Unix socket.

Failures are translated here, in one place (STYLE E8), into the CNI errors the runtime understands: an agent that
cannot be reached or does not answer in time is "try again later" (code 11); an agent that answers with a gRPC
error refused the request.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import anyio
import trio
from google.protobuf.message import Message
from purerpc.grpclib.exceptions import GRPCError
from purerpc.grpclib.status import StatusCode

from aether.cni.api import METHODS, SERVICE_NAME
from aether.cni.errors import AgentRefused, AgentUnavailable
from aether.rpc.calls import open_grpc_socket, unary_call
from aether.rpc.listen import ListenAddress
from aether.sync import first_leaf

__all__ = ["ResponseT", "agent_errors", "call_agent"]

ResponseT = TypeVar("ResponseT", bound=Message)

_RETRYABLE = frozenset({StatusCode.UNAVAILABLE, StatusCode.DEADLINE_EXCEEDED, StatusCode.RESOURCE_EXHAUSTED})
"""Statuses that say "not now" rather than "not this": the runtime retries."""


@contextlib.contextmanager
def agent_errors(socket: Path, method: str) -> Iterator[None]:
    """Translate what a call to the agent can raise into `AgentUnavailable` or `AgentRefused`."""
    subject = f"agent at {str(socket)!r}: {method}"
    try:
        try:
            yield
        except BaseExceptionGroup as group:
            # purerpc's connection runs in an anyio task group, which wraps what fails inside it: unwrap one.
            raise first_leaf(group) from group
    except trio.TooSlowError as exc:
        raise AgentUnavailable(f"{subject} did not answer in time; retry", details=str(exc)) from exc
    except GRPCError as exc:
        status = getattr(exc, "status", None)
        code = getattr(status, "status_code", None)
        text = getattr(status, "status_message", "") or str(exc)
        if code in _RETRYABLE or code is None:
            raise AgentUnavailable(f"{subject} is unavailable; retry", details=text) from exc
        raise AgentRefused(f"{subject} refused the request", details=text) from exc
    except (OSError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
        raise AgentUnavailable(
            f"{subject}: the agent is not reachable; is the aether agent running on this node?",
            details=str(exc),
        ) from exc


async def call_agent(
    socket: Path, method: str, request: Message, response_type: type[ResponseT]
) -> ResponseT:
    """Call `method` of the agent's CNI service on `socket` and return its response.

    Raises:
        AgentUnavailable: the socket could not be reached, or the agent answered UNAVAILABLE (it is starting or
            stopping). Bound the call with `trio.fail_after` at the call site; `agent_errors` turns the
            `TooSlowError` into `AgentUnavailable` too.
        AgentRefused: the agent answered another gRPC error.
    """
    request_type, expected = METHODS[method]
    assert isinstance(request, request_type), f"{method} takes {request_type.__name__}; this is a bug"
    assert response_type is expected, f"{method} returns {expected.__name__}; this is a bug"
    with agent_errors(socket, method):
        async with open_grpc_socket(ListenAddress.unix(socket)) as grpc_socket:
            return await unary_call(
                grpc_socket, service=SERVICE_NAME, method=method, request=request, response_type=response_type
            )
