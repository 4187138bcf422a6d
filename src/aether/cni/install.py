"""`aether cni-install`: put the host executable in the CNI bin directory and chain it into the primary CNI's
conflist, keep it chained while the primary rewrites its file, and take it out again on exit (uninstall).

The primary is the config file the runtime loads: the first, by name, of the directory's `*.conflist`, `*.conf` and
`*.json` (libcni's order). Our entry (`"type": "aether-cni"`) goes last in its `plugins`, once: an entry of ours
already there is replaced, never doubled. Every write is a new file in the same directory (a dot-name the runtime
ignores), fsynced, then renamed over the old one, so a runtime reads the old conflist or the new one, never half of
one; right before the rename the primary is read again, and if it changed meanwhile (its writer is at work) nothing
is replaced and the next poll starts over from what it wrote. A window remains between that check and the rename,
microseconds wide: a rewrite landing in it loses to ours and is redone by its writer on its own schedule.

Bad input never ends the watch: a node without the config directory (no primary CNI yet), a directory with no
config, a malformed or single-plugin primary, a primary that changes under us: each is `InstallFailed` with the
file and the rule, logged once when it appears, and retried at every poll.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import trio

from aether.cni.config import POD_ANNOTATIONS_CAPABILITY
from aether.cni.errors import InstallFailed

__all__ = [
    "CONFIG_SUFFIXES",
    "PLUGIN_TYPE",
    "POLL_INTERVAL",
    "Installer",
    "InstallerStatistics",
    "PrimaryConfig",
    "chained",
    "config_files",
    "install_executable",
    "plugin_entry",
    "read_primary",
    "render",
    "replace_config",
    "unchain_all",
    "unchained",
]

LOG = logging.getLogger("aether.cni.install")

PLUGIN_TYPE = "aether-cni"
"""Our entry's `type`: the executable's name in the CNI bin directory, and how the installer finds its entry."""
CONFIG_SUFFIXES = (".conflist", ".conf", ".json")
"""The files libcni loads from the config directory."""
POLL_INTERVAL = 1.0
"""Seconds between two looks at the config directory: a primary that rewrites its file loses our entry for at
most this long (pods added meanwhile start outside the mesh, as they would before the agent's first start)."""
_PARTIAL = ".aether-cni-partial"


def plugin_entry(*, mesh_dns: str | None = None) -> dict[str, Any]:
    """Our conflist entry: the runtime passes the pod's annotations (capture settings); `meshDNS` when given."""
    entry: dict[str, Any] = {"type": PLUGIN_TYPE, "capabilities": {POD_ANNOTATIONS_CAPABILITY: True}}
    if mesh_dns:
        entry["meshDNS"] = mesh_dns
    return entry


def chained(document: Mapping[str, Any], entry: Mapping[str, Any]) -> dict[str, Any]:
    """`document` (a valid conflist) with `entry` last in its plugins and no other entry of ours (pure)."""
    plugins = [plugin for plugin in document["plugins"] if plugin.get("type") != PLUGIN_TYPE]
    return {**document, "plugins": [*plugins, dict(entry)]}


def unchained(document: Mapping[str, Any]) -> dict[str, Any]:
    """`document` without any entry of ours (pure)."""
    return {**document, "plugins": [p for p in document["plugins"] if p.get("type") != PLUGIN_TYPE]}


def render(document: Mapping[str, Any]) -> bytes:
    """The bytes we write for a conflist: indented JSON, keys in the order they came, a final newline."""
    return (json.dumps(document, indent=2) + "\n").encode()


@attrs.frozen(kw_only=True)
class PrimaryConfig:
    """The primary CNI's conflist as read: its bytes, what identifies this version of the file, and its JSON."""

    path: Path
    content: bytes
    identity: tuple[int, int, int, int]
    """(device, inode, size, mtime in ns): a rewrite changes at least one (a rename-over changes the inode)."""
    document: Mapping[str, Any]


def _identity(status: os.stat_result) -> tuple[int, int, int, int]:
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)


def config_files(net_dir: Path) -> list[Path]:
    """The config files of `net_dir` the runtime would load, in its order (by name).

    Raises:
        InstallFailed: `net_dir` does not exist or is not a directory.
    """
    try:
        names = sorted(os.listdir(net_dir))
    except FileNotFoundError:
        raise InstallFailed(
            f"CNI config directory {str(net_dir)!r} does not exist: no primary CNI is configured on this node yet;"
            " aether-cni chains after it (install the cluster's CNI, or mount the host's /etc/cni/net.d here)"
        ) from None
    except NotADirectoryError:
        raise InstallFailed(f"CNI config directory {str(net_dir)!r} is not a directory") from None
    return [
        net_dir / name
        for name in names
        if not name.startswith(".") and name.endswith(CONFIG_SUFFIXES) and (net_dir / name).is_file()
    ]


