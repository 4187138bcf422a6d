"""Tests for reading records across segments and finding the last seq."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from aether.log import segment as segment_module
from aether.log.errors import (
    BadMagicError,
    CorruptRecordError,
    LogRangeError,
    NotALogError,
    SequenceGapError,
    TornTailError,
)
from aether.log.reader import read_last_seq, scan_log, scan_log_batches

from .helpers import build_log, flip_byte, frame_offsets, payload


def _seqs(directory: Path, **bounds: int) -> list[int]:
    return [record.seq for record in scan_log(directory, **bounds)]


def test_scan_log_reads_every_segment_in_order(tmp_path: Path) -> None:
    """Records come back in seq order across segments, with their payloads."""
    build_log(tmp_path, [3, 0, 2, 4])
    records = list(scan_log(tmp_path))
    assert [(record.seq, record.payload) for record in records] == [
        (seq, payload(seq)) for seq in range(1, 10)
    ]
    assert records[3].segment == tmp_path / "segments" / "00000000000000000004.seg"


def test_scan_log_from_and_to_a_seq(tmp_path: Path) -> None:
    """from_seq starts in the segment holding it; to_seq stops after that record."""
    build_log(tmp_path, [3, 3, 3])
    assert _seqs(tmp_path, from_seq=5) == [5, 6, 7, 8, 9]
    assert _seqs(tmp_path, from_seq=4, to_seq=6) == [4, 5, 6]
    assert _seqs(tmp_path, from_seq=10) == []
    assert _seqs(tmp_path, from_seq=6, to_seq=5) == []


def test_scan_log_stops_at_to_seq_before_a_torn_tail(tmp_path: Path) -> None:
    """Reading up to the writer's last seq never reaches bytes still being written."""
    [path] = build_log(tmp_path, [3])
    path.write_bytes(path.read_bytes() + b"\x05\x00")
    assert _seqs(tmp_path, to_seq=3) == [1, 2, 3]


def test_scan_log_raises_torn_tail_after_the_good_records(tmp_path: Path) -> None:
    """Without a bound, a torn tail is reported after every good record was yielded."""
    [path] = build_log(tmp_path, [3])
    offset = path.stat().st_size
    path.write_bytes(path.read_bytes() + b"\x05\x00")
    records = scan_log(tmp_path)
    assert [next(records).seq for _ in range(3)] == [1, 2, 3]
    message = re.escape(f"{path} at offset {offset}: torn tail (incomplete frame header (2 of 16 bytes))")
    with pytest.raises(TornTailError, match=rf"^{message}$"):
        next(records)


def test_scan_log_rejects_seqs_deleted_by_retention(tmp_path: Path) -> None:
    """Asking for seqs before the oldest segment is a range error, raised at once."""
    build_log(tmp_path, [3], first_seq=10)
    message = re.escape(f"{tmp_path}: seq 4 is no longer in the log (the oldest record is seq 10)")
    with pytest.raises(LogRangeError, match=rf"^{message}$"):
        scan_log(tmp_path, from_seq=4)
    assert _seqs(tmp_path, from_seq=10) == [10, 11, 12]


def test_scan_log_of_a_foreign_directory(tmp_path: Path) -> None:
    """Scanning a directory that is not a log fails at once."""
    with pytest.raises(NotALogError):
        scan_log(tmp_path)


def test_scan_log_reports_a_gap_between_segments_naming_both(tmp_path: Path) -> None:
    """A segment that does not start right after the previous one's last record is a seq gap."""
    [first] = build_log(tmp_path, [3])
    [later] = build_log(tmp_path / "other", [2], first_seq=5)
    moved = tmp_path / "segments" / later.name
    moved.write_bytes(later.read_bytes())
    gap = f"{moved}: seq gap after {first} (expected first seq 4, got 5)"
    with pytest.raises(SequenceGapError, match=rf"^{re.escape(gap)}$"):
        list(scan_log(tmp_path))


def test_scan_log_reports_an_overlap_between_segments(tmp_path: Path) -> None:
    """A segment starting before the previous one ended is a seq overlap."""
    build_log(tmp_path, [3])
    [later] = build_log(tmp_path / "other", [2], first_seq=3)
    moved = tmp_path / "segments" / later.name
    moved.write_bytes(later.read_bytes())
    first = tmp_path / "segments" / "00000000000000000001.seg"
    overlap = f"{moved}: seq overlap after {first} (expected first seq 4, got 3)"
    with pytest.raises(SequenceGapError, match=rf"^{re.escape(overlap)}$"):
        list(scan_log(tmp_path))


