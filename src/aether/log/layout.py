"""The on-disk layout of a log directory: the marker, file names, listing, creation and durable writes.

Every function here is blocking; async callers run them in a thread.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

import attrs

from aether.log.errors import LogWriteError, NotALogError

__all__ = [
    "DIRECTORY_MODE",
    "FILE_MODE",
    "LOCK_NAME",
    "MARKER_CONTENT",
    "MARKER_NAME",
    "RUN_LOG_NAME",
    "SegmentFile",
    "check_log_directory",
    "check_log_or_empty",
    "create_log_directory",
    "find_log_directory",
    "fsync_directory",
    "list_segment_files",
    "segment_path",
    "translate_os_errors",
    "write_file_durably",
]

MARKER_NAME = "AETHER-LOG"
"""The file whose presence (and exact content) makes a directory a log."""

MARKER_CONTENT = b"aether event log v1\n"
"""The exact content of the marker file."""

LOCK_NAME = "LOCK"
"""The file the log's one writer holds an exclusive `flock` on (`aether.log.lock`); it names the owner's pid."""

SEGMENTS_DIRECTORY = "segments"
CHECKPOINTS_DIRECTORY = "checkpoints"

DIRECTORY_MODE = 0o700
"""Mode of the log directory and its subdirectories: the log holds private keys."""

FILE_MODE = 0o600
"""Mode of every file in the log: the log holds private keys."""

TEMPORARY_SUFFIX = ".tmp"
"""Suffix of a file being written before it is renamed into place."""

_SEGMENT_NAME = re.compile(r"^(\d{20})\.seg$")

RUN_LOG_NAME = "log"
"""The log's subdirectory in a run directory (``aether demo --log-dir DIR`` writes its log to ``DIR/log``)."""

# How many unexpected entries a NotALogError names before it stops listing.
_ENTRIES_SHOWN = 5


@attrs.frozen(kw_only=True)
class SegmentFile:
    """A segment file found in ``segments/``."""

    first_seq: int
    """The first seq, as the file name says."""
    path: Path
    """The file."""


def segments_directory(directory: Path) -> Path:
    """Return the ``segments/`` directory of a log."""
    return directory / SEGMENTS_DIRECTORY


def checkpoints_directory(directory: Path) -> Path:
    """Return the ``checkpoints/`` directory of a log."""
    return directory / CHECKPOINTS_DIRECTORY


def segment_path(directory: Path, first_seq: int) -> Path:
    """Return the path of the segment whose first seq is ``first_seq``.

    Args:
        directory: The log directory.
        first_seq: The segment's first seq.

    Returns:
        ``<directory>/segments/<first_seq:020d>.seg``.
    """
    return segments_directory(directory) / f"{first_seq:020d}.seg"


def list_segment_files(directory: Path) -> tuple[SegmentFile, ...]:
    """List a log's segment files, oldest first; other names in ``segments/`` are ignored.

    Args:
        directory: The log directory.

    Returns:
        The segments sorted by first seq; empty when ``segments/`` is missing or empty.
    """
    try:
        names = os.listdir(segments_directory(directory))
    except FileNotFoundError:
        return ()
    segments = []
    for name in names:
        match = _SEGMENT_NAME.match(name)
        if match is not None:
            segments.append(SegmentFile(first_seq=int(match[1]), path=segments_directory(directory) / name))
    return tuple(sorted(segments, key=lambda segment: segment.first_seq))


def _describe_entries(entries: list[str]) -> str:
    shown = sorted(entries)[:_ENTRIES_SHOWN]
    more = len(entries) - len(shown)
    return f"no {MARKER_NAME} marker; found {shown!r}" + (f" and {more!r} more" if more else "")


def _is_empty(entries: list[str]) -> bool:
    # A marker left half-written by an interrupted creation does not make the directory a non-empty one, nor does
    # the owner's lock file (`aether.log.lock`: it is taken before the log is created).
    return all(entry in (MARKER_NAME + TEMPORARY_SUFFIX, LOCK_NAME) for entry in entries)


def check_log_directory(directory: Path) -> None:
    """Check that ``directory`` is a log: it holds the marker file with the exact content.

    Args:
        directory: The directory to check.

    Raises:
        NotALogError: If it is missing, not a directory, has no marker or a marker with other content.
    """
    try:
        entries = os.listdir(directory)
    except FileNotFoundError:
        raise NotALogError(directory, found="directory does not exist") from None
    except NotADirectoryError:
        raise NotALogError(directory, found="not a directory") from None
    if MARKER_NAME not in entries:
        found = "directory is empty" if _is_empty(entries) else _describe_entries(entries)
        raise NotALogError(directory, found=found)
    try:
        with open(directory / MARKER_NAME, "rb") as marker:
            # Read a little more than the expected content so a longer marker is told apart.
            content = marker.read(len(MARKER_CONTENT) + 16)
    except IsADirectoryError:
        raise NotALogError(directory, found=f"{MARKER_NAME} is a directory") from None
    if content != MARKER_CONTENT:
        raise NotALogError(
            directory, found=f"{MARKER_NAME} contains {content!r}, expected {MARKER_CONTENT!r}"
        )


