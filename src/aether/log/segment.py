"""Scanning one segment file frame by frame, and telling a torn tail from corruption.

Scanning is blocking file I/O; async callers run it in a thread.
"""

from __future__ import annotations

import enum
import functools
import os
from collections.abc import Generator
from pathlib import Path
from typing import BinaryIO, Literal, NamedTuple, overload

import attrs
import crc32c

from aether.log.errors import BadMagicError, CorruptRecordError, LogDamageError, TornTailError
from aether.log.frame import (
    FRAME_HEADER_SIZE,
    MAX_PAYLOAD,
    SEGMENT_HEADER_SIZE,
    SEGMENT_MAGIC,
    FrameHeader,
    SegmentHeader,
    find_valid_frame,
    frame_problem,
)
from aether.log.frame import (
    unpack_frame_header_from as _unpack_frame_header_from,
)
from aether.log.layout import SegmentFile

_crc32c = crc32c.crc32c

__all__ = ["DamageKind", "LogRecord", "RecordBatch", "SegmentDamage", "scan_segment"]

# Segments are read sequentially; a large buffer keeps the number of read syscalls low.
_READ_BUFFER_SIZE = 1 * 2**20

# A segment up to this size is read in one go and its sound frames are checked in memory (the fast path).
_WHOLE_READ_LIMIT = 256 * 2**20


class LogRecord(NamedTuple):
    """One record read from the log.

    A named tuple rather than an attrs class: replay reads millions, and a tuple is built in C.
    """

    seq: int
    """The record's sequence number (1, 2, 3, ... across the whole log)."""
    payload: bytes
    """The opaque payload that was appended."""
    segment: Path
    """The segment file holding the record."""
    offset: int
    """The offset of the record's frame in that file."""


@attrs.frozen(kw_only=True)
class RecordBatch:
    """Consecutive good records of one segment, read as one value (replay decodes runs of records at once)."""

    first_seq: int
    """The seq of the first record; the others follow it, one by one."""
    payloads: list[bytes]
    """The records' payloads, in seq order (never empty)."""
    segment: Path
    """The segment file holding them."""
    offset: int
    """The offset of the first record's frame in that file; each next frame follows the previous one."""

    @classmethod
    def of(cls, record: LogRecord) -> RecordBatch:
        """Return the batch holding `record` alone."""
        return cls(
            first_seq=record.seq, payloads=[record.payload], segment=record.segment, offset=record.offset
        )

    def records(self) -> list[LogRecord]:
        """Return the batch's records one by one (each with its seq and its frame's offset)."""
        records, offset = [], self.offset
        for seq, payload in enumerate(self.payloads, start=self.first_seq):
            records.append(LogRecord(seq=seq, payload=payload, segment=self.segment, offset=offset))
            offset += FRAME_HEADER_SIZE + len(payload)
        return records


def _flush_at(seq: int, step: int, from_seq: int, to_seq: int | None) -> int:
    """The seq after the batch (of `step` records) starting at `seq`: it ends early at `from_seq` (the records below
    it are not yielded) and after `to_seq`."""
    stop = from_seq if seq < from_seq else seq + step
    if to_seq is not None and seq <= to_seq < stop:
        stop = to_seq + 1
    return stop


_new_record = functools.partial(tuple.__new__, LogRecord)
"""`_new_record((seq, payload, segment, offset))`: a `LogRecord` without the keyword call (the hot path)."""


class DamageKind(enum.Enum):
    """How damage found in a segment is classified."""

    TORN_TAIL = "torn tail"
    """The last segment ends in a write a crash interrupted; nothing valid follows, so it can be cut."""
    CORRUPT_RECORD = "corrupt record"
    """A frame or header is damaged where a crash cannot explain it; nothing may be cut."""
    BAD_MAGIC = "bad magic"
    """The segment does not start with the segment magic."""


