"""Exceptions raised by the event log.

Every exception keeps structured fields and builds its message in ``__str__``.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "BadMagicError",
    "CheckpointError",
    "CheckpointSeqError",
    "CorruptRecordError",
    "LogBrokenError",
    "LogClosedError",
    "LogDamageError",
    "LogError",
    "LogLockedError",
    "LogRangeError",
    "LogWriteError",
    "NotALogError",
    "PayloadTooLargeError",
    "RecordsMissingError",
    "SequenceGapError",
    "TornTailError",
]


class LogError(Exception):
    """Root of every exception the event log raises.

    The tree::

        LogError
        ├── NotALogError            the directory is not an aether event log
        ├── LogLockedError          another process owns the log (holds its lock)
        ├── LogDamageError          the bytes on disk do not form a valid log
        │   ├── BadMagicError       a segment does not start with the segment magic
        │   ├── CorruptRecordError  a frame is damaged and valid data follows it
        │   ├── TornTailError       the last segment ends in an unrecovered torn write
        │   ├── SequenceGapError    two consecutive segments do not continue the seqs
        │   └── RecordsMissingError the oldest records are gone and no checkpoint covers them
        ├── CheckpointError         a checkpoint file is invalid
        ├── LogRangeError           (also LookupError) the records asked for were deleted
        ├── PayloadTooLargeError    (also ValueError) a payload exceeds MAX_PAYLOAD
        ├── CheckpointSeqError      (also ValueError) a checkpoint seq the log does not hold
        ├── LogWriteError           a write, fsync or rename failed (chained from the OSError)
        ├── LogBrokenError          appends refused since an earlier write failed ("it broke")
        └── LogClosedError          the log was closed by its owner ("we closed it")
    """


class NotALogError(LogError):
    """The directory is not an aether event log."""

    def __init__(self, directory: Path, *, found: str, log_nearby: Path | None = None) -> None:
        super().__init__(directory, found, log_nearby)
        self.directory = directory
        """The directory that was opened."""
        self.found = found
        """What was found instead of a log, in words."""
        self.log_nearby = log_nearby
        """A log one level off (a subdirectory, or the parent) that was probably meant; None when there is none."""

    def __str__(self) -> str:
        nearby = "" if self.log_nearby is None else f"; the log is at {self.log_nearby}"
        return f"{self.directory}: not an aether event log ({self.found}){nearby}"


class LogLockedError(LogError):
    """Another process owns the log: it holds the exclusive lock on the directory's `LOCK` file."""

    def __init__(self, directory: Path, *, owner_pid: int | None) -> None:
        super().__init__(directory, owner_pid)
        self.directory = directory
        """The log directory."""
        self.owner_pid = owner_pid
        """The owner's pid as its lock file names it; None if it has not written it yet."""

    def __str__(self) -> str:
        owner = "another process" if self.owner_pid is None else f"pid {self.owner_pid}"
        return (
            f"{self.directory}: the log is owned by {owner} (it holds the lock on {self.directory}/LOCK); "
            "stop it first, or start with --standby to take over when it exits"
        )


class LogDamageError(LogError):
    """The bytes on disk do not form a valid log."""


class BadMagicError(LogDamageError):
    """A segment file does not start with the segment magic."""

    def __init__(self, segment: Path, *, offset: int, found: bytes, expected: bytes) -> None:
        super().__init__(segment, offset, found, expected)
        self.segment = segment
        """The segment file."""
        self.offset = offset
        """Offset of the magic in the file (always 0)."""
        self.found = found
        """The bytes found where the magic belongs."""
        self.expected = expected
        """The magic that belongs there."""

    def __str__(self) -> str:
        return (
            f"{self.segment} at offset {self.offset}: bad magic {self.found!r} (expected {self.expected!r})"
        )


class CorruptRecordError(LogDamageError):
    """A frame (or segment header) is damaged in a way a crash cannot explain.

    Either the damage is in a segment other than the last one,
    or a valid frame follows the damage, so records after it were committed.
    """

    def __init__(self, segment: Path, *, offset: int, reason: str) -> None:
        super().__init__(segment, offset, reason)
        self.segment = segment
        """The segment file."""
        self.offset = offset
        """Offset of the damaged frame in the file."""
        self.reason = reason
        """What is wrong with the frame, with the values found."""

    def __str__(self) -> str:
        return f"{self.segment} at offset {self.offset}: {self.reason}"


class TornTailError(LogDamageError):
    """The last segment ends in a torn write that recovery has not cut yet.

    Raised by read-only scanning after it has yielded every good record.
    """

    def __init__(self, segment: Path, *, offset: int, reason: str) -> None:
        super().__init__(segment, offset, reason)
        self.segment = segment
        """The last segment file."""
        self.offset = offset
        """Offset where the torn tail starts."""
        self.reason = reason
        """What is wrong with the first bad frame."""

    def __str__(self) -> str:
        return f"{self.segment} at offset {self.offset}: torn tail ({self.reason})"


