"""The host's Python-free `aether-cni` (C, `aether/cni/shim/aether-cni.c`), compiled here with the machine's cc.

Each run of the executable happens in a mount namespace (`unshare -m`, as root) in which every path of this
interpreter is an empty directory or file (the virtualenv, the standard library, the site directories, the binary),
and so is every other Python of the machine (each `python*` on PATH, /usr/lib/python3*, /usr/local/lib/python3*).
The wrapper proves it first (`python3` and this interpreter must fail there) and then execs the executable; so
what works below works on a node without Python. The agent runs in this process, outside that namespace.
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from aether.cni import CAPTURE_TABLE, EXCLUDE_OUTBOUND_PORTS, NFT_TABLE, settings_from_annotations
from aether.cni.config import version_result
from aether.cni.plugin import run_plugin
from aether.cni.wire import MAGIC, MAX_STDIN, PLUGIN_SOCKET_VARIABLE, PluginResponse
from aether.testing.cni_shim import compile_shim
from tests.cni.conftest import (
    Agent,
    NetnsPair,
    capture_routing,
    environment,
    managed,
    network_config,
    prev_result,
    ruleset,
)
from tests.needs import ROOT, needs

pytestmark = needs(ROOT, "cc", "nft", "ip")

PYTHON_HIDDEN = 99
"""The wrapper's exit status when Python still runs inside its namespace (the test would prove nothing)."""

WRAPPER = """
set -eu
empty_dir=$1 empty_file=$2 executable=$3
shift 3
for path in "$@"; do
    if [ -d "$path" ]; then mount --bind "$empty_dir" "$path"; else mount --bind "$empty_file" "$path"; fi
done
if python3 -c pass 2>/dev/null || "$PYTHON" -c pass 2>/dev/null; then exit 99; fi
exec "$executable"
"""


def _python_paths() -> list[str]:
    """Every path this interpreter runs from: its virtualenv, library and site directories, its binary."""
    paths = {sys.prefix, sys.exec_prefix, os.path.dirname(os.__file__)}
    paths.update(sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib"))
    paths.update(sys.path[1:])
    paths.add(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))
    paths.add(os.path.realpath(sys.executable))
    for directory in {*os.environ.get("PATH", "").split(os.pathsep), "/usr/bin", "/usr/local/bin"}:
        if directory:
            paths.update(str(path) for path in Path(directory).glob("python*"))
    for library in ("/usr/lib", "/usr/local/lib"):
        paths.update(str(path) for path in Path(library).glob("python3*"))
    existing = sorted(path for path in paths if path and os.path.exists(path) and path not in ("/", "/usr"))
    # A path under another hidden one is hidden already (and binding over it would need it to still exist).
    return [path for path in existing if not any(path.startswith(other + "/") for other in existing)]


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_shim(tmp_path_factory.mktemp("shim"))