def test_length_past_eof_in_a_segment_that_is_not_last_is_corruption(tmp_path: Path) -> None:
    """A truncated frame in an older segment is corruption naming the file and offset."""
    first, _ = build_log(tmp_path, [3, 2])
    offsets = frame_offsets(first)
    first.write_bytes(first.read_bytes()[:-3])
    length = len(payload(3))
    reason = f"payload length {length} runs past the end of the file ({length - 3} bytes follow the header)"
    message = re.escape(f"{first} at offset {offsets[2]}: {reason}")
    with pytest.raises(CorruptRecordError, match=rf"^{message}$") as caught:
        list(scan_log(tmp_path))
    assert (caught.value.segment, caught.value.offset, caught.value.reason) == (first, offsets[2], reason)


def test_scan_log_reports_bad_magic(tmp_path: Path) -> None:
    """A segment with a foreign magic is named with offset 0."""
    [path] = build_log(tmp_path, [1])
    path.write_bytes(b"GARBAGE!" + path.read_bytes()[8:])
    message = re.escape(f"{path} at offset 0: bad magic b'GARBAGE!' (expected b'AETHSEG1')")
    with pytest.raises(BadMagicError, match=rf"^{message}$"):
        list(scan_log(tmp_path))


def test_read_last_seq(tmp_path: Path) -> None:
    """The last seq is the last good record's, torn tails tolerated, 0 for an empty log."""
    build_log(tmp_path / "empty", [])
    assert read_last_seq(tmp_path / "empty") == 0
    build_log(tmp_path / "header-only", [0], first_seq=8)
    assert read_last_seq(tmp_path / "header-only") == 7
    _, last = build_log(tmp_path / "torn", [2, 3])
    last.write_bytes(last.read_bytes()[:-1])
    assert read_last_seq(tmp_path / "torn") == 4
    _, last = build_log(tmp_path / "torn-header", [2, 3])
    last.write_bytes(b"AETH")
    assert read_last_seq(tmp_path / "torn-header") == 2


@pytest.mark.parametrize("size", [1, 2, 3, 100])
def test_scan_log_batches_holds_the_records_scan_log_reads(tmp_path: Path, size: int) -> None:
    """Batches of up to `size` records of one segment: expanded, the very records (seqs, payloads, offsets)."""
    build_log(tmp_path, [5, 0, 2, 4])
    for bounds in (
        {},
        {"from_seq": 3},
        {"from_seq": 2, "to_seq": 7},
        {"to_seq": 6},
        {"to_seq": 1},
        {"from_seq": 7, "to_seq": 7},
        {"from_seq": 8, "to_seq": 5},
        {"from_seq": 11},
    ):
        batches = list(scan_log_batches(tmp_path, size=size, **bounds))
        assert all(1 <= len(batch.payloads) <= size for batch in batches)
        assert all(len({record.segment for record in batch.records()}) == 1 for batch in batches)
        assert [record for batch in batches for record in batch.records()] == list(
            scan_log(tmp_path, **bounds)
        )


def test_scan_log_batches_ends_a_batch_before_corruption_and_raises_it(tmp_path: Path) -> None:
    """The records before the damage come in batches; then the damage is raised, as `scan_log` does."""
    [path, _] = build_log(tmp_path, [5, 2])
    offsets = frame_offsets(path)
    flip_byte(path, offsets[3] + 20)  # inside the payload of record 4
    batches = scan_log_batches(tmp_path, size=2)
    assert [record.seq for record in next(batches).records()] == [1, 2]
    assert [record.seq for record in next(batches).records()] == [3]
    with pytest.raises(CorruptRecordError, match=f"at offset {offsets[3]}"):
        next(batches)


def test_scan_log_batches_reads_a_large_segment_the_careful_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A segment too large to read whole is read frame by frame: one record a batch, the same records."""
    build_log(tmp_path, [4, 3])
    monkeypatch.setattr(segment_module, "_WHOLE_READ_LIMIT", 0)
    batches = list(scan_log_batches(tmp_path, size=10, from_seq=2))
    assert [len(batch.payloads) for batch in batches] == [1] * 6
    assert [record for batch in batches for record in batch.records()] == list(scan_log(tmp_path, from_seq=2))
