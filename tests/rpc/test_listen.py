"""Tests of aether.rpc.listen: parsing listen addresses, and where and how `serve_grpc` listens."""

from __future__ import annotations

import contextlib
import errno
import functools
import gc
import os
import re
import socket
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import purerpc
import pytest
import trio
from google.protobuf import wrappers_pb2

from aether.plane.plane import DEFAULT_XDS_SOCKET
from aether.rpc.errors import InvalidListenAddressError, InvalidServeOptionError, ListenError
from aether.rpc.listen import MAX_MESSAGE_LENGTH_LIMIT, ListenAddress, serve_grpc

SERVICE_NAME = "aether.test.Echo"
FORMS = "'unix:/absolute/path', 'ipv4:port', '[ipv6]:port' or ':port' (all interfaces)"


def _echo_service() -> purerpc.Service:
    async def unary(request: wrappers_pb2.StringValue) -> wrappers_pb2.StringValue:
        return wrappers_pb2.StringValue(value=f"echo {request.value}")

    service = purerpc.Service(SERVICE_NAME)
    service.add_method(
        "Unary",
        unary,
        purerpc.RPCSignature(
            purerpc.Cardinality.UNARY_UNARY, wrappers_pb2.StringValue, wrappers_pb2.StringValue
        ),
    )
    return service


def _call_unary(address: ListenAddress, text: str) -> str:
    target = f"unix:{address.path}" if address.path is not None else str(address)
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_unary(
            f"/{SERVICE_NAME}/Unary",
            request_serializer=wrappers_pb2.StringValue.SerializeToString,
            response_deserializer=wrappers_pb2.StringValue.FromString,
        )
        reply: wrappers_pb2.StringValue = call(wrappers_pb2.StringValue(value=text), timeout=10)
    return reply.value


@contextlib.asynccontextmanager
async def serving(listen: ListenAddress) -> AsyncIterator[ListenAddress]:
    """Run `serve_grpc` with the echo service for the duration of the block; yield the bound address."""
    async with trio.open_nursery() as nursery:
        yield await nursery.start(functools.partial(serve_grpc, [_echo_service()], listen=listen))
        nursery.cancel_scope.cancel()


async def _connects(host: str, port: int) -> bool:
    try:
        stream = await trio.open_tcp_stream(host, port)
    except OSError:
        return False
    await stream.aclose()
    return True


def _message(error: str) -> str:
    return rf"^{re.escape(error)}$"


# --- ListenAddress -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("unix:/run/aether/xds.sock", ListenAddress(path=Path("/run/aether/xds.sock"))),
        ("127.0.0.1:18000", ListenAddress(host="127.0.0.1", port=18000)),
        ("127.0.0.1:0", ListenAddress(host="127.0.0.1", port=0)),
        ("[::1]:18000", ListenAddress(host="::1", port=18000)),
        ("10.1.2.3:65535", ListenAddress(host="10.1.2.3", port=65535)),
        ("0.0.0.0:18000", ListenAddress(host="0.0.0.0", port=18000)),
        ("[::]:18000", ListenAddress(host="::", port=18000)),
        (":18000", ListenAddress(host="", port=18000)),
    ],
)
def test_parse_accepts_the_documented_forms(text: str, expected: ListenAddress) -> None:
    """Each documented form parses, and prints back as the same text."""
    parsed = ListenAddress.parse(text)
    assert parsed == expected
    assert str(parsed) == text


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", f"expected {FORMS}"),
        ("18000", f"expected {FORMS}"),
        ("tcp://127.0.0.1:18000", f"expected {FORMS}"),
        ("[::1]", f"expected {FORMS}"),
        ("[::1]18000", f"expected {FORMS}"),
        ("localhost:18000", "host must be an ip address, or empty for all interfaces (got 'localhost')"),
        ("[fe80::zz]:18000", "host must be an ip address, or empty for all interfaces (got 'fe80::zz')"),
        ("::1:18000", "an ipv6 address must be in brackets, as in '[::1]:18000' (got '::1')"),
        ("[127.0.0.1]:18000", "brackets are for ipv6 addresses only (got '127.0.0.1')"),
        ("127.0.0.1:70000", "port must be 0..65535 (got 70000)"),
        ("127.0.0.1:", "port must be a decimal number (got '')"),
        ("127.0.0.1:-1", "port must be a decimal number (got '-1')"),
        ("127.0.0.1:\uff11\uff18", "port must be a decimal number (got '\uff11\uff18')"),
        ("unix:", "the unix socket path is empty"),
        ("unix:run/xds.sock", "the unix socket path must be absolute (got 'run/xds.sock')"),
        ("unix:/" + "a" * 107, "the unix socket path must be at most 107 bytes (got 108)"),
    ],
)
def test_parse_refuses_anything_else(text: str, reason: str) -> None:
    """Anything but the documented forms is refused with a message naming the text and the rule it breaks."""
    with pytest.raises(InvalidListenAddressError, match=_message(f"listen address {text!r}: {reason}")):
        ListenAddress.parse(text)