@attrs.frozen(kw_only=True)
class SegmentDamage:
    """The first damage found in a segment, classified."""

    kind: DamageKind
    """Torn tail, corrupt record or bad magic."""
    segment: Path
    """The segment file."""
    offset: int
    """Where the damage starts (0 for the header)."""
    reason: str
    """What is wrong, with the values found."""
    file_size: int
    """The segment's size; a torn tail cut removes ``file_size - offset`` bytes."""
    found_magic: bytes | None = None
    """For bad magic: the bytes found instead of the magic."""
    resume_offset: int | None = None
    """For corruption: the offset of the next valid frame after the damage, if there is one."""
    resume_seq: int | None = None
    """For corruption: the seq of the frame at ``resume_offset``."""

    def to_error(self) -> LogDamageError:
        """Return the exception that reports this damage."""
        match self.kind:
            case DamageKind.TORN_TAIL:
                return TornTailError(self.segment, offset=self.offset, reason=self.reason)
            case DamageKind.CORRUPT_RECORD:
                return CorruptRecordError(self.segment, offset=self.offset, reason=self.reason)
            case DamageKind.BAD_MAGIC:
                assert self.found_magic is not None, (
                    "bad magic damage always carries the magic; this is a bug"
                )
                return BadMagicError(
                    self.segment, offset=self.offset, found=self.found_magic, expected=SEGMENT_MAGIC
                )


@overload
def scan_segment(
    segment: SegmentFile,
    *,
    last: bool,
    oldest: bool,
    resync: bool = ...,
    from_seq: int = ...,
    to_seq: int | None = ...,
    raise_damage: bool = ...,
    batch: Literal[0] = ...,
) -> Generator[LogRecord | SegmentDamage, None, int]: ...


@overload
def scan_segment(
    segment: SegmentFile,
    *,
    last: bool,
    oldest: bool,
    resync: bool = ...,
    from_seq: int = ...,
    to_seq: int | None = ...,
    raise_damage: bool = ...,
    batch: int,
) -> Generator[LogRecord | RecordBatch | SegmentDamage, None, int]: ...


