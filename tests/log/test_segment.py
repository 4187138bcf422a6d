"""Tests for scanning one segment and classifying damage as a torn tail or corruption."""

from __future__ import annotations

from pathlib import Path

from aether.log.frame import encode_frame, encode_segment_header, frame_checksum
from aether.log.layout import SegmentFile, segment_path
from aether.log.segment import DamageKind, LogRecord, SegmentDamage, scan_segment

from .helpers import build_log, flip_byte, frame_offsets, payload


def _segment(path: Path) -> SegmentFile:
    return SegmentFile(first_seq=int(path.name.split(".")[0]), path=path)


def _scan(path: Path, *, last: bool = True, oldest: bool = True, resync: bool = False) -> list[object]:
    return list(scan_segment(_segment(path), last=last, oldest=oldest, resync=resync))


def test_scan_yields_every_record_with_its_place(tmp_path: Path) -> None:
    """Each record comes with its seq, payload, file and frame offset."""
    [path] = build_log(tmp_path, [3], first_seq=5)
    offsets = frame_offsets(path)
    assert _scan(path) == [
        LogRecord(seq=seq, payload=payload(seq), segment=path, offset=offsets[index])
        for index, seq in enumerate(range(5, 8))
    ]


def test_header_only_segment_is_empty(tmp_path: Path) -> None:
    """A segment holding just its header has no records and no damage."""
    [path] = build_log(tmp_path, [0])
    assert _scan(path) == []


def test_truncated_last_frame_is_a_torn_tail(tmp_path: Path) -> None:
    """A last frame cut short in the last segment is a torn tail at the frame's offset."""
    [path] = build_log(tmp_path, [3])
    offsets = frame_offsets(path)
    path.write_bytes(path.read_bytes()[: offsets[2] + 20])
    *records, damage = _scan(path)
    assert [record.seq for record in records if isinstance(record, LogRecord)] == [1, 2]
    assert damage == SegmentDamage(
        kind=DamageKind.TORN_TAIL,
        segment=path,
        offset=offsets[2],
        reason=f"payload length {len(payload(3))} runs past the end of the file (4 bytes follow the header)",
        file_size=offsets[2] + 20,
    )


def test_zero_filled_tail_is_torn(tmp_path: Path) -> None:
    """Zeros after the last good frame (a crash after the size grew) are a torn tail."""
    [path] = build_log(tmp_path, [2])
    size = path.stat().st_size
    path.write_bytes(path.read_bytes() + bytes(4096))
    *_, damage = _scan(path)
    assert damage == SegmentDamage(
        kind=DamageKind.TORN_TAIL,
        segment=path,
        offset=size,
        reason="zero-filled tail (4096 bytes)",
        file_size=size + 4096,
    )


def test_same_damage_in_a_segment_that_is_not_last_is_corruption(tmp_path: Path) -> None:
    """A bad frame in a segment other than the last one is corruption, even at its end."""
    [path] = build_log(tmp_path, [2])
    size = path.stat().st_size
    path.write_bytes(path.read_bytes()[:-1])
    *_, damage = _scan(path, last=False)
    assert isinstance(damage, SegmentDamage)
    assert (damage.kind, damage.offset, damage.resume_offset) == (
        DamageKind.CORRUPT_RECORD,
        frame_offsets(path)[1],
        None,
    )
    assert size - 1 == damage.file_size


def test_crc_flip_before_valid_frames_is_corruption_that_resumes(tmp_path: Path) -> None:
    """A damaged frame followed by a valid one is corruption; resync continues at the valid one."""
    [path] = build_log(tmp_path, [4])
    offsets = frame_offsets(path)
    flip_byte(path, offsets[1] + 16)
    items = _scan(path, resync=True)
    damaged = encode_frame(seq=2, payload=payload(2))
    stored = int.from_bytes(damaged[4:8], "little")
    computed = frame_checksum(seq=2, payload=bytes([damaged[16] ^ 0xFF]) + damaged[17:])
    assert items == [
        LogRecord(seq=1, payload=payload(1), segment=path, offset=offsets[0]),
        SegmentDamage(
            kind=DamageKind.CORRUPT_RECORD,
            segment=path,
            offset=offsets[1],
            reason=f"crc32c mismatch (stored 0x{stored:08x}, computed 0x{computed:08x})",
            file_size=offsets[4],
            resume_offset=offsets[2],
            resume_seq=3,
        ),
        LogRecord(seq=3, payload=payload(3), segment=path, offset=offsets[2]),
        LogRecord(seq=4, payload=payload(4), segment=path, offset=offsets[3]),
    ]
    assert _scan(path)[-1] == items[1]


def test_valid_frame_that_skips_seqs_is_corruption(tmp_path: Path) -> None:
    """A whole, checksummed last frame with a seq gap means records are missing: corruption."""
    [path] = build_log(tmp_path, [2])
    path.write_bytes(path.read_bytes() + encode_frame(seq=5, payload=b"late"))
    *_, damage = _scan(path)
    assert isinstance(damage, SegmentDamage)
    assert (damage.kind, damage.reason) == (
        DamageKind.CORRUPT_RECORD,
        "sequence number 5 where 3 was expected",
    )