class SequenceGapError(LogDamageError):
    """A segment does not start right after the previous segment's last record."""

    def __init__(self, segment: Path, *, previous: Path, expected: int, found: int) -> None:
        super().__init__(segment, previous, expected, found)
        self.segment = segment
        """The later segment file."""
        self.previous = previous
        """The segment before it."""
        self.expected = expected
        """The first seq that would continue the previous segment."""
        self.found = found
        """The first seq the later segment actually starts at."""

    @property
    def reason(self) -> str:
        """The message without the file name in front."""
        kind = "gap" if self.found > self.expected else "overlap"
        return f"seq {kind} after {self.previous} (expected first seq {self.expected!r}, got {self.found!r})"

    def __str__(self) -> str:
        return f"{self.segment}: {self.reason}"


class RecordsMissingError(LogDamageError):
    """The oldest segment starts after seq 1 and no valid checkpoint covers the records before it."""

    def __init__(self, directory: Path, *, first_seq: int, newest_checkpoint_seq: int | None) -> None:
        super().__init__(directory, first_seq, newest_checkpoint_seq)
        self.directory = directory
        """The log directory."""
        self.first_seq = first_seq
        """The first seq of the oldest segment."""
        self.newest_checkpoint_seq = newest_checkpoint_seq
        """The newest valid checkpoint's seq, or None when there is none."""

    @property
    def reason(self) -> str:
        """The message without the directory in front."""
        return (
            f"records 1..{self.first_seq - 1} are missing:"
            f" the oldest segment starts at seq {self.first_seq!r}"
            f" and no valid checkpoint is at seq >= {self.first_seq - 1!r}"
            f" (newest valid checkpoint: {self.newest_checkpoint_seq!r})"
        )

    def __str__(self) -> str:
        return f"{self.directory}: {self.reason}"


class CheckpointError(LogError):
    """A checkpoint file is invalid."""

    def __init__(self, path: Path, *, reason: str) -> None:
        super().__init__(path, reason)
        self.path = path
        """The checkpoint file."""
        self.reason = reason
        """What is wrong with it, with the values found."""

    def __str__(self) -> str:
        return f"{self.path}: invalid checkpoint: {self.reason}"


class LogRangeError(LogError, LookupError):
    """The records asked for are no longer in the log (retention deleted them)."""

    def __init__(self, directory: Path, *, seq: int, first_seq: int) -> None:
        super().__init__(directory, seq, first_seq)
        self.directory = directory
        """The log directory."""
        self.seq = seq
        """The seq asked for."""
        self.first_seq = first_seq
        """The oldest seq still in the log."""

    def __str__(self) -> str:
        return (
            f"{self.directory}: seq {self.seq!r} is no longer in the log"
            f" (the oldest record is seq {self.first_seq!r})"
        )


class PayloadTooLargeError(LogError, ValueError):
    """A payload is larger than one frame may hold."""

    def __init__(self, size: int, *, maximum: int) -> None:
        super().__init__(size, maximum)
        self.size = size
        """The payload's size in bytes."""
        self.maximum = maximum
        """The largest payload a frame may hold."""

    def __str__(self) -> str:
        return f"payload: size must be at most {self.maximum!r} bytes (got {self.size!r})"


class CheckpointSeqError(LogError, ValueError):
    """A checkpoint was asked for at a seq the log does not hold."""

    def __init__(self, directory: Path, *, seq: int, last_seq: int) -> None:
        super().__init__(directory, seq, last_seq)
        self.directory = directory
        """The log directory."""
        self.seq = seq
        """The seq asked for."""
        self.last_seq = last_seq
        """The log's last durable seq."""

    def __str__(self) -> str:
        return f"{self.directory}: checkpoint seq must be 0..{self.last_seq!r} (got {self.seq!r})"


class LogWriteError(LogError):
    """Writing, syncing or renaming a log file failed; the ``OSError`` is the ``__cause__``."""

    def __init__(self, path: Path, *, operation: str, error: OSError) -> None:
        super().__init__(path, operation, error)
        self.path = path
        """The file or directory the operation was on."""
        self.operation = operation
        """What was being done, e.g. ``'write'`` or ``'fsync'``."""
        self.error = error
        """The OSError that made it fail."""

    def __str__(self) -> str:
        return f"{self.path}: {self.operation} failed: {self.error}"


class LogBrokenError(LogError):
    """The log refuses appends because an earlier write failed.

    The failed write's :class:`LogWriteError` is the ``__cause__``.
    After a failed write or fsync the state of the file is unknown, so nothing more is written;
    reopening the log runs recovery.
    """

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.directory = directory
        """The log directory."""

    def __str__(self) -> str:
        return f"{self.directory}: event log refuses appends after a failed write"


class LogClosedError(LogError):
    """The log was closed by its owner."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.directory = directory
        """The log directory."""

    def __str__(self) -> str:
        return f"{self.directory}: event log is closed"
