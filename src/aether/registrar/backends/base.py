"""The `Backend` interface: where the registrar keeps its registry (embedded store, etcd, Kubernetes).

Three kinds of store fit it:

- a store only this registrar writes (embedded, memory): the registrar numbers the versions, `apply` stores
  each mutation and returns None, and `serve_updates` has nothing to report;
- a store several writers share (etcd, with registrar replicas active/active): the store numbers the
  versions, `apply` writes and returns the version at which the write will come back through
  `serve_updates`, and every change (this replica's included) reaches the snapshot through that feed;
- a read-only store (Kubernetes): `writable` is False, `apply` is never called, and the feed is the only input.
"""

from __future__ import annotations

from typing import Protocol

import attrs
import trio

from aether.registrar.snapshot import Change, Mutation, RegistrySnapshot, StoreUpdate

__all__ = ["Backend", "BackendFeed", "StoreAvailability"]


@attrs.frozen(kw_only=True)
class StoreAvailability:
    """The store became reachable (`available`) or unreachable; `reason` says why, for logs and statistics.

    While unavailable the registrar keeps serving its snapshot, reports not-ready, and holds writes (see
    `Registrar`). A backend sends `StoreAvailability(available=True)` only after the updates that bring the
    registrar up to date with the store (a resumed watch's backlog, or a re-list) were sent.
    """

    available: bool
    reason: str = ""


BackendFeed = StoreUpdate | StoreAvailability
"""What a backend's `serve_updates` sends to the registrar's owner task."""


class Backend(Protocol):
    """A registry store. The server's owner task calls `load` and `apply`, so those calls never overlap.

    Lifecycle: the server calls `load` once, then starts `serve_updates` (in its own task) and only then
    calls `apply`. The registrar is ready (available) right after `load`, until the feed says otherwise.
    """

    @property
    def description(self) -> str:
        """What the store is, for messages and logs: `etcd http://10.0.0.1:2379`, `embedded /var/lib/registry`."""
        ...

    @property
    def writable(self) -> bool:
        """Whether RegisterEndpoint and UnregisterEndpoint may change this store.

        When False the registrar refuses both with FAILED_PRECONDITION (naming the backend) and never calls
        `apply`; the registry changes only through `serve_updates`.
        """
        ...

    async def load(self) -> RegistrySnapshot:
        """Return the registry as stored: its endpoints, its version, and as much history as the store keeps.

        May wait (retrying) until the store answers: the registrar serves nothing before its first snapshot,
        because an empty snapshot would tell every agent that all endpoints vanished.

        Raises:
            StoreError: The store cannot be used at all (damaged, misconfigured); the registrar stops.
        """
        ...

    async def apply(
        self, mutation: Mutation, *, snapshot: RegistrySnapshot, changes: tuple[Change, ...]
    ) -> int | None:
        """Make `mutation` durable; `snapshot` is the registry after it, `changes` what it changed.

        Called only when `writable`, and only for a mutation that changes the registrar's snapshot.
        Returns once the store holds it (a registrar restarted after this returns has it), with:

        - None: the registry now is `snapshot` (the registrar numbered the version, and publishes `changes`);
        - a version V: the store numbers versions; the write comes back through `serve_updates` in an update
          whose version is at least V (the registrar's snapshot does not move until then; `snapshot` and
          `changes` are only the registrar's prediction). The RPC answers once the snapshot reached V.

        Raises:
            StoreUnavailableError: The store cannot be reached now; nothing was written (the RPC fails with
                UNAVAILABLE and the registrar keeps running). Raise it only when sure the write did not happen
                or is harmless to repeat (a put of the same value, a delete).
            StoreError: The store failed for good; the registrar stops (it must not diverge from it).
        """
        ...

    async def serve_updates(
        self,
        updates: trio.abc.SendChannel[BackendFeed],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Send every change the store makes after the state `load` returned, in store order, until cancelled.

        Call `task_status.started()` once watching (a store without external changes may then return).
        Sends `StoreUpdate`s (each with a version greater than the last, when the store numbers versions)
        and `StoreAvailability` when the store goes away or comes back. Reconnecting, resuming and re-listing
        are the backend's own business: after an outage, send what changed (or an `EndpointsReplaced`), then
        `StoreAvailability(available=True)`. Never send an update the registrar made itself under a store
        that the registrar numbers (embedded, memory).

        Raises:
            StoreError: The store failed for good; the registrar stops.
        """
        ...