def test_constructors_check_like_parse() -> None:
    """`unix`, `tcp` and the plain constructor refuse what `parse` refuses."""
    with pytest.raises(
        InvalidListenAddressError,
        match=_message(
            "listen address 'unix:relative.sock': the unix socket path must be absolute (got 'relative.sock')"
        ),
    ):
        ListenAddress.unix(Path("relative.sock"))
    with pytest.raises(
        InvalidListenAddressError,
        match=_message(
            "listen address 'example.com:80': host must be an ip address, or empty for all interfaces"
            " (got 'example.com')"
        ),
    ):
        ListenAddress.tcp(host="example.com", port=80)
    with pytest.raises(
        InvalidListenAddressError,
        match=_message(
            "listen address \"path=PosixPath('/x.sock'), host='127.0.0.1', port=1\":"
            " give either a unix socket path, or a host and a port"
        ),
    ):
        ListenAddress(path=Path("/x.sock"), host="127.0.0.1", port=1)
    with pytest.raises(
        InvalidListenAddressError,
        match=_message(
            "listen address 'path=None, host=None, port=None': give either a unix socket path, or a host and a port"
        ),
    ):
        ListenAddress()


def test_default_socket_is_the_agents() -> None:
    """The default xDS socket is /run/aether/xds.sock."""
    assert str(ListenAddress.unix(DEFAULT_XDS_SOCKET)) == "unix:/run/aether/xds.sock"


# --- serve_grpc on a Unix socket -----------------------------------------------------------------


async def test_unix_socket_gets_mode_0660_and_is_removed_on_exit(tmp_path: Path) -> None:
    """The socket's directories are created, the socket is mode 0660, serves, and is gone once serving ends."""
    path = tmp_path / "run" / "aether" / "xds.sock"
    async with serving(ListenAddress.unix(path)) as address:
        assert address == ListenAddress.unix(path)
        mode = path.lstat().st_mode
        assert stat.S_ISSOCK(mode)
        assert stat.S_IMODE(mode) == 0o660
        assert await trio.to_thread.run_sync(_call_unary, address, "uds") == "echo uds"
    assert not path.exists()


async def test_stale_unix_socket_is_replaced(tmp_path: Path) -> None:
    """A socket file nobody listens on (left by a process that died) is replaced."""
    path = tmp_path / "xds.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stale:
        stale.bind(os.fspath(path))
    async with serving(ListenAddress.unix(path)) as address:
        assert await trio.to_thread.run_sync(_call_unary, address, "fresh") == "echo fresh"


async def test_live_unix_socket_is_not_taken_over(tmp_path: Path) -> None:
    """A second server on the path of a live one is refused, and the first one goes on serving."""
    address = ListenAddress.unix(tmp_path / "xds.sock")
    async with serving(address):
        with pytest.raises(
            ListenError,
            match=_message(f"cannot listen on {str(address)!r}: another server is listening on this socket"),
        ):
            await serve_grpc([_echo_service()], listen=address)
        assert await trio.to_thread.run_sync(_call_unary, address, "still") == "echo still"


async def test_path_that_is_not_a_socket_is_left_alone(tmp_path: Path) -> None:
    """A regular file at the socket's path is refused, not deleted."""
    path = tmp_path / "xds.sock"
    path.write_text("not a socket")
    address = ListenAddress.unix(path)
    with pytest.raises(
        ListenError, match=_message(f"cannot listen on {str(address)!r}: the path exists and is not a socket")
    ):
        await serve_grpc([_echo_service()], listen=address)
    assert path.read_text() == "not a socket"


