"""Retention: which old segments and checkpoints a new checkpoint makes deletable, and deleting them.

:func:`plan_retention` is a pure function of the file lists;
:func:`apply_retention` does the blocking deletes.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from pathlib import Path

import attrs

from aether.log.checkpoint import CheckpointFile, list_checkpoints, write_checkpoint_file
from aether.log.layout import (
    SegmentFile,
    checkpoints_directory,
    fsync_directory,
    list_segment_files,
    segments_directory,
    translate_os_errors,
)

__all__ = [
    "CHECKPOINTS_KEPT",
    "DEFAULT_RETENTION_MARGIN",
    "RetentionPlan",
    "apply_retention",
    "plan_retention",
    "write_checkpoint_and_retain",
]

CHECKPOINTS_KEPT = 2
"""How many checkpoints retention keeps.

Two, so that if the newest one is found damaged on the next start, replay can begin at the one before it;
that is also why segments are kept back to the older checkpoint. More would only cost disk:
a checkpoint older than the second one is no better a starting point than the second one.
"""

DEFAULT_RETENTION_MARGIN = 100_000
"""How many records before the newest checkpoint are kept even once a checkpoint covers them.

They keep the recent history on disk for ``aether log replay --explain``: the events that produced
the state now served. At a few hundred bytes an event this is some tens of MiB.
"""


@attrs.frozen(kw_only=True)
class RetentionPlan:
    """The files retention deletes."""

    segments: tuple[SegmentFile, ...]
    """Segments to delete, oldest first (always a prefix of the log's segments)."""
    checkpoints: tuple[CheckpointFile, ...]
    """Checkpoints to delete, oldest first."""


def plan_retention(
    *, segments: Sequence[SegmentFile], checkpoints: Sequence[CheckpointFile], retention_margin: int
) -> RetentionPlan:
    """Decide which segments and checkpoints to delete.

    A segment is deleted when every record in it has a seq at or below both
    ``newest checkpoint seq - retention_margin`` and the seq of the older kept checkpoint,
    so replay can still start from either kept checkpoint.
    The last (active) segment is never deleted, and deleted segments are always the oldest ones,
    so the log never has a hole. All checkpoints but the newest :data:`CHECKPOINTS_KEPT` are deleted.

    Args:
        segments: The log's segments, oldest first; the last one is the active one.
        checkpoints: The log's valid checkpoints, oldest first.
        retention_margin: How many records before the newest checkpoint to keep.

    Returns:
        The files to delete.
    """
    if not checkpoints:
        return RetentionPlan(segments=(), checkpoints=())
    kept = checkpoints[-CHECKPOINTS_KEPT:]
    bound = min(kept[-1].seq - retention_margin, kept[0].seq)
    deletable: list[SegmentFile] = []
    # Invariant: segment i holds seqs first_seq(i) .. first_seq(i + 1) - 1, so only a next segment bounds it.
    for segment, following in itertools.pairwise(segments):
        if following.first_seq - 1 > bound:
            break
        deletable.append(segment)
    return RetentionPlan(segments=tuple(deletable), checkpoints=tuple(checkpoints[:-CHECKPOINTS_KEPT]))


def apply_retention(directory: Path, plan: RetentionPlan) -> None:
    """Delete the planned files, oldest first, then fsync the directories.

    A crash part way leaves a prefix deleted, which is still a valid log.

    Args:
        directory: The log directory.
        plan: The files to delete.

    Raises:
        LogWriteError: If deleting a file or syncing a directory failed.
    """
    for segment in plan.segments:
        with translate_os_errors(segment.path, operation="unlink"):
            os.unlink(segment.path)
    if plan.segments:
        with translate_os_errors(segments_directory(directory), operation="fsync"):
            fsync_directory(segments_directory(directory))
    for checkpoint in plan.checkpoints:
        with translate_os_errors(checkpoint.path, operation="unlink"):
            os.unlink(checkpoint.path)
    if plan.checkpoints:
        with translate_os_errors(checkpoints_directory(directory), operation="fsync"):
            fsync_directory(checkpoints_directory(directory))


def write_checkpoint_and_retain(
    directory: Path, *, seq: int, payload: bytes, retention_margin: int
) -> RetentionPlan:
    """Write a checkpoint durably, then delete the segments and checkpoints it makes unnecessary.

    The caller must make sure no segment is created meanwhile (the writer runs this from its committer),
    so the last segment listed is the active one.

    Args:
        directory: The log directory.
        seq: The checkpoint's seq; the records up to it must be durable.
        payload: The opaque checkpoint payload.
        retention_margin: How many records before the newest checkpoint to keep.

    Returns:
        What was deleted.

    Raises:
        LogWriteError: If writing the checkpoint, listing or deleting failed.
    """
    write_checkpoint_file(directory, seq=seq, payload=payload)
    with translate_os_errors(directory, operation="list"):
        plan = plan_retention(
            segments=list_segment_files(directory),
            checkpoints=list_checkpoints(directory),
            retention_margin=retention_margin,
        )
    apply_retention(directory, plan)
    return plan