def test_repeated_last_frame_is_a_torn_tail(tmp_path: Path) -> None:
    """A duplicate of an earlier frame at the end carries nothing new, so it is cut as a torn tail."""
    [path] = build_log(tmp_path, [2])
    path.write_bytes(path.read_bytes() + encode_frame(seq=2, payload=payload(2)))
    *_, damage = _scan(path)
    assert isinstance(damage, SegmentDamage)
    assert (damage.kind, damage.reason) == (DamageKind.TORN_TAIL, "sequence number 2 where 3 was expected")


def test_oversized_length_is_reported(tmp_path: Path) -> None:
    """A length above MAX_PAYLOAD is reported as such."""
    [path] = build_log(tmp_path, [0])
    path.write_bytes(path.read_bytes() + (2**31).to_bytes(4, "little") + bytes(12))
    assert _scan(path, last=False) == [
        SegmentDamage(
            kind=DamageKind.CORRUPT_RECORD,
            segment=path,
            offset=16,
            reason="payload length 2147483648 exceeds the maximum 67108864",
            file_size=32,
        )
    ]


def test_incomplete_frame_header_is_reported(tmp_path: Path) -> None:
    """Fewer than 16 bytes after the last frame are an incomplete frame header."""
    [path] = build_log(tmp_path, [0])
    path.write_bytes(path.read_bytes() + b"\x01\x02\x03")
    assert _scan(path) == [
        SegmentDamage(
            kind=DamageKind.TORN_TAIL,
            segment=path,
            offset=16,
            reason="incomplete frame header (3 of 16 bytes)",
            file_size=19,
        )
    ]


def test_incomplete_segment_header_in_the_last_segment_is_torn(tmp_path: Path) -> None:
    """A crash during rollover leaves a last segment shorter than its header: a torn tail at offset 0."""
    path = segment_path(tmp_path, 9)
    path.parent.mkdir()
    path.write_bytes(b"AETHS")
    assert _scan(path, oldest=False) == [
        SegmentDamage(
            kind=DamageKind.TORN_TAIL,
            segment=path,
            offset=0,
            reason="incomplete segment header (5 of 16 bytes)",
            file_size=5,
        )
    ]


def test_incomplete_header_of_an_only_segment_after_seq_one_is_corruption(tmp_path: Path) -> None:
    """Cutting the only segment would lose where the seqs are, unless it starts at seq 1."""
    path = segment_path(tmp_path, 9)
    path.parent.mkdir()
    path.write_bytes(b"")
    [damage] = _scan(path, oldest=True)
    assert isinstance(damage, SegmentDamage)
    assert damage.kind is DamageKind.CORRUPT_RECORD
    first = segment_path(tmp_path, 1)
    first.write_bytes(b"")
    [damage] = _scan(first, oldest=True)
    assert isinstance(damage, SegmentDamage)
    assert damage.kind is DamageKind.TORN_TAIL


def test_zero_filled_header_of_the_last_segment_is_torn(tmp_path: Path) -> None:
    """A last segment that is all zeros (header included) is a torn tail at offset 0."""
    path = segment_path(tmp_path, 1)
    path.parent.mkdir()
    path.write_bytes(bytes(40))
    assert _scan(path) == [
        SegmentDamage(
            kind=DamageKind.TORN_TAIL,
            segment=path,
            offset=0,
            reason="zero-filled segment header",
            file_size=40,
        )
    ]


def test_foreign_magic_is_bad_magic(tmp_path: Path) -> None:
    """Any other magic is bad magic at offset 0, wherever the segment is."""
    [path] = build_log(tmp_path, [1])
    path.write_bytes(b"NOTASEG!" + path.read_bytes()[8:])
    assert _scan(path) == [
        SegmentDamage(
            kind=DamageKind.BAD_MAGIC,
            segment=path,
            offset=0,
            reason="bad magic b'NOTASEG!' (expected b'AETHSEG1')",
            file_size=path.stat().st_size,
            found_magic=b"NOTASEG!",
        )
    ]


def test_zero_filled_header_before_valid_frames_is_bad_magic(tmp_path: Path) -> None:
    """Zeros in place of a header are not a torn tail when valid frames follow."""
    [path] = build_log(tmp_path, [1])
    path.write_bytes(bytes(16) + path.read_bytes()[16:])
    [damage] = _scan(path)
    assert isinstance(damage, SegmentDamage)
    assert (damage.kind, damage.found_magic) == (DamageKind.BAD_MAGIC, bytes(8))


def test_header_seq_disagreeing_with_the_file_name_is_corruption(tmp_path: Path) -> None:
    """The header's first seq must equal the one in the file name."""
    [path] = build_log(tmp_path, [1])
    path.write_bytes(encode_segment_header(2) + path.read_bytes()[16:])
    assert _scan(path) == [
        SegmentDamage(
            kind=DamageKind.CORRUPT_RECORD,
            segment=path,
            offset=8,
            reason="segment header says first seq 2 but the file name says 1",
            file_size=path.stat().st_size,
        )
    ]
