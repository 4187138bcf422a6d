"""The active segment: opening it for append after recovery, writing a batch to it, rolling over.

Every function here is blocking; the writer's committer task runs them in a worker thread and waits,
so only one of them runs at a time.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path

import attrs

from aether.log.frame import SEGMENT_HEADER_SIZE, encode_frames, encode_segment_header
from aether.log.layout import (
    DIRECTORY_MODE,
    FILE_MODE,
    check_log_directory,
    checkpoints_directory,
    create_log_directory,
    fsync_directory,
    list_segment_files,
    segment_path,
    segments_directory,
    translate_os_errors,
    write_all,
)
from aether.log.recovery import RecoveryReport, recover

__all__ = ["ActiveSegment", "OpenedLog", "create_segment", "open_for_append", "roll_over", "write_batch"]


@attrs.frozen(kw_only=True)
class ActiveSegment:
    """The segment appends go to, open for writing."""

    path: Path
    """The segment file."""
    descriptor: int
    """A descriptor open with ``O_APPEND``: writes can only add bytes at the end."""
    size: int
    """The file's size."""


@attrs.frozen(kw_only=True)
class OpenedLog:
    """A log recovered and ready for appending."""

    recovery: RecoveryReport
    """What recovery found and did."""
    active: ActiveSegment
    """The last segment, open for append."""
    segments: int
    """How many segment files the log has."""


def open_for_append(directory: Path, *, create: bool) -> OpenedLog:
    """Create the log if asked and needed, recover it, and open its last segment for append.

    Args:
        directory: The log directory.
        create: Create the log if ``directory`` is missing or empty.

    Returns:
        The recovery report and the active segment (a new first segment for a log without one).

    Raises:
        NotALogError: If ``directory`` is not a log.
        LogDamageError: If recovery found damage a crash cannot explain.
        LogWriteError: If creating, cutting or opening a file failed.
    """
    if create:
        created = create_log_directory(directory)
    else:
        check_log_directory(directory)
        created = False
    report = recover(directory, created=created)
    with translate_os_errors(directory, operation="open"):
        # A creation interrupted after the marker was written leaves the subdirectories missing.
        for subdirectory in (segments_directory(directory), checkpoints_directory(directory)):
            subdirectory.mkdir(mode=DIRECTORY_MODE, exist_ok=True)
        segments = list_segment_files(directory)
        if not segments:
            active = create_segment(directory, report.last_seq + 1)
            return OpenedLog(recovery=report, active=active, segments=1)
        path = segments[-1].path
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        size = os.fstat(descriptor).st_size
    active = ActiveSegment(path=path, descriptor=descriptor, size=size)
    return OpenedLog(recovery=report, active=active, segments=len(segments))


def create_segment(directory: Path, first_seq: int) -> ActiveSegment:
    """Create a segment whose header is durable (file and directory fsynced) before anything is appended.

    Args:
        directory: The log directory.
        first_seq: The seq of the first record it will hold.

    Returns:
        The new segment, open for append.

    Raises:
        LogWriteError: If the file exists already, or creating, writing or syncing failed.
    """
    path = segment_path(directory, first_seq)
    with translate_os_errors(path, operation="segment create"):
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
        descriptor = os.open(path, flags, FILE_MODE)
        try:
            os.fchmod(descriptor, FILE_MODE)
            write_all(descriptor, encode_segment_header(first_seq))
            os.fsync(descriptor)
            fsync_directory(path.parent)
        except OSError:
            os.close(descriptor)
            raise
    return ActiveSegment(path=path, descriptor=descriptor, size=SEGMENT_HEADER_SIZE)


def roll_over(directory: Path, active: ActiveSegment, *, first_seq: int) -> ActiveSegment:
    """Start a new segment at ``first_seq`` and close the old one.

    Args:
        directory: The log directory.
        active: The current active segment.
        first_seq: The seq of the next record.

    Returns:
        The new active segment.

    Raises:
        LogWriteError: If creating the new segment failed; the old one stays active.
    """
    new = create_segment(directory, first_seq)
    # Every byte of the old segment is already fsynced, and Linux releases the descriptor even when
    # close reports an error, so an error here can lose nothing and is not worth breaking the log for.
    with contextlib.suppress(OSError):
        os.close(active.descriptor)
    return new


def write_batch(active: ActiveSegment, *, first_seq: int, payloads: Sequence[bytes]) -> ActiveSegment:
    """Frame a batch, append it with one write, and make it durable with one fdatasync.

    fdatasync flushes the data and the metadata needed to read it back (the file's size), which is all an append
    changes; unlike fsync it skips the modification time, one journal commit less per batch on ext4 and XFS.

    Args:
        active: The active segment.
        first_seq: The seq of the first payload.
        payloads: The batch's payloads, in seq order.

    Returns:
        The active segment with its new size.

    Raises:
        LogWriteError: If the write or the fsync failed; the file's tail is then unknown.
    """
    data = encode_frames(first_seq=first_seq, payloads=payloads)
    with translate_os_errors(active.path, operation="write"):
        write_all(active.descriptor, data)
    with translate_os_errors(active.path, operation="fsync"):
        os.fdatasync(active.descriptor)
    return attrs.evolve(active, size=active.size + len(data))