def check_log_or_empty(directory: Path) -> None:
    """Check that ``directory`` is a log, or that one can be created there (it is missing or empty).

    Raises:
        NotALogError: If it exists, is not empty and is not a log.
    """
    try:
        entries = os.listdir(directory)
    except FileNotFoundError:
        return
    except NotADirectoryError:
        raise NotALogError(directory, found="not a directory") from None
    if not _is_empty(entries):
        check_log_directory(directory)


def find_log_directory(directory: Path) -> Path:
    """Return the log ``directory`` names: itself when it is a log, else its ``log/`` subdirectory when that is one
    (a run directory, as ``aether demo --log-dir DIR`` leaves it).

    Args:
        directory: A log, or a directory that holds one as ``log/``.

    Raises:
        NotALogError: If neither is a log; when a log lies one level off (another subdirectory, or the parent:
            ``segments/`` given for its log), the error names it.
    """
    try:
        check_log_directory(directory)
    except NotALogError as error:
        if _is_log(directory / RUN_LOG_NAME):
            return directory / RUN_LOG_NAME
        nearby = next((candidate for candidate in _one_level_off(directory) if _is_log(candidate)), None)
        if nearby is None:
            raise
        raise NotALogError(directory, found=error.found, log_nearby=nearby) from None
    return directory


def _one_level_off(directory: Path) -> list[Path]:
    try:
        children = sorted(entry for entry in os.listdir(directory) if entry != RUN_LOG_NAME)
    except OSError:  # missing, not a directory, unreadable: only the parent may still be a log
        children = []
    return [*(directory / child for child in children), directory.parent]


def _is_log(directory: Path) -> bool:
    try:
        check_log_directory(directory)
    except (NotALogError, OSError):
        return False
    return True


def create_log_directory(directory: Path) -> bool:
    """Create a log in ``directory`` if it is missing or empty.

    Args:
        directory: The directory to create the log in.

    Returns:
        True if a log was created, False if ``directory`` already was a log.

    Raises:
        NotALogError: If ``directory`` exists, is not empty and is not a log.
        LogWriteError: If creating a file or directory failed.
    """
    try:
        entries = os.listdir(directory)
    except FileNotFoundError:
        entries = None
    except NotADirectoryError:
        raise NotALogError(directory, found="not a directory") from None
    if entries is not None and not _is_empty(entries):
        check_log_directory(directory)
        return False
    with translate_os_errors(directory, operation="create"):
        if entries is None:
            directory.mkdir(mode=DIRECTORY_MODE, parents=True)
            fsync_directory(directory.parent)
        # mkdir's mode is filtered by the umask, and an existing empty directory keeps its mode.
        os.chmod(directory, DIRECTORY_MODE)
        # The marker goes first: a log whose subdirectories are missing is an empty log,
        # while subdirectories without a marker would make the directory look foreign.
        write_file_durably(directory / MARKER_NAME, MARKER_CONTENT)
        for subdirectory in (segments_directory(directory), checkpoints_directory(directory)):
            subdirectory.mkdir(mode=DIRECTORY_MODE)
            os.chmod(subdirectory, DIRECTORY_MODE)
        fsync_directory(directory)
    return True


def fsync_directory(directory: Path) -> None:
    """Flush a directory's entries (creations, renames, deletions) to disk.

    Args:
        directory: The directory.
    """
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_all(descriptor: int, data: bytes) -> None:
    """Write all of ``data`` to a file descriptor, looping over short writes.

    Args:
        descriptor: An open file descriptor.
        data: The bytes to write.
    """
    view = memoryview(data)
    while view:
        written = os.write(descriptor, view)
        view = view[written:]


def write_file_durably(path: Path, data: bytes) -> None:
    """Replace ``path`` atomically with ``data``: temp file, fsync, rename, fsync the directory.

    A crash leaves either the old file or the new one, never a mix;
    a leftover ``<name>.tmp`` is removed by recovery.

    Args:
        path: The file to write.
        data: Its new content.
    """
    temporary = path.with_name(path.name + TEMPORARY_SUFFIX)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
    try:
        # A stale temporary file keeps its old mode through O_TRUNC.
        os.fchmod(descriptor, FILE_MODE)
        write_all(descriptor, data)
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    os.replace(temporary, path)
    fsync_directory(path.parent)


@contextlib.contextmanager
def translate_os_errors(path: Path, *, operation: str) -> Iterator[None]:
    """Turn an ``OSError`` raised inside the block into a :class:`LogWriteError` chained from it.

    Args:
        path: The file or directory the block works on.
        operation: What the block does, for the message.

    Raises:
        LogWriteError: If the block raised an ``OSError``.
    """
    try:
        yield
    except OSError as error:
        raise LogWriteError(path, operation=operation, error=error) from error
