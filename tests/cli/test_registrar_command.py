"""`aether registrar` as a real process: it serves on the given socket and its registry survives a kill -9, on the
embedded store and on a real etcd."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aether.cli import main
from aether.cli.main import build_parser
from aether.proto.registrar.v1 import registrar_pb2 as pb
from aether.rpc.listen import ListenAddress
from aether.testing.etcd import EtcdServer, running_etcd
from tests.registrar._grpc import call, registration

START_TIMEOUT = 20.0
"""Seconds the process gets to start listening (import + load; well under one on an idle machine)."""


@pytest.fixture(scope="module")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """A real etcd on loopback for this module's tests."""
    with running_etcd(tmp_path_factory.mktemp("etcd") / "data") as server:
        yield server


def _interruptible() -> None:
    """In the child: SIGINT at its default, so Python raises KeyboardInterrupt on it (a suite started in the
    background inherits SIGINT ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(socket: Path, *options: str) -> subprocess.Popen[bytes]:
    """Start the registrar and wait for its "serving" line (printed once it listens)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "aether.cli", "registrar", *options, "--listen", f"unix:{socket}"],
        stderr=subprocess.PIPE,
        preexec_fn=_interruptible,
    )
    assert process.stderr is not None
    seen = b""
    deadline = time.monotonic() + START_TIMEOUT
    with selectors.DefaultSelector() as selector:
        selector.register(process.stderr, selectors.EVENT_READ)
        while f" on unix:{socket}".encode() not in seen:
            assert time.monotonic() < deadline, f"the registrar did not start listening: {seen.decode()}"
            if selector.select(timeout=0.1):
                chunk = os.read(process.stderr.fileno(), 4096)
                assert chunk, f"the registrar exited: {seen.decode()}"
                seen += chunk
    return process


def _survives_a_kill(socket: Path, *options: str) -> None:
    """Register an endpoint, SIGKILL the process, start it again with the same options: the endpoint is listed."""
    process = _start(socket, *options)
    try:
        call(socket, "RegisterEndpoint", registration("10.0.0.7"))
    finally:
        process.kill()
        process.wait()
    socket.unlink(missing_ok=True)
    process = _start(socket, *options)
    try:
        listed = call(socket, "ListAllEndpoints", pb.ListAllEndpointsRequest())
        assert [endpoint.ip for service in listed.services.values() for endpoint in service.endpoints] == [
            "10.0.0.7"
        ]
    finally:
        process.terminate()
        process.wait()


def test_the_registrar_serves_and_its_registry_survives_a_kill(tmp_path: Path) -> None:
    """The embedded store: the directory keeps the registry."""
    _survives_a_kill(tmp_path / "registrar.sock", "--data-dir", str(tmp_path / "data"))


def test_the_registrar_on_etcd_serves_and_its_registry_survives_a_kill(
    tmp_path: Path, etcd_server: EtcdServer
) -> None:
    """`--backend etcd --etcd-endpoints URL`: etcd keeps the registry (in a partition of this test's own)."""
    options = (
        "--backend",
        "etcd",
        "--etcd-endpoints",
        etcd_server.client_url,
        "--cluster-name",
        tmp_path.name,
    )
    _survives_a_kill(tmp_path / "registrar.sock", *options)
    keys = etcd_server.etcdctl(
        "get", "--prefix", "--keys-only", f"/aether/v1/regions/local/clusters/{tmp_path.name}/ns/"
    )
    assert keys.split() == [
        f"/aether/v1/regions/local/clusters/{tmp_path.name}/ns/shop/services/web/protocols/PROTOCOL_HTTP/endpoints/10.0.0.7"
    ]


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stopped_registrar_exits_0_with_nothing_on_stderr(tmp_path: Path, stop: signal.Signals) -> None:
    """Ctrl-C (SIGINT) and Kubernetes' SIGTERM are clean stops: status 0 and no traceback, whichever task the
    interrupt lands in (trio raises it inside the nurseries' exception group)."""
    socket = tmp_path / "registrar.sock"
    process = _start(socket, "--data-dir", str(tmp_path / "data"))
    call(socket, "RegisterEndpoint", registration("10.0.0.7"))
    process.send_signal(stop)
    assert process.stderr is not None
    _, rest = process.communicate(timeout=START_TIMEOUT)
    assert (process.returncode, rest.decode().strip()) == (0, "")  # at most the end of the serving line


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["registrar", "--backend", "etcd"],
            "aether: error: --etcd-endpoints URL,... is required with --backend etcd\n",
        ),
        (
            ["registrar", "--backend", "etcd", "--etcd-endpoints", "http://127.0.0.1:2379,etcd-1"],
            "aether: error: --etcd-endpoints: each entry must be http://HOST:PORT (got 'etcd-1')\n",
        ),
        (["registrar"], "aether: error: --data-dir DIR is required with --backend embedded\n"),
        (
            ["registrar", "--data-dir", "/nonexistent", "--trust-domain", "aether.test"],
            "aether: error: --trust-domain needs --tls-cert, --tls-key and --tls-bundle\n",
        ),
    ],
    ids=[
        "etcd-without-endpoints",
        "etcd-endpoint-without-scheme",
        "embedded-without-directory",
        "identities-without-tls",
    ],
)
def test_missing_or_bad_backend_options_are_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A clear message and exit status 2, before anything starts."""
    assert main(argv) == 2
    assert capsys.readouterr().err == message


def test_the_default_listener_is_loopback_only() -> None:
    """Without --listen the registrar binds 127.0.0.1:18090, never all interfaces."""
    arguments = build_parser().parse_args(["registrar"])
    assert arguments.listen == ListenAddress.tcp(host="127.0.0.1", port=18090)