def scan_segment(
    segment: SegmentFile,
    *,
    last: bool,
    oldest: bool,
    resync: bool = False,
    from_seq: int = 0,
    to_seq: int | None = None,
    raise_damage: bool = False,
    batch: int = 0,
) -> Generator[LogRecord | RecordBatch | SegmentDamage, None, int]:
    """Read a segment's frames in order, checking each one.

    Damage in the last segment is a torn tail when no valid frame (complete, checksum ok,
    seq above the last good one) starts at or after the damaged offset; otherwise it is corruption.
    A frame that is itself valid but skips seqs therefore counts as corruption (records are missing).
    Damage in any other segment is corruption.
    A last segment whose header is incomplete or zero-filled is a torn tail (a crash during rollover)
    unless valid frames follow it, or it is also the oldest segment and does not start at seq 1:
    cutting that one would lose where the log's seqs are.

    Args:
        segment: The segment file.
        last: Whether this is the log's last segment.
        oldest: Whether this is the log's oldest segment.
        resync: After corruption, continue with the next valid frame instead of stopping.
        from_seq: Read records below it (they are checked) without yielding them.
        to_seq: Stop after the record with this seq.
        raise_damage: Raise the damage's error (`SegmentDamage.to_error`) instead of yielding it.
        batch: Yield the good records as `RecordBatch` values of up to this many consecutive records instead of one
            `LogRecord` each (0: records). A batch ends before damage, so each holds records only.

    Yields:
        Each good record (or batch of them), then at most one :class:`SegmentDamage` per damaged stretch.
        Scanning stops after a torn tail, bad magic, or corruption when ``resync`` is false.

    Returns:
        The seq of the last good record read (the segment's first seq minus one if none was).
    """
    with open(segment.path, "rb", buffering=_READ_BUFFER_SIZE) as file:
        file_size = os.fstat(file.fileno()).st_size
        header_bytes = file.read(SEGMENT_HEADER_SIZE)
        header_damage = _check_header(
            segment, header_bytes, file=file, file_size=file_size, last=last, oldest=oldest
        )
        if header_damage is not None:
            if raise_damage:
                raise header_damage.to_error()
            yield header_damage
            return segment.first_seq - 1
        expected_seq = segment.first_seq
        offset = SEGMENT_HEADER_SIZE
        path = segment.path
        if file_size <= _WHOLE_READ_LIMIT:
            # Fast path (replay reads millions of records): the whole segment in one read, each frame checked in
            # memory (crc32c over slices of a memoryview). At the first frame that is not sound (incomplete, too
            # long, out of seq, checksum mismatch) the careful path below takes over, reading the file from there.
            data = file.read()
            view = memoryview(data)
            end = len(data)
            position = 0
            # The checksum starts with the length field: its crc32c, per length (records have few distinct ones).
            length_checksums: dict[int, int] = {}
            checksum_of_length = length_checksums.get
            # Every sound frame's payload is appended; `flush_at` (the seq after the current batch, see
            # `_flush_at`) is the one check per frame of where the batch ends, records below `from_seq` and `to_seq`.
            step = batch or 1
            payloads: list[bytes] = []
            append = payloads.append
            batch_position = 0
            flush_at = _flush_at(expected_seq, step, from_seq, to_seq)
            while position + FRAME_HEADER_SIZE <= end:
                length, checksum, seq = _unpack_frame_header_from(data, position)
                payload_end = position + FRAME_HEADER_SIZE + length
                if length > MAX_PAYLOAD or seq != expected_seq or payload_end > end:
                    break
                length_checksum = checksum_of_length(length)
                if length_checksum is None:
                    length_checksum = length_checksums[length] = _crc32c(view[position : position + 4])
                # The checksum covers the length field, then the seq field and the payload (contiguous).
                if _crc32c(view[position + 8 : payload_end], length_checksum) != checksum:
                    break
                append(data[position + FRAME_HEADER_SIZE : payload_end])
                position = payload_end
                expected_seq += 1
                if expected_seq == flush_at:
                    if seq < from_seq:  # the batch holds only records below it: checked, not yielded
                        payloads.clear()
                    elif batch:
                        yield RecordBatch(
                            first_seq=expected_seq - len(payloads),
                            payloads=payloads,
                            segment=path,
                            offset=SEGMENT_HEADER_SIZE + batch_position,
                        )
                        payloads = []
                        append = payloads.append
                    else:
                        yield _new_record((seq, payloads.pop(), path, SEGMENT_HEADER_SIZE + batch_position))
                    if seq == to_seq:
                        return expected_seq - 1  # = seq
                    batch_position = position
                    # `_flush_at(expected_seq, ...)` inline (a call per record costs scan_log ~10%): here
                    # expected_seq >= from_seq.
                    flush_at = expected_seq + step
                    if to_seq is not None and expected_seq <= to_seq < flush_at:
                        flush_at = to_seq + 1
            view.release()
            if payloads and expected_seq - len(payloads) >= from_seq:  # (only in batches: a record is one)
                yield RecordBatch(
                    first_seq=expected_seq - len(payloads),
                    payloads=payloads,
                    segment=path,
                    offset=SEGMENT_HEADER_SIZE + batch_position,
                )
            offset = SEGMENT_HEADER_SIZE + position
            file.seek(offset)
        while True:
            header_data = file.read(FRAME_HEADER_SIZE)
            if not header_data:
                return expected_seq - 1
            problem, header, payload = _read_frame(file, header_data, expected_seq=expected_seq)
            if problem is None:
                assert header is not None, "a frame without a problem was read whole; this is a bug"
                if header.seq >= from_seq:
                    record = LogRecord(seq=header.seq, payload=payload, segment=segment.path, offset=offset)
                    yield RecordBatch.of(record) if batch else record
                if header.seq == to_seq:
                    return header.seq
                offset += FRAME_HEADER_SIZE + header.length
                expected_seq += 1
                continue
            damage = _classify(
                segment.path, file, offset=offset, reason=problem, after_seq=expected_seq - 1, last=last
            )
            if raise_damage:
                raise damage.to_error()
            yield damage
            if not resync or damage.resume_offset is None or damage.resume_seq is None:
                return expected_seq - 1
            offset = damage.resume_offset
            expected_seq = damage.resume_seq
            file.seek(offset)