@pytest.fixture(scope="module")
def hidden(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """An empty directory and an empty file, bound over the interpreter's paths."""
    directory = tmp_path_factory.mktemp("hidden")
    (directory / "dir").mkdir()
    (directory / "file").write_bytes(b"")
    return directory / "dir", directory / "file"


@attrs.frozen(kw_only=True)
class ShimRun:
    status: int
    output: dict[str, Any] | None
    stderr: str


async def run_hidden(
    shim: Path,
    hidden: tuple[Path, Path],
    env: Mapping[str, str],
    stdin: Mapping[str, Any] | bytes,
    *,
    socket: Path,
) -> ShimRun:
    """Run the executable with Python hidden (see the module's docstring), dialling the agent at `socket`."""
    data = stdin if isinstance(stdin, bytes) else json.dumps(stdin).encode()
    command = ["unshare", "-m", "sh", "-c", WRAPPER, "sh", str(hidden[0]), str(hidden[1]), str(shim)]
    full = {**env, PLUGIN_SOCKET_VARIABLE: str(socket), "PYTHON": sys.executable}
    full.setdefault("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
    done = await trio.run_process(
        [*command, *_python_paths()],
        stdin=data,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=full,
    )
    assert done.returncode != PYTHON_HIDDEN, "python3 still runs in the namespace meant to hide it"
    text = done.stdout.decode().strip()
    return ShimRun(
        status=done.returncode, output=json.loads(text) if text else None, stderr=done.stderr.decode()
    )


@pytest.mark.parametrize(
    "stdin",
    [b'{"cniVersion": "1.0.0"}', b'{"cniVersion":"0.4.0","name":"x"}', b'{"cniVersion": "9.9.9"}', b""],
)
async def test_version_answers_without_an_agent_as_the_python_plugin_does(
    shim: Path, hidden: tuple[Path, Path], tmp_path: Path, stdin: bytes
) -> None:
    """VERSION, with no Python and no agent: the config's version (when spoken) and every supported one."""
    run = await run_hidden(shim, hidden, {"CNI_COMMAND": "VERSION"}, stdin, socket=tmp_path / "none.sock")
    assert (run.status, run.output) == (0, json.loads(version_result(stdin)))


@pytest.mark.parametrize(("command", "code"), [("ADD", 11), ("DEL", 11), ("CHECK", 11), ("STATUS", 50)])
async def test_an_absent_agent_is_try_again_later_and_nothing_is_programmed(
    shim: Path, hidden: tuple[Path, Path], netns_pair: NetnsPair, short_dir: Path, command: str, code: int
) -> None:
    """No agent on the socket: code 11 (STATUS: 50), naming the socket; the pod's namespace has no rule."""
    missing = short_dir / "cni-plugin.sock"
    env = environment(command, netns=netns_pair.pod_path)
    run = await run_hidden(shim, hidden, env, network_config(short_dir / "cni.sock"), socket=missing)
    assert run.status == 1
    assert run.output == {
        "cniVersion": "1.1.0",
        "code": code,
        "msg": f"aether-cni: the aether agent is not reachable at '{missing}'; is the aether agent running on"
        " this node? the pod's network namespace is untouched; retry",
        "details": "connect: No such file or directory",
    }
    assert ruleset(netns_pair) == ""
    assert f"lookup {CAPTURE_TABLE}" not in capture_routing(netns_pair)[0]


async def test_add_check_del_with_python_hidden_program_what_the_python_plugin_programs(
    shim: Path, hidden: tuple[Path, Path], agent: Agent, netns_pair: NetnsPair
) -> None:
    """ADD, CHECK and DEL through the executable: the agent registers the pod and programs the namespace exactly
    as the Python plugin does (same ruleset, rules and routes); CHECK sees a rule gone; DEL leaves nothing."""
    managed(agent)
    config = network_config(agent.socket)
    before = ruleset(netns_pair), capture_routing(netns_pair)

    def env(command: str) -> dict[str, str]:
        return environment(command, netns=netns_pair.pod_path)

    add = await run_hidden(shim, hidden, env("ADD"), config, socket=agent.plugin_socket)
    assert (add.status, add.output) == (0, prev_result())
    assert agent.running.journal.state.pods["default/web-1"].pod.netns == str(netns_pair.pod_path)
    programmed = ruleset(netns_pair), capture_routing(netns_pair)
    assert NFT_TABLE in programmed[0]
    check = await run_hidden(shim, hidden, env("CHECK"), config, socket=agent.plugin_socket)
    assert (check.status, check.output) == (0, None)

    delete = await run_hidden(shim, hidden, env("DEL"), config, socket=agent.plugin_socket)
    assert (delete.status, delete.output) == (0, None)
    assert (ruleset(netns_pair), capture_routing(netns_pair)) == before
    assert "default/web-1" not in agent.running.journal.state.pods

    # The Python plugin, on the same pod: the same namespace.
    output, status = await trio.to_thread.run_sync(run_plugin, env("ADD"), json.dumps(config).encode())
    assert (status, json.loads(output)) == (0, prev_result())
    assert (ruleset(netns_pair), capture_routing(netns_pair)) == programmed

    netns_pair.exec(netns_pair.pod, "nft", "delete", "table", "ip", NFT_TABLE)
    drifted = await run_hidden(shim, hidden, env("CHECK"), config, socket=agent.plugin_socket)
    assert drifted.status == 1
    assert drifted.output is not None
    assert (drifted.output["code"], drifted.output["msg"]) == (
        1003,
        f"pod 'default/web-1': the capture in '{netns_pair.pod_path}' is not as programmed",
    )


@pytest.mark.parametrize(
    ("env", "stdin"),
    [
        pytest.param({"CNI_COMMAND": "ADD"}, b'{"cniVersion": "1.1.0"}', id="no-container"),
        pytest.param(environment("ADD", netns=Path("/run/netns/never-made")), b"", id="empty-stdin"),
        pytest.param(environment("ADD", netns=Path("/run/netns/never-made")), b"[1]", id="not-an-object"),
        pytest.param({"CNI_COMMAND": "FROB"}, b'{"cniVersion": "1.0.0"}', id="unknown-command"),
        pytest.param(
            environment("ADD", netns=Path("/run/netns/never-made")),
            json.dumps({"cniVersion": "1.0.0", "name": "net", "prevResult": {"ips": []}}).encode(),
            id="no-such-netns",
        ),
    ],
)
async def test_bad_input_gets_the_python_plugins_own_answer(
    shim: Path, hidden: tuple[Path, Path], agent: Agent, env: dict[str, str], stdin: bytes
) -> None:
    """The agent judges the request with the Python plugin's code: the same error object, the same status."""
    run = await run_hidden(shim, hidden, env, stdin, socket=agent.plugin_socket)
    output, status = await trio.to_thread.run_sync(run_plugin, env, stdin)
    assert (run.status, run.output) == (status, json.loads(output))
    assert status == 1


async def test_a_frame_of_another_wire_is_refused_with_a_precise_error(agent: Agent) -> None:
    """Bytes that are no request get code 1004 (install the executable of the agent's image); the agent goes on
    serving; a request cut short is answered so too."""
    for frame in (b"GET / HTTP/1.1\r\n\r\n", MAGIC + b"\x00\x00\x00\x05CNI_"):
        with trio.fail_after(10):
            stream = await trio.open_unix_socket(str(agent.plugin_socket))
            async with stream:
                await stream.send_all(frame)
                await stream.send_eof()
                received = b""
                while chunk := await stream.receive_some(65536):
                    received += chunk
        response = PluginResponse.from_bytes(received)
        error = json.loads(response.stdout)
        assert (response.status, error["code"]) == (1, 1004)
        assert error["msg"] == (
            f"the aether agent at '{agent.plugin_socket}' cannot read the request of this aether-cni;"
            " install the aether-cni of the agent's image"
        )
    assert agent.running.cni_plugin is not None
    statistics = agent.running.cni_plugin.statistics()
    assert (statistics.bad_frames, statistics.commands) == (2, 0)


async def test_the_agents_warnings_reach_the_runtime_on_stderr(
    shim: Path, hidden: tuple[Path, Path], agent: Agent, netns_pair: NetnsPair
) -> None:
    """An annotation entry that does not parse is skipped with a warning: the executable prints it on stderr, as
    the Python plugin does, and ADD succeeds with the rest."""
    annotations = {EXCLUDE_OUTBOUND_PORTS: "9090,99999"}
    managed(agent, annotations=annotations)
    _settings, warnings = settings_from_annotations(annotations)
    assert warnings
    run = await run_hidden(
        shim,
        hidden,
        environment("ADD", netns=netns_pair.pod_path),
        network_config(agent.socket),
        socket=agent.plugin_socket,
    )
    assert (run.status, run.output) == (0, prev_result())
    assert run.stderr == "".join(f"aether-cni: pod 'default/web-1': {warning}\n" for warning in warnings)


async def test_a_config_larger_than_the_wire_allows_is_refused_before_dialling(
    shim: Path, hidden: tuple[Path, Path], tmp_path: Path
) -> None:
    """A network config over 4 MiB is a decode failure (code 6), answered by the executable itself."""
    stdin = b'{"cniVersion": "1.0.0", "pad": "' + b"x" * MAX_STDIN + b'"}'
    run = await run_hidden(shim, hidden, {"CNI_COMMAND": "ADD"}, stdin, socket=tmp_path / "none.sock")
    assert (run.status, run.output) == (
        1,
        {"cniVersion": "1.1.0", "code": 6, "msg": f"network config: stdin is larger than {MAX_STDIN} bytes"},
    )
