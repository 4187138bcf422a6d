"""Crash recovery: check the whole log, cut a torn tail and set invalid checkpoints aside.

Recovery first reads everything and changes nothing; only when the log is sound apart from a torn tail
does it cut. Everything here is blocking; the writer runs it in a thread.
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs

from aether.log.checkpoint import SET_ASIDE_SUFFIX, CheckpointScan, InvalidCheckpoint, scan_checkpoints
from aether.log.errors import RecordsMissingError, SequenceGapError
from aether.log.layout import (
    SegmentFile,
    check_log_directory,
    checkpoints_directory,
    fsync_directory,
    list_segment_files,
    translate_os_errors,
)
from aether.log.segment import DamageKind, LogRecord, scan_segment

__all__ = ["LogAnalysis", "RecoveryReport", "TailCut", "analyze_log", "recover_log"]


@attrs.frozen(kw_only=True)
class TailCut:
    """A torn tail that recovery cut off the last segment."""

    segment: Path
    """The segment file."""
    offset: int
    """Where the cut starts: the new size of the file (0 when the whole file was deleted)."""
    bytes_cut: int
    """How many bytes were removed."""
    reason: str
    """What was wrong with the first bad frame."""
    segment_deleted: bool
    """True when the segment's header itself was torn and the file was deleted."""


@attrs.frozen(kw_only=True)
class RecoveryReport:
    """What recovery found and did."""

    directory: Path
    """The log directory."""
    last_seq: int
    """The seq of the last record after recovery (0 for a log without records)."""
    first_seq: int
    """The seq of the oldest record still in the log (``last_seq + 1`` when it holds none)."""
    segments: int
    """How many segment files the log has after recovery."""
    records: int
    """How many records the segments hold."""
    cut: TailCut | None
    """The torn tail that was cut, or None when the log ended cleanly."""
    invalid_checkpoints: tuple[InvalidCheckpoint, ...]
    """Checkpoints found invalid, each renamed to ``<name>.invalid`` so none can later pass for valid."""
    newest_checkpoint_seq: int | None
    """The seq of the newest valid checkpoint, or None when there is none."""
    removed_temporary_files: tuple[Path, ...]
    """Temporary files left by interrupted writes, now removed."""
    created: bool = False
    """True when the log was created by this open."""


@attrs.frozen(kw_only=True)
class LogAnalysis:
    """The read-only part of recovery: what it would cut and set aside."""

    segments: tuple[SegmentFile, ...]
    """The segments that remain after the cut, oldest first."""
    records: int
    """How many good records the remaining segments hold."""
    last_seq: int
    """The seq of the last good record."""
    cut: TailCut | None
    """The torn tail to cut, if any."""
    checkpoints: CheckpointScan
    """The checkpoints, validated against ``last_seq``."""


