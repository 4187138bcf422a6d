"""Checkpoints: opaque payloads saved at a seq so replay can start there instead of at seq 1.

Reading is blocking and read-only; writing is blocking and durable (temp file, fsync, rename, fsync).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import attrs

from aether.log.errors import CheckpointError, RecordsMissingError
from aether.log.frame import decode_checkpoint, encode_checkpoint
from aether.log.layout import (
    TEMPORARY_SUFFIX,
    check_log_directory,
    checkpoints_directory,
    list_segment_files,
    translate_os_errors,
    write_file_durably,
)
from aether.log.reader import read_last_seq

__all__ = [
    "SET_ASIDE_SUFFIX",
    "Checkpoint",
    "CheckpointFile",
    "CheckpointScan",
    "InvalidCheckpoint",
    "NewestCheckpoint",
    "checkpoint_path",
    "list_checkpoints",
    "read_checkpoint",
    "read_newest_checkpoint",
    "scan_checkpoints",
    "write_checkpoint_file",
]

SET_ASIDE_SUFFIX = ".invalid"
"""Recovery renames an invalid checkpoint ``X.ckpt`` to ``X.ckpt.invalid``, keeping the evidence."""

_CHECKPOINT_NAME = re.compile(r"^(\d{20})\.ckpt$")


@attrs.frozen(kw_only=True)
class Checkpoint:
    """A valid checkpoint, read whole."""

    seq: int
    """The seq of the last record the checkpoint includes; replay continues at ``seq + 1``."""
    payload: bytes
    """The opaque payload that was written."""


@attrs.frozen(kw_only=True)
class CheckpointFile:
    """A checkpoint file found in ``checkpoints/``, not yet read."""

    seq: int
    """The seq, as the file name says."""
    path: Path
    """The file."""


@attrs.frozen(kw_only=True)
class InvalidCheckpoint:
    """A checkpoint file that failed validation."""

    path: Path
    """The file."""
    reason: str
    """Why it is invalid, with the values found."""

    def to_error(self) -> CheckpointError:
        """Return the exception that reports this checkpoint."""
        return CheckpointError(self.path, reason=self.reason)


@attrs.frozen(kw_only=True)
class NewestCheckpoint:
    """The result of looking for the newest valid checkpoint."""

    checkpoint: Checkpoint | None
    """The newest valid checkpoint, or None when there is none."""
    invalid: tuple[InvalidCheckpoint, ...]
    """The invalid checkpoints newer than it, newest first; each one was skipped for the reason given."""


@attrs.frozen(kw_only=True)
class CheckpointScan:
    """Every file in ``checkpoints/``, validated."""

    valid: tuple[CheckpointFile, ...]
    """The valid checkpoints, oldest first."""
    invalid: tuple[InvalidCheckpoint, ...]
    """The invalid checkpoints, oldest first."""
    temporary: tuple[Path, ...]
    """Temporary files left by interrupted checkpoint writes."""
    set_aside: tuple[Path, ...]
    """Checkpoints an earlier recovery found invalid and renamed to ``*.ckpt.invalid``."""


def checkpoint_path(directory: Path, seq: int) -> Path:
    """Return the path of the checkpoint at ``seq``: ``<directory>/checkpoints/<seq:020d>.ckpt``."""
    return checkpoints_directory(directory) / f"{seq:020d}.ckpt"


def _list(directory: Path) -> tuple[list[CheckpointFile], list[Path], list[Path]]:
    try:
        names = sorted(os.listdir(checkpoints_directory(directory)))
    except FileNotFoundError:
        return [], [], []
    files, temporary, set_aside = [], [], []
    for name in names:
        path = checkpoints_directory(directory) / name
        match = _CHECKPOINT_NAME.match(name)
        if match is not None:
            files.append(CheckpointFile(seq=int(match[1]), path=path))
        elif name.endswith(TEMPORARY_SUFFIX):
            temporary.append(path)
        elif name.endswith(SET_ASIDE_SUFFIX):
            set_aside.append(path)
    # Names are zero-padded, so name order is seq order.
    return files, temporary, set_aside


def list_checkpoints(directory: Path) -> tuple[CheckpointFile, ...]:
    """List a log's checkpoint files, oldest first, without reading them.

    Args:
        directory: The log directory.

    Returns:
        One entry per ``<seq:020d>.ckpt`` file.

    Raises:
        NotALogError: If ``directory`` is not a log.
    """
    check_log_directory(directory)
    files, _, _ = _list(directory)
    return tuple(files)


def read_checkpoint(path: Path, *, last_seq: int | None = None) -> Checkpoint:
    """Read and validate one checkpoint file.

    Args:
        path: The checkpoint file, named ``<seq:020d>.ckpt``.
        last_seq: The log's last seq; a checkpoint beyond it is invalid. None skips that check.

    Returns:
        The checkpoint.

    Raises:
        CheckpointError: If the name, magic, length, checksum or seq is wrong.
    """
    match = _CHECKPOINT_NAME.match(path.name)
    if match is None:
        raise CheckpointError(path, reason="file name is not <seq:020d>.ckpt")
    decoded = decode_checkpoint(path.read_bytes())
    if isinstance(decoded, str):
        raise CheckpointError(path, reason=decoded)
    seq, payload = decoded
    if seq != int(match[1]):
        raise CheckpointError(
            path, reason=f"header says seq {seq!r} but the file name says {int(match[1])!r}"
        )
    if last_seq is not None and seq > last_seq:
        raise CheckpointError(path, reason=f"seq {seq!r} is beyond the log's last seq {last_seq!r}")
    return Checkpoint(seq=seq, payload=payload)


def read_newest_checkpoint(directory: Path, *, last_seq: int | None = None) -> NewestCheckpoint:
    """Find the newest valid checkpoint, the place replay starts from.

    Args:
        directory: The log directory.
        last_seq: The log's last seq, if the caller knows it; otherwise the last segment is read to find it.

    Returns:
        The newest valid checkpoint (or None) and the invalid checkpoints newer than it.

    Raises:
        NotALogError: If ``directory`` is not a log.
        RecordsMissingError: If the oldest segment starts at seq N > 1 and no valid checkpoint is at
            seq >= N - 1, so replay cannot reach the log's records.
        LogDamageError: If ``last_seq`` is not given and the last segment is damaged.
    """
    check_log_directory(directory)
    if last_seq is None:
        last_seq = read_last_seq(directory)
    files, _, _ = _list(directory)
    invalid: list[InvalidCheckpoint] = []
    newest: Checkpoint | None = None
    for file in reversed(files):
        try:
            newest = read_checkpoint(file.path, last_seq=last_seq)
        except CheckpointError as error:
            invalid.append(InvalidCheckpoint(path=error.path, reason=error.reason))
            continue
        break
    segments = list_segment_files(directory)
    if segments and segments[0].first_seq > 1 and (newest is None or newest.seq < segments[0].first_seq - 1):
        raise RecordsMissingError(
            directory,
            first_seq=segments[0].first_seq,
            newest_checkpoint_seq=None if newest is None else newest.seq,
        )
    return NewestCheckpoint(checkpoint=newest, invalid=tuple(invalid))


def scan_checkpoints(directory: Path, *, last_seq: int) -> CheckpointScan:
    """Read and validate every checkpoint file.

    Args:
        directory: The log directory.
        last_seq: The log's last seq; checkpoints beyond it are invalid.

    Returns:
        The valid and invalid checkpoints, temporary files and set-aside checkpoints.
    """
    files, temporary, set_aside = _list(directory)
    valid: list[CheckpointFile] = []
    invalid: list[InvalidCheckpoint] = []
    for file in files:
        try:
            read_checkpoint(file.path, last_seq=last_seq)
        except CheckpointError as error:
            invalid.append(InvalidCheckpoint(path=error.path, reason=error.reason))
        else:
            valid.append(file)
    return CheckpointScan(
        valid=tuple(valid), invalid=tuple(invalid), temporary=tuple(temporary), set_aside=tuple(set_aside)
    )


def write_checkpoint_file(directory: Path, *, seq: int, payload: bytes) -> CheckpointFile:
    """Write a checkpoint durably: temp file in ``checkpoints/``, fsync, rename, fsync the directory.

    The records up to ``seq`` must already be durable, or the checkpoint could outlive them.

    Args:
        directory: The log directory.
        seq: The seq of the last record the checkpoint includes.
        payload: The opaque payload.

    Returns:
        The written file.

    Raises:
        LogWriteError: If writing, syncing or renaming failed.
    """
    path = checkpoint_path(directory, seq)
    with translate_os_errors(path, operation="checkpoint write"):
        write_file_durably(path, encode_checkpoint(seq=seq, payload=payload))
    return CheckpointFile(seq=seq, path=path)
