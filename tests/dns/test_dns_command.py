"""`aether mesh-dns` flags: the listen default from $HOST_IP, and refusing to start without one."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path

import pytest

from aether.cli import dns_command
from aether.dns import HostPort


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="aether")
    dns_command.add_parser(root.add_subparsers(dest="role", required=True))
    return root


def test_flags_parse() -> None:
    """Repeatable upstreams, a listen address, and the default mesh domain."""
    arguments = parser().parse_args(
        [
            "mesh-dns",
            "--records",
            "r.json",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "10.0.0.1",
            "--upstream",
            "[::1]:5353",
        ]
    )
    assert arguments.upstream == [HostPort(host="10.0.0.1", port=53), HostPort(host="::1", port=5353)]
    assert (arguments.listen, arguments.mesh_domain) == (
        HostPort(host="127.0.0.1", port=0),
        "aether.internal",
    )


def test_listen_defaults_to_host_ip() -> None:
    """Without --listen, `$HOST_IP:18054`; without both, None."""
    assert dns_command.resolve_listen(None, environ={"HOST_IP": "10.1.2.3"}) == HostPort(
        host="10.1.2.3", port=18054
    )
    assert dns_command.resolve_listen(None, environ={}) is None


def test_refuses_to_start_without_host_ip_or_listen(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit status 2 and a message naming both ways to fix it."""
    monkeypatch.delenv("HOST_IP", raising=False)
    arguments = parser().parse_args(["mesh-dns", "--records", "r.json"])
    assert arguments.run(arguments) == 2
    assert capsys.readouterr().err == "aether: error: mesh-dns needs --listen HOST:PORT or $HOST_IP set\n"


def test_a_taken_port_is_refused_with_the_address(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Another server on the port: exit status 1 and one line naming the address, no traceback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        arguments = parser().parse_args(
            [
                "mesh-dns",
                "--records",
                str(tmp_path / "records.json"),
                "--listen",
                f"127.0.0.1:{port}",
                "--upstream",
                "127.0.0.1:9",
            ]
        )
        assert arguments.run(arguments) == 1
    assert capsys.readouterr().err.startswith(f"aether: error: mesh-dns cannot listen on 127.0.0.1:{port}: ")
