"""The command line imports per command: `aether --help` loads no role, `aether status` only the admin client.

Checked on the modules a fresh interpreter holds after the command (never on time)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aether.cli.commands import COMMANDS
from aether.cli.main import build_parser

HEAVY = ("trio", "purerpc", "envoy", "google.protobuf", "pyroute2", "aether.core", "aether.xds", "aether.log")
"""What `aether --help` must not import: the async runtime, gRPC, Envoy's protos, netlink, the core and adapters."""

_IMPORTED = """
import json, sys
from aether.cli import main
try:
    status = main(sys.argv[1:])
except SystemExit as exit:
    status = exit.code
print(json.dumps({"status": status, "modules": sorted(sys.modules)}))
"""


def _imported(*argv: str) -> tuple[int, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", _IMPORTED, *argv], capture_output=True, text=True, check=True, timeout=60
    )
    result = json.loads(done.stdout.splitlines()[-1])
    return result["status"], result["modules"]


def _loaded(modules: list[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(
        {
            package
            for package in packages
            for name in modules
            if name.split(".")[: len(package.split("."))] == package.split(".")
        }
    )


def test_help_imports_no_role() -> None:
    status, modules = _imported("--help")
    assert status == 0
    assert _loaded(modules, HEAVY) == []


def test_status_imports_the_admin_client_only(tmp_path: Path) -> None:
    status, modules = _imported("status", "--admin", str(tmp_path / "missing.sock"))
    assert status == 1
    assert _loaded(modules, HEAVY) == []
    assert "aether.plane.journal" not in modules


def test_every_command_is_listed_and_builds_its_full_parser() -> None:
    """The summary table names each command's module; the full parser has every command's options."""
    parser = build_parser()
    for command in COMMANDS:
        with pytest.raises(SystemExit) as usage:
            parser.parse_args([command.name, "--help"])
        assert usage.value.code == 0
