"""The status writer: puts what `aether.controller.status_diff` says through an object's `status` subresource,
conditional on the resourceVersion it was computed from; a 409 is retried on a fresh read."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

import attrs

from aether.controller.status_diff import status_update
from aether.core.gateway import ObjectStatus
from aether.kube.api import KubeClient
from aether.kube.errors import ApiStatusError
from aether.kube.resources import JsonObject, ResourceType, object_key

__all__ = ["CONFLICT_ATTEMPTS", "StatusWrite", "write_status"]

LOG = logging.getLogger("aether.controller.status_writer")

CONFLICT_ATTEMPTS = 5
"""Writes tried on one object before giving up until the next change: each 409 means someone else wrote
meanwhile, and five in a row means a writer fighting over the same fields (its own log says which)."""


@attrs.frozen(kw_only=True)
class StatusWrite:
    """What writing one object's status came to."""

    stored: JsonObject | None
    """The object as stored after our write; None when nothing was written (already current, or gone)."""
    latest: JsonObject
    """The freshest copy of the object seen (stored by our write, re-read after a conflict, or as observed)."""
    writes: int
    """Writes issued (the successful one included)."""
    conflicts: int


async def write_status(
    client: KubeClient,
    resource: ResourceType,
    observed: JsonObject,
    computed: ObjectStatus | None,
    *,
    now: Callable[[], str],
    may_write: Callable[[], bool],
    addresses: Sequence[Mapping[str, str]] = (),
) -> StatusWrite:
    """Write `computed` into `observed`'s status if it changes it; on 409 read the object again and retry.

    Args:
        client: The API client.
        resource: The object's kind.
        observed: The object as last seen (its resourceVersion makes the write conditional).
        computed: The core's status of the object (None: ours, if any, goes).
        now: The transition time of conditions that change.
        may_write: Asked before every write: the leader election's "we still lead".
        addresses: A Gateway's `status.addresses` (see `status_diff.status_update`).

    Raises:
        ApiStatusError: A refusal other than 409 and 404 (the object was deleted: nothing to write).
        KubeError: The API could not be reached.
    """
    writes = conflicts = 0
    current = observed
    for _ in range(CONFLICT_ATTEMPTS):
        status = status_update(current, computed, now=now(), addresses=addresses)
        if status is None or not may_write():
            return StatusWrite(stored=None, latest=current, writes=writes, conflicts=conflicts)
        writes += 1
        try:
            stored = await client.replace(resource, {**current, "status": status}, subresource="status")
        except ApiStatusError as error:
            if error.code == 404:
                return StatusWrite(stored=None, latest=current, writes=writes, conflicts=conflicts)
            if error.code != 409:
                raise
            conflicts += 1
            metadata = current.get("metadata") or {}
            try:
                current = await client.get(
                    resource, name=str(metadata.get("name")), namespace=metadata.get("namespace")
                )
            except ApiStatusError as gone:
                if gone.code == 404:
                    return StatusWrite(stored=None, latest=current, writes=writes, conflicts=conflicts)
                raise
            continue
        return StatusWrite(stored=stored, latest=stored, writes=writes, conflicts=conflicts)
    LOG.warning(
        "status of %s %s: %d writes in a row conflicted; trying again on its next change",
        resource.kind,
        object_key(observed),
        CONFLICT_ATTEMPTS,
    )
    return StatusWrite(stored=None, latest=current, writes=writes, conflicts=conflicts)