def read_primary(net_dir: Path) -> PrimaryConfig:
    """Read and check the primary CNI's conflist.

    Raises:
        InstallFailed: no config directory, no config in it, or a primary that is not a conflist we can chain
            into (not JSON, not an object, no `plugins` list, an entry without a `type`): the message says which.
    """
    files = config_files(net_dir)
    if not files:
        raise InstallFailed(
            f"CNI config directory {str(net_dir)!r} holds no config (*.conflist, *.conf, *.json) yet:"
            " waiting for the primary CNI to write its own"
        )
    path = files[0]
    try:
        with path.open("rb") as handle:
            status = os.fstat(handle.fileno())
            content = handle.read()
    except FileNotFoundError:
        raise InstallFailed(f"CNI config {str(path)!r} was removed while being read; retrying") from None
    return PrimaryConfig(
        path=path, content=content, identity=_identity(status), document=_checked(path, content)
    )


def _checked(path: Path, content: bytes) -> dict[str, Any]:
    subject = f"CNI config {str(path)!r}"
    try:
        document = json.loads(content)
    except ValueError as exc:
        raise InstallFailed(
            f"{subject} is not JSON; fix or rewrite it (aether-cni leaves it as it is)", details=str(exc)
        ) from None
    if not isinstance(document, dict):
        raise InstallFailed(f"{subject} must be a JSON object (got {type(document).__name__})")
    plugins = document.get("plugins")
    if plugins is None:
        raise InstallFailed(
            f"{subject} has no 'plugins' list: a single-plugin config cannot be chained into; configure the"
            " primary CNI to write a .conflist"
        )
    if not isinstance(plugins, list) or not plugins:
        raise InstallFailed(f"{subject}: 'plugins' must be a non-empty list (got {plugins!r:.80})")
    for index, plugin in enumerate(plugins):
        if not isinstance(plugin, dict) or not isinstance(plugin.get("type"), str) or not plugin["type"]:
            raise InstallFailed(
                f"{subject}: plugins[{index}] must be an object with a 'type' (got {plugin!r:.80})"
            )
    if plugins[0]["type"] == PLUGIN_TYPE:
        raise InstallFailed(
            f"{subject}: aether-cni is its first plugin; it must follow the plugin that gives pods their addresses"
        )
    for key in ("cniVersion", "name"):
        if not isinstance(document.get(key), str):
            raise InstallFailed(f"{subject}: {key!r} must be a string (got {document.get(key)!r:.80})")
    return document


