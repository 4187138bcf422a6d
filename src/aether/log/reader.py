"""Reading records across segments in seq order, and finding the log's last seq.

Everything here is blocking and read-only; it works on a log that a writer has open.
"""

from __future__ import annotations

import bisect
from collections.abc import Generator, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

from aether.log.errors import LogRangeError, SequenceGapError
from aether.log.layout import SegmentFile, check_log_directory, list_segment_files
from aether.log.segment import DamageKind, LogRecord, RecordBatch, SegmentDamage, scan_segment

__all__ = ["read_last_seq", "scan_log", "scan_log_batches", "tail_mark"]


def scan_log(directory: Path, *, from_seq: int = 1, to_seq: int | None = None) -> Iterator[LogRecord]:
    """Read the log's records in seq order.

    Checks every frame it reads (and, from the segment holding ``from_seq`` on,
    that each segment continues the previous one's seqs).
    To read a log a writer has open, pass the writer's ``last_seq`` as ``to_seq``:
    scanning then stops before any batch still being written.

    Args:
        directory: The log directory.
        from_seq: The first seq to yield.
        to_seq: The last seq to yield; None reads to the end of the log.

    Returns:
        An iterator over the records with ``from_seq <= seq <= to_seq``.

    Raises:
        NotALogError: At once, if ``directory`` is not a log.
        LogRangeError: At once, if retention already deleted ``from_seq``.
        CorruptRecordError: While iterating, at damage a crash cannot explain.
        BadMagicError: While iterating, at a segment that does not start with the segment magic.
        SequenceGapError: While iterating, at a segment that does not continue the previous one.
        TornTailError: While iterating, at a torn tail that recovery has not cut yet,
            after every good record before it.
    """
    return cast(Iterator[LogRecord], _scan_from(directory, from_seq=from_seq, to_seq=to_seq, batch=0))


def scan_log_batches(
    directory: Path, *, from_seq: int = 1, to_seq: int | None = None, size: int = 1024
) -> Iterator[RecordBatch]:
    """Read the log's records as `scan_log` does, in batches of up to `size` consecutive records of one segment (a
    batch ends at a segment's end, before damage, and at `to_seq`): what replay decodes at once.

    Raises:
        As `scan_log`.
    """
    return cast(Iterator[RecordBatch], _scan_from(directory, from_seq=from_seq, to_seq=to_seq, batch=size))


def _scan_from(directory: Path, *, from_seq: int, to_seq: int | None, batch: int) -> Iterator[Any]:
    check_log_directory(directory)
    segments = list_segment_files(directory)
    if segments and from_seq < segments[0].first_seq and segments[0].first_seq > 1:
        raise LogRangeError(directory, seq=from_seq, first_seq=segments[0].first_seq)
    # The segment holding from_seq is the last one whose first seq is not above it.
    start = max(0, bisect.bisect_right([segment.first_seq for segment in segments], from_seq) - 1)
    return _scan(segments, start=start, from_seq=from_seq, to_seq=to_seq, batch=batch)


def _scan(
    segments: Sequence[SegmentFile], *, start: int, from_seq: int, to_seq: int | None, batch: int
) -> Iterator[LogRecord | RecordBatch]:
    if to_seq is not None and to_seq < from_seq:
        return
    previous: SegmentFile | None = None
    previous_last_seq = 0
    for index in range(start, len(segments)):
        segment = segments[index]
        if previous is not None and segment.first_seq != previous_last_seq + 1:
            raise SequenceGapError(
                segment.path, previous=previous.path, expected=previous_last_seq + 1, found=segment.first_seq
            )
        # The records come straight through (`yield from`): replay reads millions, and re-yielding each one
        # from here cost a generator step per record.
        records = scan_segment(
            segment,
            last=index == len(segments) - 1,
            oldest=index == 0,
            from_seq=from_seq,
            to_seq=to_seq,
            raise_damage=True,  # so it yields records (or batches) only
            batch=batch,
        )
        segment_last_seq = yield from cast(Generator[LogRecord | RecordBatch, None, int], records)
        if segment_last_seq == to_seq:
            return
        previous, previous_last_seq = segment, segment_last_seq


def tail_mark(directory: Path) -> tuple[str, int] | None:
    """Return a cheap mark of the log's tail (the newest segment's name and size; None without segments): it changes
    whenever records are appended or a segment rolls over, so a reader following a log can skip a re-read.

    Raises:
        OSError: The segments cannot be listed or the newest one cannot be stat'ed.
    """
    segments = list_segment_files(directory)
    if not segments:
        return None
    return segments[-1].path.name, segments[-1].path.stat().st_size


def read_last_seq(directory: Path) -> int:
    """Return the seq of the log's last good record, without modifying anything.

    Only the last segment is read (and the one before it if the last one's header is torn).
    A torn tail is tolerated: the last record before it counts.

    Args:
        directory: The log directory.

    Returns:
        The last seq, or 0 for a log without records.

    Raises:
        NotALogError: If ``directory`` is not a log.
        LogDamageError: If the segments read are damaged in a way a crash cannot explain.
    """
    check_log_directory(directory)
    segments = list_segment_files(directory)
    for index in reversed(range(len(segments))):
        segment = segments[index]
        last_seq = segment.first_seq - 1
        header_torn = False
        # In batches: only the seqs are needed, and a batch costs no object per record.
        for item in scan_segment(segment, last=index == len(segments) - 1, oldest=index == 0, batch=4096):
            if not isinstance(item, SegmentDamage):
                last_seq = (
                    item.first_seq + len(item.payloads) - 1 if isinstance(item, RecordBatch) else item.seq
                )
            elif item.kind is not DamageKind.TORN_TAIL:
                raise item.to_error()
            else:
                header_torn = item.offset == 0
        if not header_torn:
            return last_seq
    return 0
