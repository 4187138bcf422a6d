"""`aether registrar` as a real process: it serves on the given socket and its registry survives a kill -9."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from aether.cli import main
from tests.registrar.test_server import _call, _registration

START_TIMEOUT = 20.0
"""Seconds the process gets to start listening (import + load; well under one on an idle machine)."""


def _start(data: Path, socket: Path) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aether.cli",
            "registrar",
            "--data-dir",
            str(data),
            "--listen",
            f"unix:{socket}",
        ],
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + START_TIMEOUT
    while not socket.exists():
        assert process.poll() is None, process.stderr.read().decode() if process.stderr else "exited"
        assert time.monotonic() < deadline, "the registrar did not start listening"
        time.sleep(0.02)
    return process


def test_the_registrar_serves_and_its_registry_survives_a_kill(tmp_path: Path) -> None:
    """Register an endpoint, SIGKILL the process, start it again on the same directory: the endpoint is listed."""
    socket, data = tmp_path / "registrar.sock", tmp_path / "data"
    process = _start(data, socket)
    try:
        _call(socket, "RegisterEndpoint", _registration("10.0.0.7"))
    finally:
        process.kill()
        process.wait()
    socket.unlink(missing_ok=True)
    process = _start(data, socket)
    try:
        from aether.proto.registrar.v1 import registrar_pb2 as pb

        listed = _call(socket, "ListAllEndpoints", pb.ListAllEndpointsRequest())
        assert [endpoint.ip for service in listed.services.values() for endpoint in service.endpoints] == [
            "10.0.0.7"
        ]
    finally:
        process.terminate()
        process.wait()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["registrar", "--backend", "etcd"],
            "aether: error: backend 'etcd' is not available in this version; use --backend embedded\n",
        ),
        (["registrar"], "aether: error: --data-dir DIR is required with --backend embedded\n"),
    ],
)
def test_unavailable_backends_and_missing_directories_are_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A clear message and exit status 2, before anything starts."""
    assert main(argv) == 2
    assert capsys.readouterr().err == message