async def test_socket_file_replaced_meanwhile_is_not_removed(tmp_path: Path) -> None:
    """On exit only the socket file this server created is removed, not one that replaced it."""
    path = tmp_path / "xds.sock"
    async with serving(ListenAddress.unix(path)):
        path.unlink()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as other:
            other.bind(os.fspath(path))
    assert stat.S_ISSOCK(path.lstat().st_mode)


# --- serve_grpc on TCP ---------------------------------------------------------------------------


async def test_tcp_port_0_reports_the_port_chosen() -> None:
    """Asked for port 0, the server reports the port it listens on, and serves there."""
    async with serving(ListenAddress.parse("127.0.0.1:0")) as address:
        assert address.host == "127.0.0.1"
        assert address.port is not None
        assert address.port != 0
        assert await trio.to_thread.run_sync(_call_unary, address, "tcp") == "echo tcp"


async def test_tcp_on_ipv6_loopback() -> None:
    """An IPv6 host works like an IPv4 one."""
    async with serving(ListenAddress.parse("[::1]:0")) as address:
        assert await trio.to_thread.run_sync(_call_unary, address, "v6") == "echo v6"


async def test_tcp_listens_on_the_given_host_only() -> None:
    """Listening on 127.0.0.1, the server does not answer on another local address (127.0.0.2)."""
    async with serving(ListenAddress.parse("127.0.0.1:0")) as address:
        assert address.port is not None
        assert await _connects("127.0.0.1", address.port)
        assert not await _connects("127.0.0.2", address.port)


@pytest.mark.parametrize("text", [":0", "0.0.0.0:0"])
async def test_tcp_listens_on_all_interfaces_when_asked(text: str) -> None:
    """An empty host (or 0.0.0.0), given explicitly, listens on every interface."""
    async with serving(ListenAddress.parse(text)) as address:
        assert address.port is not None
        assert await _connects("127.0.0.2", address.port)


# purerpc's Server never closes its listening socket, nor the connections it accepted: the garbage collector does.
@pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning")
async def test_purerpc_server_listens_on_all_interfaces() -> None:
    """Why serve_grpc does not use `purerpc.Server.serve_async`: it listens on every interface."""
    async with trio.open_nursery() as nursery:
        port = await nursery.start(purerpc.Server(port=0).serve_async)
        assert await _connects("127.0.0.2", port)
        nursery.cancel_scope.cancel()
    gc.collect()  # its sockets' ResourceWarnings come now, under this test's filter, not in a later test


async def test_tcp_port_in_use_is_a_listen_error() -> None:
    """A port another socket listens on is a `ListenError`, chained to the OSError."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ListenError, match=rf"^cannot listen on '127\.0\.0\.1:{port}': ") as caught:
            await serve_grpc([_echo_service()], listen=ListenAddress.tcp(host="127.0.0.1", port=port))
    assert isinstance(caught.value.__cause__, OSError)
    assert caught.value.__cause__.errno == errno.EADDRINUSE


# --- serve_grpc options --------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [0, MAX_MESSAGE_LENGTH_LIMIT + 1])
async def test_message_length_limit_out_of_range_is_refused(limit: int) -> None:
    """`max_message_length` must be 1..2**30-1: purerpc advertises twice it as an HTTP/2 window."""
    with pytest.raises(
        InvalidServeOptionError, match=_message(f"max_message_length: must be 1..1073741823 (got {limit})")
    ):
        await serve_grpc(
            [_echo_service()], listen=ListenAddress.parse("127.0.0.1:0"), max_message_length=limit
        )


async def test_two_services_with_one_name_are_refused() -> None:
    """Two services under one name are refused (purerpc would silently keep the last)."""
    with pytest.raises(
        InvalidServeOptionError,
        match=_message("services: service names must be unique (got 'aether.test.Echo')"),
    ):
        await serve_grpc([_echo_service(), _echo_service()], listen=ListenAddress.parse("127.0.0.1:0"))