def _check_header(
    segment: SegmentFile, header_bytes: bytes, *, file: BinaryIO, file_size: int, last: bool, oldest: bool
) -> SegmentDamage | None:
    # A header is written (and fsynced) only when the log is created or at a rollover,
    # so a crash can tear the header of a last segment that starts at seq 1 or follows another segment.
    cuttable = last and (segment.first_seq == 1 or not oldest)
    if len(header_bytes) < SEGMENT_HEADER_SIZE:
        reason = f"incomplete segment header ({len(header_bytes)!r} of {SEGMENT_HEADER_SIZE!r} bytes)"
        kind = DamageKind.TORN_TAIL if cuttable else DamageKind.CORRUPT_RECORD
        return SegmentDamage(kind=kind, segment=segment.path, offset=0, reason=reason, file_size=file_size)
    header = SegmentHeader.from_bytes(header_bytes)
    if header.magic != SEGMENT_MAGIC:
        if cuttable and header_bytes == bytes(SEGMENT_HEADER_SIZE):
            damage = _classify(
                segment.path,
                file,
                offset=0,
                reason="zero-filled segment header",
                after_seq=segment.first_seq - 1,
                last=True,
            )
            if damage.kind is DamageKind.TORN_TAIL:
                return damage
        return SegmentDamage(
            kind=DamageKind.BAD_MAGIC,
            segment=segment.path,
            offset=0,
            reason=f"bad magic {header.magic!r} (expected {SEGMENT_MAGIC!r})",
            file_size=file_size,
            found_magic=header.magic,
        )
    if header.first_seq != segment.first_seq:
        reason = (
            f"segment header says first seq {header.first_seq!r} but the file name says {segment.first_seq!r}"
        )
        # The seq field sits right after the 8-byte magic.
        offset = len(SEGMENT_MAGIC)
        return SegmentDamage(
            kind=DamageKind.CORRUPT_RECORD,
            segment=segment.path,
            offset=offset,
            reason=reason,
            file_size=file_size,
        )
    return None


def _read_frame(
    file: BinaryIO, header_data: bytes, *, expected_seq: int
) -> tuple[str | None, FrameHeader | None, bytes]:
    if len(header_data) < FRAME_HEADER_SIZE:
        return f"incomplete frame header ({len(header_data)!r} of {FRAME_HEADER_SIZE!r} bytes)", None, b""
    header = FrameHeader.from_bytes(header_data)
    if header.length > MAX_PAYLOAD:
        return f"payload length {header.length!r} exceeds the maximum {MAX_PAYLOAD!r}", header, b""
    payload = file.read(header.length)
    if len(payload) < header.length:
        reason = (
            f"payload length {header.length!r} runs past the end of the file"
            f" ({len(payload)!r} bytes follow the header)"
        )
        return reason, header, b""
    return frame_problem(header, payload, expected_seq=expected_seq), header, payload


def _classify(
    path: Path, file: BinaryIO, *, offset: int, reason: str, after_seq: int, last: bool
) -> SegmentDamage:
    # Error path only: read everything from the damage to the end of the file and search it.
    file.seek(offset)
    rest = file.read()
    file_size = offset + len(rest)
    start = SEGMENT_HEADER_SIZE if offset == 0 else 0
    found = find_valid_frame(rest, start=start, after_seq=after_seq)
    if found is not None:
        header = FrameHeader.from_bytes(rest, offset=found)
        return SegmentDamage(
            kind=DamageKind.CORRUPT_RECORD,
            segment=path,
            offset=offset,
            reason=reason,
            file_size=file_size,
            resume_offset=offset + found,
            resume_seq=header.seq,
        )
    if last and offset > 0 and rest.count(0) == len(rest):
        reason = f"zero-filled tail ({len(rest)!r} bytes)"
    kind = DamageKind.TORN_TAIL if last else DamageKind.CORRUPT_RECORD
    return SegmentDamage(kind=kind, segment=path, offset=offset, reason=reason, file_size=file_size)