def analyze_log(directory: Path) -> LogAnalysis:
    """Check every frame of every segment and every checkpoint, changing nothing.

    Args:
        directory: The log directory.

    Returns:
        What recovery would do.

    Raises:
        NotALogError: If ``directory`` is not a log.
        CorruptRecordError: At damage a crash cannot explain.
        BadMagicError: At a segment that does not start with the segment magic.
        SequenceGapError: At a segment that does not continue the previous one.
        RecordsMissingError: If the oldest segment starts at seq N > 1 and no valid checkpoint is
            at seq >= N - 1.
    """
    check_log_directory(directory)
    segments = list_segment_files(directory)
    records = 0
    cut: TailCut | None = None
    # last_seqs[i] is the seq of segment i's last good record (its first seq - 1 when it has none).
    last_seqs: list[int] = []
    for index, segment in enumerate(segments):
        if last_seqs and segment.first_seq != last_seqs[-1] + 1:
            raise SequenceGapError(
                segment.path,
                previous=segments[index - 1].path,
                expected=last_seqs[-1] + 1,
                found=segment.first_seq,
            )
        segment_last_seq = segment.first_seq - 1
        for item in scan_segment(segment, last=index == len(segments) - 1, oldest=index == 0):
            if isinstance(item, LogRecord):
                records += 1
                segment_last_seq = item.seq
            elif item.kind is DamageKind.TORN_TAIL:
                cut = TailCut(
                    segment=item.segment,
                    offset=item.offset,
                    bytes_cut=item.file_size - item.offset,
                    reason=item.reason,
                    segment_deleted=item.offset == 0,
                )
            else:
                raise item.to_error()
        last_seqs.append(segment_last_seq)
    if cut is not None and cut.segment_deleted:
        segments, last_seqs = segments[:-1], last_seqs[:-1]
    last_seq = last_seqs[-1] if last_seqs else 0
    checkpoints = scan_checkpoints(directory, last_seq=last_seq)
    if segments and segments[0].first_seq > 1:
        newest = checkpoints.valid[-1].seq if checkpoints.valid else None
        if newest is None or newest < segments[0].first_seq - 1:
            raise RecordsMissingError(
                directory, first_seq=segments[0].first_seq, newest_checkpoint_seq=newest
            )
    return LogAnalysis(
        segments=segments, records=records, last_seq=last_seq, cut=cut, checkpoints=checkpoints
    )


def recover_log(directory: Path) -> RecoveryReport:
    """Recover a log after a crash: cut a torn tail, set invalid checkpoints aside, remove temporary files.

    Nothing is modified unless the whole log checks out apart from a torn tail.
    Invalid checkpoints are renamed to ``<name>.invalid`` rather than left in place, because a checkpoint
    beyond the last seq would look valid again once new records reach its seq.

    Args:
        directory: The log directory.

    Returns:
        What was found and done.

    Raises:
        NotALogError: If ``directory`` is not a log.
        LogDamageError: If the log is damaged in a way a crash cannot explain; nothing was modified.
        LogWriteError: If cutting, renaming or removing a file failed.
    """
    return _apply(directory, analyze_log(directory))


def recover(directory: Path, *, created: bool) -> RecoveryReport:
    """Recover a log, noting whether it was just created (the writer's entry point)."""
    return attrs.evolve(recover_log(directory), created=created)


def _apply(directory: Path, analysis: LogAnalysis) -> RecoveryReport:
    cut = analysis.cut
    if cut is not None:
        with translate_os_errors(cut.segment, operation="torn tail cut"):
            if cut.segment_deleted:
                os.unlink(cut.segment)
                fsync_directory(cut.segment.parent)
            else:
                descriptor = os.open(cut.segment, os.O_WRONLY | os.O_CLOEXEC)
                try:
                    os.ftruncate(descriptor, cut.offset)
                    os.fsync(descriptor)
                finally:
                    os.close(descriptor)
    checkpoints = analysis.checkpoints
    for invalid in checkpoints.invalid:
        with translate_os_errors(invalid.path, operation="rename aside"):
            os.replace(invalid.path, invalid.path.with_name(invalid.path.name + SET_ASIDE_SUFFIX))
    for temporary in checkpoints.temporary:
        with translate_os_errors(temporary, operation="unlink"):
            os.unlink(temporary)
    if checkpoints.invalid or checkpoints.temporary:
        with translate_os_errors(checkpoints_directory(directory), operation="fsync"):
            fsync_directory(checkpoints_directory(directory))
    segments = analysis.segments
    return RecoveryReport(
        directory=directory,
        last_seq=analysis.last_seq,
        first_seq=segments[0].first_seq if segments else analysis.last_seq + 1,
        segments=len(segments),
        records=analysis.records,
        cut=cut,
        invalid_checkpoints=checkpoints.invalid,
        newest_checkpoint_seq=checkpoints.valid[-1].seq if checkpoints.valid else None,
        removed_temporary_files=checkpoints.temporary,
    )
