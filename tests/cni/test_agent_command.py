"""`aether agent --cni-socket --dns-records` as a real process: the plugin's STATUS reaches it, the record file exists."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from aether.cli.main import main
from aether.testing.envoy import wait_for
from tests.cni.conftest import PluginRun, run_cni_process


async def test_the_agent_command_serves_the_cni_socket_and_writes_the_record_file(short_dir: Path) -> None:
    """STATUS answers 0 once the agent runs (50 before), and the agent has written an empty record file."""
    socket, records = short_dir / "cni.sock", short_dir / "dns" / "records.json"
    config = {"cniVersion": "1.1.0", "name": "net", "agentSocket": str(socket)}
    before = await run_cni_process({"CNI_COMMAND": "STATUS"}, config)
    assert (before.status, before.output and before.output["code"]) == (1, 50)
    command = [
        *(
            sys.executable,
            "-m",
            "aether.cli",
            "agent",
            "--node-name",
            "node-a",
            "--log-dir",
            str(short_dir / "log"),
        ),
        *("--xds", f"unix:{short_dir / 'xds.sock'}", "--admin-socket", str(short_dir / "admin.sock")),
        *("--cni-socket", str(socket), "--dns-records", str(records)),
    ]
    async with trio.open_nursery() as nursery:
        await nursery.start(
            functools.partial(trio.run_process, command, check=False, stderr=subprocess.DEVNULL)
        )
        await wait_for(trio.Path(socket).exists, timeout=20)
        assert await run_cni_process({"CNI_COMMAND": "STATUS"}, config) == PluginRun(status=0, output=None)
        document = json.loads(await trio.Path(records).read_text())
        assert (document["generation"], document["records"]) == (1, {})
        nursery.cancel_scope.cancel()


def test_the_plugin_socket_without_the_cni_socket_is_refused(
    short_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--cni-plugin-socket` runs commands against the CNI service: without `--cni-socket` it is a usage error."""
    argv = ["agent", "--node-name", "node-a", "--log-dir", str(short_dir / "log")]
    assert main([*argv, "--cni-plugin-socket", str(short_dir / "cni-plugin.sock")]) == 2
    assert capsys.readouterr().err == (
        "aether: error: --cni-plugin-socket needs --cni-socket (the CNI service it runs)\n"
    )
