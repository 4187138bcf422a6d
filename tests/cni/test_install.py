"""`aether cni-install` on real directories: the executable copied, our entry chained once into the primary's
conflist, back after the primary rewrites it, out again on uninstall (SIGTERM); bad input named precisely."""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from aether.cli.main import main
from aether.cni.errors import InstallFailed
from aether.cni.install import PLUGIN_TYPE, Installer, plugin_entry, read_primary, replace_config

PRIMARY: dict[str, Any] = {
    "cniVersion": "1.0.0",
    "name": "cbr0",
    "plugins": [
        {"type": "flannel", "delegate": {"hairpinMode": True, "isDefaultGateway": True}},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ],
}
ENTRY = plugin_entry(mesh_dns="10.0.0.5")


def _write(path: Path, document: Any) -> None:
    """Write as a primary CNI does: a whole new file renamed over the old one."""
    partial = path.with_name(path.name + ".tmp")
    partial.write_text(document if isinstance(document, str) else json.dumps(document))
    partial.chmod(0o600)
    os.replace(partial, path)


def _node(tmp_path: Path) -> Installer:
    """A node: the image's executable, an empty CNI bin directory and a config directory with the primary."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "net.d").mkdir()
    plugin = tmp_path / "image-aether-cni"
    plugin.write_bytes(b"\x7fELF the executable")
    _write(tmp_path / "net.d" / "10-flannel.conflist", PRIMARY)
    return Installer(plugin=plugin, bin_dir=tmp_path / "bin", net_dir=tmp_path / "net.d", entry=ENTRY)


def _plugins(installer: Installer) -> list[str]:
    document = json.loads((installer.net_dir / "10-flannel.conflist").read_text())
    return [plugin["type"] for plugin in document["plugins"]]


def _leftovers(installer: Installer) -> list[str]:
    return sorted(
        name
        for directory in (installer.net_dir, installer.bin_dir)
        for name in os.listdir(directory)
        if name.startswith(".")
    )


def test_install_chains_once_and_uninstall_restores_the_primary(tmp_path: Path) -> None:
    """Two installs: the executable (0755, same bytes) and one entry of ours, last, the primary's file mode kept;
    uninstall takes exactly our entry out; no partial file is left anywhere."""
    installer = _node(tmp_path)
    for _ in range(2):
        assert installer.install_once() == installer.net_dir / "10-flannel.conflist"
    executable = installer.bin_dir / PLUGIN_TYPE
    assert executable.read_bytes() == installer.plugin.read_bytes()
    assert stat.S_IMODE(executable.stat().st_mode) == 0o755
    document = json.loads((installer.net_dir / "10-flannel.conflist").read_text())
    assert document == {**PRIMARY, "plugins": [*PRIMARY["plugins"], ENTRY]}
    assert stat.S_IMODE((installer.net_dir / "10-flannel.conflist").stat().st_mode) == 0o600
    assert installer.statistics().writes == 1
    assert installer.uninstall() == [installer.net_dir / "10-flannel.conflist"]
    assert json.loads((installer.net_dir / "10-flannel.conflist").read_text()) == PRIMARY
    assert _leftovers(installer) == []


def _bad(text: str) -> Callable[[Path], None]:
    return lambda net_dir: (net_dir / "10-primary.conflist").write_text(text)


@pytest.mark.parametrize(
    ("prepare", "message"),
    [
        pytest.param(
            lambda net_dir: net_dir.rmdir(),
            "CNI config directory '{net_dir}' does not exist: no primary CNI is configured on this node yet;"
            " aether-cni chains after it (install the cluster's CNI, or mount the host's /etc/cni/net.d here)",
            id="no-config-directory",
        ),
        pytest.param(
            lambda net_dir: (net_dir / "README").write_text("not a config"),
            "CNI config directory '{net_dir}' holds no config (*.conflist, *.conf, *.json) yet: waiting for the"
            " primary CNI to write its own",
            id="no-config",
        ),
        pytest.param(
            _bad('{"cniVersion": "1.0.0", "plugins": ['),
            "CNI config '{net_dir}/10-primary.conflist' is not JSON; fix or rewrite it (aether-cni leaves it as it"
            " is) (Expecting value: line 1 column 37 (char 36))",
            id="not-json",
        ),
        pytest.param(
            _bad("[1, 2]"),
            "CNI config '{net_dir}/10-primary.conflist' must be a JSON object (got list)",
            id="not-an-object",
        ),
        pytest.param(
            _bad('{"cniVersion": "1.0.0", "name": "net", "type": "bridge"}'),
            "CNI config '{net_dir}/10-primary.conflist' has no 'plugins' list: a single-plugin config cannot be"
            " chained into; configure the primary CNI to write a .conflist",
            id="single-plugin",
        ),
        pytest.param(
            _bad('{"cniVersion": "1.0.0", "name": "net", "plugins": [{"type": "bridge"}, {"mtu": 1}]}'),
            "CNI config '{net_dir}/10-primary.conflist': plugins[1] must be an object with a 'type' (got {{'mtu': 1}})",
            id="plugin-without-type",
        ),
        pytest.param(
            _bad('{"cniVersion": "1.0.0", "name": "net", "plugins": [{"type": "aether-cni"}]}'),
            "CNI config '{net_dir}/10-primary.conflist': aether-cni is its first plugin; it must follow the plugin"
            " that gives pods their addresses",
            id="ours-first",
        ),
    ],
)
def test_bad_input_is_named_and_nothing_is_written(
    tmp_path: Path, prepare: Callable[[Path], None], message: str
) -> None:
    """Each broken node gets its own message naming the file and the fix; no config is written."""
    net_dir = tmp_path / "net.d"
    net_dir.mkdir()
    (tmp_path / "bin").mkdir()
    (tmp_path / "plugin").write_bytes(b"executable")
    prepare(net_dir)
    before = {path.name: path.read_bytes() for path in net_dir.iterdir()} if net_dir.exists() else None
    installer = Installer(plugin=tmp_path / "plugin", bin_dir=tmp_path / "bin", net_dir=net_dir, entry=ENTRY)
    with pytest.raises(InstallFailed) as caught:
        installer.install_once()
    assert str(caught.value) == message.format(net_dir=net_dir)
    after = {path.name: path.read_bytes() for path in net_dir.iterdir()} if net_dir.exists() else None
    assert after == before


def test_a_conflist_that_changes_under_the_installer_is_not_replaced(tmp_path: Path) -> None:
    """The primary rewrites its file between our read and our rename: ours is dropped, theirs stays whole."""
    installer = _node(tmp_path)
    primary = read_primary(installer.net_dir)
    rewritten = {**PRIMARY, "plugins": [*PRIMARY["plugins"], {"type": "bandwidth"}]}
    _write(primary.path, rewritten)
    with pytest.raises(InstallFailed) as caught:
        replace_config(primary, {**PRIMARY, "plugins": [*PRIMARY["plugins"], ENTRY]})
    assert caught.value.message == (
        f"CNI config '{primary.path}' changed while aether-cni was being chained into it (its writer, the primary"
        " CNI, is at work); not replaced: retrying from what it wrote"
    )
    assert json.loads(primary.path.read_text()) == rewritten
    assert _leftovers(installer) == []


async def _wait_for(condition: Callable[[], bool]) -> None:
    with trio.fail_after(20):
        while not condition():  # noqa: ASYNC110 - files and counters have no event to wait on
            await trio.sleep(0.01)


async def test_the_watch_re_chains_after_a_rewrite_survives_bad_input_and_uninstalls(tmp_path: Path) -> None:
    """Watching: chained; the primary rewrites its file without us: chained again; a malformed rewrite is the
    current problem and the watch goes on until it is fixed; cancelled, it takes the entry out."""
    installer = _node(tmp_path)
    path = installer.net_dir / "10-flannel.conflist"
    chained = [*(plugin["type"] for plugin in PRIMARY["plugins"]), PLUGIN_TYPE]
    async with trio.open_nursery() as nursery:
        await nursery.start(lambda task_status: installer.serve(poll_interval=0.01, task_status=task_status))
        await _wait_for(lambda: _plugins(installer) == chained)
        _write(path, PRIMARY)
        await _wait_for(lambda: _plugins(installer) == chained and installer.statistics().writes == 2)
        _write(path, "{")
        await _wait_for(lambda: installer.statistics().problem.startswith(f"CNI config '{path}' is not JSON"))
        _write(path, PRIMARY)
        await _wait_for(lambda: _plugins(installer) == chained and installer.statistics().problem == "")
        nursery.cancel_scope.cancel()
    assert json.loads(path.read_text()) == PRIMARY


def test_once_without_a_config_directory_exits_1_with_the_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`aether cni-install --once` on a node without /etc/cni/net.d: status 1, the message on stderr."""
    installer = _node(tmp_path)
    missing = tmp_path / "nothing"
    argv = ["--plugin", str(installer.plugin), "--bin-dir", str(installer.bin_dir), "--net-dir", str(missing)]
    assert main(["cni-install", "--once", *argv]) == 1
    assert capsys.readouterr().err == (
        f"aether: error: CNI config directory '{missing}' does not exist: no primary CNI is configured on this node"
        " yet; aether-cni chains after it (install the cluster's CNI, or mount the host's /etc/cni/net.d here)\n"
    )


async def test_the_installer_command_uninstalls_on_sigterm(tmp_path: Path) -> None:
    """The DaemonSet's container: `aether cni-install` chains, and on SIGTERM takes the entry out and exits 0."""
    installer = _node(tmp_path)
    aether = Path(sys.executable).parent / "aether"
    command = [
        str(aether),
        "cni-install",
        f"--plugin={installer.plugin}",
        f"--bin-dir={installer.bin_dir}",
        f"--net-dir={installer.net_dir}",
        "--mesh-dns=10.0.0.5",
        "--poll-interval=0.05",
    ]
    process = await trio.lowlevel.open_process(command)
    try:
        await _wait_for(lambda: PLUGIN_TYPE in _plugins(installer))
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(20):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert json.loads((installer.net_dir / "10-flannel.conflist").read_text()) == PRIMARY
    assert (installer.bin_dir / PLUGIN_TYPE).read_bytes() == installer.plugin.read_bytes()
