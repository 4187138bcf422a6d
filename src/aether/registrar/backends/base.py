"""The `Backend` interface: where the registrar keeps its registry (embedded store, etcd, Kubernetes)."""

from __future__ import annotations

from typing import Protocol

from aether.registrar.snapshot import Change, Mutation, RegistrySnapshot

__all__ = ["Backend"]


class Backend(Protocol):
    """A registry store. The server's owner task is its only caller, so calls never overlap.

    The server loads the registry once, then for each mutation computes the new snapshot with
    `aether.registrar.snapshot.apply` and hands it here before any watcher sees it.
    """

    async def load(self) -> RegistrySnapshot:
        """Return the registry as stored: its endpoints, its version, and as much history as the store keeps."""
        ...

    async def apply(
        self, mutation: Mutation, *, snapshot: RegistrySnapshot, changes: tuple[Change, ...]
    ) -> None:
        """Make `mutation` durable; `snapshot` is the registry after it, `changes` what it changed.

        Returns once the store holds it: a registrar restarted after this returns serves `snapshot.version`.
        """
        ...
