"""The agent's sink that keeps each captured pod's set of served UDP destinations (`udp_services`, see
`aether.cni.capture`) equal to what the node's proxy serves (`aether.core.project.udp`), in the pod's namespace.

The set decides which datagrams the pod's capture diverts to the proxy, and the proxy can serve only those it has
a listener for. So a destination joins a pod's set only once the proxy has ACKed the listener version that holds
it, and leaves the set as soon as the projection drops it: a datagram is never diverted to a listener that is not
there (the UDP proxy could not send it on), and until then it goes where it was going.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

import attrs
import trio

from aether.cni.errors import NetnsProgrammingFailed
from aether.cni.netns import write_udp_services
from aether.core.project.udp import UdpCapture
from aether.core.snapshot import LISTENER_TYPE
from aether.core.state import State
from aether.plane.journal import Journal
from aether.xds.cache import SnapshotCache

__all__ = ["RETRY_FIRST", "RETRY_MAX", "UdpServicesStatistics", "UdpServicesWriter", "serve_udp_services"]

LOG = logging.getLogger("aether.cni")

RETRY_FIRST = 0.5
"""Seconds before the first retry of a failed write: `nft` fails transiently when netlink is busy (ENOBUFS) or a
namespace is being set up; half a second is longer than either lasts."""
RETRY_MAX = 30.0
"""The longest wait between retries (doubling from `RETRY_FIRST`): a namespace that keeps refusing is logged
twice a minute, not spun on."""

_Key = tuple[str, str, str]
"""`(pod key, netns, container id)`: a new sandbox has a new table, whose set must be written again."""

Write = Callable[[Path, Iterable[tuple[str, int]]], None]


@attrs.frozen(kw_only=True)
class UdpServicesStatistics:
    """What the writer has done."""

    pods: int
    """Pods whose set holds what was last wanted."""
    writes: int
    """Sets written."""
    failures: int
    """Writes that failed (and are retried)."""


class UdpServicesWriter:
    """The handle `serve_udp_services` starts with: its statistics.

    Args:
        cache: The node's snapshot cache (the listener version the ACK must match).
        node_name: The node id of the node's proxy.
        captures: Per captured pod, the destinations its listeners serve (`NodeProjector.udp_capture`), as of
            the snapshot in `cache`.
        write: Writes one pod's set (`aether.cni.netns.write_udp_services`; blocking, run in a worker thread).
    """

    def __init__(
        self,
        *,
        cache: SnapshotCache,
        node_name: str,
        captures: Callable[[], tuple[UdpCapture, ...]],
        write: Write = write_udp_services,
    ) -> None:
        self._cache = cache
        self._node_name = node_name
        self._captures = captures
        self._write = write
        self._wanted: dict[_Key, tuple[tuple[str, int], ...]] = {}
        self._written: dict[_Key, tuple[tuple[str, int], ...]] = {}
        self._changed = trio.Event()
        self._writes = 0
        self._failures = 0

    def statistics(self) -> UdpServicesStatistics:
        """Return what the writer has done."""
        held = sum(1 for key, value in self._wanted.items() if self._written.get(key) == value)
        return UdpServicesStatistics(pods=held, writes=self._writes, failures=self._failures)

    def _observe(self, state: State, now: int) -> None:
        """Work out every captured pod's wanted set; before the proxy ACKed the current listeners, only removals."""
        snapshot = self._cache.get(self._node_name)
        feedback = state.feedback.streams.get((self._node_name, LISTENER_TYPE))
        acked = (
            snapshot is not None
            and feedback is not None
            and feedback.acked_version == snapshot.version(LISTENER_TYPE)
        )
        wanted: dict[_Key, tuple[tuple[str, int], ...]] = {}
        for capture in self._captures():
            key = (capture.pod, capture.netns, capture.container_id)
            if acked:
                wanted[key] = capture.destinations
            else:
                kept = self._written.get(key, ())
                wanted[key] = tuple(item for item in capture.destinations if item in kept)
        if wanted != self._wanted:
            self._wanted = wanted
            self._changed.set()

    def _write_one(self, key: _Key, destinations: tuple[tuple[str, int], ...]) -> bool:
        """Write one pod's set; return False when it failed and must be retried."""
        pod, netns, _container = key
        try:
            self._write(Path(netns), destinations)
        except FileNotFoundError:
            # The namespace is gone (the pod is being deleted): nothing left to capture.
            return True
        except (NetnsProgrammingFailed, OSError) as exc:
            self._failures += 1
            LOG.warning("pod %r: the capture's UDP service set could not be written: %s", pod, exc)
            return False
        self._writes += 1
        return True

    async def _serve(self, task_status: trio.TaskStatus[UdpServicesWriter]) -> None:
        delay = RETRY_FIRST
        started = False
        while True:
            self._changed = trio.Event()
            wanted = self._wanted
            failed = False
            for key, destinations in sorted(wanted.items()):
                if self._written.get(key) == destinations:
                    continue
                if await trio.to_thread.run_sync(self._write_one, key, destinations):
                    self._written[key] = destinations
                else:
                    failed = True
            for key in set(self._written).difference(wanted):
                del self._written[key]  # the pod left, or its sandbox was replaced
            if not started:
                started = True
                task_status.started(self)
            if failed:
                with trio.move_on_after(delay):
                    await self._changed.wait()
                delay = min(delay * 2, RETRY_MAX)
            else:
                delay = RETRY_FIRST
                await self._changed.wait()


async def serve_udp_services(
    *,
    journal: Journal,
    cache: SnapshotCache,
    node_name: str,
    captures: Callable[[], tuple[UdpCapture, ...]],
    write: Write = write_udp_services,
    task_status: trio.TaskStatus[UdpServicesWriter] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Keep every captured pod's `udp_services` set equal to what the proxy serves, until cancelled.

    `journal`'s state carries the proxy's ACKs; the other arguments are `UdpServicesWriter`'s.

    Every set is written once at start (an agent that restarts does not know what its predecessor wrote), then
    after each state change that changes it. Bursts coalesce: the latest wanted sets win (STYLE C10).

    Error handling:
        A write that fails (`nft` refused, `NetnsProgrammingFailed`) is logged and retried with a backoff from
        `RETRY_FIRST` to `RETRY_MAX` seconds; a namespace that no longer exists is left alone.
    """
    writer = UdpServicesWriter(cache=cache, node_name=node_name, captures=captures, write=write)
    journal.subscribe(writer._observe)
    await writer._serve(task_status)
