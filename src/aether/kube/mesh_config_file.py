"""The projected MeshConfig file (`/etc/aether/mesh-config/mesh-config.yaml`, the ConfigMap `aether-mesh-config`
mounted) as a source of `MeshConfigUpdated` events, for the agent and the edge.

The file is read every `poll_interval`; a change of its bytes is parsed, and a config that differs from the one in
force (`current()`, the journal's) is sent as one event: a restart that finds the same file appends nothing.
A file that does not parse or breaks the CRD's rules is logged, naming the field and the rule, and the last good
config stays in force; a missing file (the ConfigMap not projected yet: its mount is optional) sends nothing.
Kubernetes swaps a ConfigMap volume's files atomically (a symlink flip), so a half-written file is never read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import attrs
import trio

from aether.core.events import Event
from aether.core.events.kube import MeshConfig, MeshConfigUpdated
from aether.kube.mesh_config import MeshConfigInvalid, mesh_config_from_text

__all__ = [
    "DEFAULT_MESH_CONFIG_FILE",
    "MeshConfigFileSource",
    "MeshConfigFileStatistics",
    "serve_mesh_config_file",
]

LOG = logging.getLogger("aether.kube.mesh_config")

DEFAULT_MESH_CONFIG_FILE = Path("/etc/aether/mesh-config/mesh-config.yaml")
SOURCE = "meshconfig"
POLL_INTERVAL = 1.0


@attrs.frozen(kw_only=True)
class MeshConfigFileStatistics:
    """Counters of a `MeshConfigFileSource`."""

    readings: int
    """Changed contents read (good or bad)."""
    sent: int
    """MeshConfigUpdated events sent."""
    failures: int
    """Readings refused (the last good config stayed)."""
    problem: str
    """Why the last reading was refused ("" when it was good)."""


class MeshConfigFileSource:
    """A running file source (handed to the parent by `serve_mesh_config_file`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._counts = {"readings": 0, "sent": 0, "failures": 0}
        self._problem = ""

    def statistics(self) -> MeshConfigFileStatistics:
        """Return the counters."""
        return MeshConfigFileStatistics(problem=self._problem, **self._counts)

    def read(self, content: bytes, *, current: MeshConfig, observed_at: int) -> Event | None:
        """The event of a changed `content`, or None (refused, or the config in force already)."""
        self._counts["readings"] += 1
        try:
            config = mesh_config_from_text(content.decode("utf-8"), where=str(self.path))
        except (MeshConfigInvalid, UnicodeDecodeError) as error:
            self._counts["failures"] += 1
            self._problem = str(error)
            LOG.warning("mesh config %s; keeping the config in force", error)
            return None
        self._problem = ""
        if config == attrs.evolve(current, generation=0):
            return None
        return MeshConfigUpdated(observed_at=observed_at, source=SOURCE, config=config)


def _content(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


async def serve_mesh_config_file(
    path: Path,
    *,
    send: trio.MemorySendChannel[Event],
    current: Callable[[], MeshConfig],
    poll_interval: float = POLL_INTERVAL,
    clock: Callable[[], int] = time.time_ns,
    task_status: trio.TaskStatus[MeshConfigFileSource] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Send the file's MeshConfig to `send` when it changes, until cancelled; the first reading's event (if any)
    is sent before `task_status.started`.

    Error handling: a read error other than a missing file (permissions, a directory) is logged like a bad file,
    and the file is read again at the next poll.
    """
    source = MeshConfigFileSource(path)
    seen: bytes | None = None
    async with send:
        started = False
        while True:
            try:
                content = await trio.to_thread.run_sync(_content, path)
            except OSError as error:
                content = None
                LOG.warning("mesh config %s: cannot be read (%s); keeping the config in force", path, error)
            if content is not None and content != seen:
                event = source.read(content, current=current(), observed_at=clock())
                if event is not None:
                    await send.send(event)
                    source._counts["sent"] += 1
            seen = content
            if not started:
                task_status.started(source)
                started = True
            await trio.sleep(poll_interval)