def _write_synced(path: Path, content: bytes, *, mode: int) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        os.fchmod(descriptor, mode)
        view = memoryview(content)
        while view:
            view = view[os.write(descriptor, view) :]
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _sync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def replace_config(primary: PrimaryConfig, document: Mapping[str, Any]) -> bool:
    """Write `document` over the primary's file (write, fsync, rename), unless the file already holds it.

    Returns whether the file was replaced.

    Raises:
        InstallFailed: the file changed since `primary` was read (nothing replaced; read it again).
    """
    content = render(document)
    if content == primary.content:
        return False
    path = primary.path
    partial = path.with_name(f".{path.name}{_PARTIAL}")
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o644
    _write_synced(partial, content, mode=mode)
    try:
        try:
            with path.open("rb") as handle:
                now, now_content = _identity(os.fstat(handle.fileno())), handle.read()
        except FileNotFoundError:
            now, now_content = (0, 0, 0, 0), b""
        if (now, now_content) != (primary.identity, primary.content):
            raise InstallFailed(
                f"CNI config {str(path)!r} changed while aether-cni was being chained into it (its writer, the"
                " primary CNI, is at work); not replaced: retrying from what it wrote",
                details=f"{len(primary.content)} bytes read, {len(now_content)} bytes now",
            )
        os.rename(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    _sync_directory(path.parent)
    return True


def install_executable(source: Path, bin_dir: Path) -> bool:
    """Copy the executable `source` to `bin_dir`/aether-cni (write, fsync, rename) unless it is there already.

    Returns whether it was written.

    Raises:
        InstallFailed: `source` cannot be read or `bin_dir` does not exist.
    """
    try:
        content = source.read_bytes()
    except OSError as exc:
        raise InstallFailed(
            f"the aether-cni executable {str(source)!r} cannot be read; the image builds it (Containerfile)",
            details=str(exc),
        ) from None
    if not bin_dir.is_dir():
        raise InstallFailed(
            f"CNI bin directory {str(bin_dir)!r} does not exist: mount the host's CNI bin directory"
            " (kubelet's --cni-bin-dir, /opt/cni/bin by default) here"
        )
    target = bin_dir / PLUGIN_TYPE
    try:
        if target.read_bytes() == content:
            return False
    except FileNotFoundError:
        pass
    partial = bin_dir / f".{PLUGIN_TYPE}{_PARTIAL}"
    try:
        _write_synced(partial, content, mode=0o755)
        os.rename(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    _sync_directory(bin_dir)
    return True


def unchain_all(net_dir: Path) -> list[Path]:
    """Take our entry out of every config of `net_dir` that has one; return the files rewritten.

    A file that is malformed or changes meanwhile is left as it is (logged): uninstall goes on with the others.
    """
    rewritten: list[Path] = []
    try:
        files = config_files(net_dir)
    except InstallFailed:
        return rewritten
    for path in files:
        try:
            with path.open("rb") as handle:
                status = os.fstat(handle.fileno())
                content = handle.read()
            document = json.loads(content)
            plugins = document.get("plugins") if isinstance(document, dict) else None
            if not isinstance(plugins, list) or not any(
                isinstance(plugin, dict) and plugin.get("type") == PLUGIN_TYPE for plugin in plugins
            ):
                continue
            primary = PrimaryConfig(path=path, content=content, identity=_identity(status), document=document)
            if replace_config(primary, unchained(document)):
                rewritten.append(path)
        except (OSError, ValueError, InstallFailed) as exc:
            LOG.warning("uninstall: %s left as it is: %s", path, exc)
    return rewritten


@attrs.frozen(kw_only=True)
class InstallerStatistics:
    """Counters of an `Installer`."""

    polls: int
    writes: int
    """Conflists (re)written with our entry: 1 after a clean install, +1 per rewrite of the primary."""
    problem: str
    """The current problem (empty while chained)."""


class Installer:
    """Keeps the executable installed and chained (see the module's docstring).

    Args:
        plugin: The executable to install (the image's /opt/aether/libexec/aether-cni).
        bin_dir: The host's CNI bin directory.
        net_dir: The host's CNI config directory.
        entry: Our conflist entry (`plugin_entry`).
    """

    def __init__(self, *, plugin: Path, bin_dir: Path, net_dir: Path, entry: Mapping[str, Any]) -> None:
        self.plugin = plugin
        self.bin_dir = bin_dir
        self.net_dir = net_dir
        self.entry = dict(entry)
        self._polls = self._writes = 0
        self._problem = ""

    def statistics(self) -> InstallerStatistics:
        """Return the installer's counters."""
        return InstallerStatistics(polls=self._polls, writes=self._writes, problem=self._problem)

    def install_once(self) -> Path:
        """Install the executable and chain it into the primary; return the primary's path (blocks).

        Raises:
            InstallFailed: what stands in the way (the message says what and how to fix it).
        """
        install_executable(self.plugin, self.bin_dir)
        primary = read_primary(self.net_dir)
        if replace_config(primary, chained(primary.document, self.entry)):
            self._writes += 1
            LOG.info("chained aether-cni into %s", primary.path)
        return primary.path

    def uninstall(self) -> list[Path]:
        """Take our entry out of every conflist (the executable stays: a runtime may be running it)."""
        rewritten = unchain_all(self.net_dir)
        for path in rewritten:
            LOG.info("took aether-cni out of %s", path)
        return rewritten

    async def serve(
        self,
        *,
        poll_interval: float = POLL_INTERVAL,
        uninstall: bool = True,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Keep chained until cancelled, then (when `uninstall`) take our entry out again.

        `task_status.started()` comes after the first attempt, whatever its outcome (see `statistics().problem`).
        """
        try:
            while True:
                self._polls += 1
                try:
                    await trio.to_thread.run_sync(self.install_once)
                    problem = ""
                except InstallFailed as exc:
                    problem = str(exc)
                if problem != self._problem:
                    if problem:
                        LOG.warning("%s", problem)
                    else:
                        LOG.info("aether-cni is chained into %s's primary conflist", self.net_dir)
                    self._problem = problem
                if self._polls == 1:
                    task_status.started()
                await trio.sleep(poll_interval)
        finally:
            if uninstall:
                with trio.CancelScope(shield=True), trio.move_on_after(10):
                    await trio.to_thread.run_sync(self.uninstall)
