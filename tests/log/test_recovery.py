"""Tests for crash recovery: cutting torn tails, refusing corruption, setting invalid checkpoints aside."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from aether.log.checkpoint import InvalidCheckpoint
from aether.log.errors import (
    CorruptRecordError,
    NotALogError,
    RecordsMissingError,
    SequenceGapError,
)
from aether.log.reader import scan_log
from aether.log.recovery import RecoveryReport, TailCut, recover_log

from .helpers import build_log, flip_byte, frame_offsets, payload, snapshot, write_checkpoint


def _seqs(directory: Path) -> list[int]:
    return [record.seq for record in scan_log(directory)]


def test_clean_log_recovers_to_itself(tmp_path: Path) -> None:
    """A log that ended cleanly is reported and left exactly as it was."""
    build_log(tmp_path, [3, 4])
    write_checkpoint(tmp_path, 5)
    before = snapshot(tmp_path)
    assert recover_log(tmp_path) == RecoveryReport(
        directory=tmp_path,
        last_seq=7,
        first_seq=1,
        segments=2,
        records=7,
        cut=None,
        invalid_checkpoints=(),
        newest_checkpoint_seq=5,
        removed_temporary_files=(),
    )
    assert snapshot(tmp_path) == before


def test_torn_tail_at_every_byte_of_the_last_record_recovers_the_previous_records(tmp_path: Path) -> None:
    """Whatever prefix of the last frame survived a crash, recovery cuts exactly that prefix."""
    source = build_log(tmp_path / "source", [2, 4])[-1]
    offsets = frame_offsets(source)
    whole = source.read_bytes()
    last_frame_size = offsets[-1] - offsets[-2]
    length = len(payload(6))
    for kept in range(1, last_frame_size):
        directory = tmp_path / f"kept-{kept}"
        _, last = build_log(directory, [2, 4])
        last.write_bytes(whole[: offsets[-2] + kept])
        reason = (
            f"incomplete frame header ({kept} of 16 bytes)"
            if kept < 16
            else f"payload length {length} runs past the end of the file"
            f" ({kept - 16} bytes follow the header)"
        )
        report = recover_log(directory)
        assert report.cut == TailCut(
            segment=last, offset=offsets[-2], bytes_cut=kept, reason=reason, segment_deleted=False
        )
        assert (report.last_seq, report.records) == (5, 5)
        assert last.read_bytes() == whole[: offsets[-2]]
        assert [(record.seq, record.payload) for record in scan_log(directory)] == [
            (seq, payload(seq)) for seq in range(1, 6)
        ]


def test_torn_checksum_of_the_last_record_is_cut(tmp_path: Path) -> None:
    """A whole last frame with a bad checksum (a torn sector) is a torn tail."""
    [path] = build_log(tmp_path, [3])
    offsets = frame_offsets(path)
    flip_byte(path, offsets[-1] - 1)
    report = recover_log(tmp_path)
    assert report.cut is not None
    assert (report.cut.offset, report.cut.reason.startswith("crc32c mismatch"), report.last_seq) == (
        offsets[-2],
        True,
        2,
    )


def test_zero_filled_tail_is_cut(tmp_path: Path) -> None:
    """Zeros after the last good frame are cut as a torn tail."""
    [path] = build_log(tmp_path, [3])
    size = path.stat().st_size
    path.write_bytes(path.read_bytes() + bytes(8192))
    report = recover_log(tmp_path)
    assert report.cut == TailCut(
        segment=path,
        offset=size,
        bytes_cut=8192,
        reason="zero-filled tail (8192 bytes)",
        segment_deleted=False,
    )
    assert path.stat().st_size == size
    assert _seqs(tmp_path) == [1, 2, 3]


def test_header_less_last_segment_is_deleted(tmp_path: Path) -> None:
    """A crash during rollover leaves a last segment without a whole header; recovery deletes it."""
    _, last = build_log(tmp_path, [3, 2])
    last.unlink()
    torn = tmp_path / "segments" / "00000000000000000004.seg"
    torn.write_bytes(b"AETHSEG1\x04\x00")
    report = recover_log(tmp_path)
    assert report.cut == TailCut(
        segment=torn,
        offset=0,
        bytes_cut=10,
        reason="incomplete segment header (10 of 16 bytes)",
        segment_deleted=True,
    )
    assert (report.last_seq, report.segments) == (3, 1)
    assert not torn.exists()
    assert _seqs(tmp_path) == [1, 2, 3]


def test_crc_flip_in_the_middle_is_corruption_and_modifies_nothing(tmp_path: Path) -> None:
    """A damaged record followed by good ones stops recovery with the file and offset; no byte changes."""
    _, last = build_log(tmp_path, [2, 5])
    write_checkpoint(tmp_path, 99)
    (tmp_path / "checkpoints" / "00000000000000000003.ckpt.tmp").write_bytes(b"partial")
    offsets = frame_offsets(last)
    flip_byte(last, offsets[1] + 20)
    last.write_bytes(last.read_bytes() + b"\x01")
    before = snapshot(tmp_path)
    place = re.escape(f"{last} at offset {offsets[1]}: ")
    message = rf"^{place}crc32c mismatch \(stored 0x[0-9a-f]{{8}}, computed 0x[0-9a-f]{{8}}\)$"
    with pytest.raises(CorruptRecordError, match=message) as caught:
        recover_log(tmp_path)
    assert (caught.value.segment, caught.value.offset) == (last, offsets[1])
    assert snapshot(tmp_path) == before


def test_damage_in_an_older_segment_is_corruption_even_at_its_end(tmp_path: Path) -> None:
    """Only the last segment can have a torn tail."""
    first, _ = build_log(tmp_path, [3, 1])
    first.write_bytes(first.read_bytes()[:-1])
    before = snapshot(tmp_path)
    with pytest.raises(CorruptRecordError):
        recover_log(tmp_path)
    assert snapshot(tmp_path) == before


def test_seq_gap_between_segments_stops_recovery(tmp_path: Path) -> None:
    """A gap between segments is corruption naming both files."""
    [first] = build_log(tmp_path, [3])
    [later] = build_log(tmp_path / "other", [1], first_seq=9)
    (tmp_path / "segments" / later.name).write_bytes(later.read_bytes())
    message = f"{tmp_path / 'segments' / later.name}: seq gap after {first} (expected first seq 4, got 9)"
    with pytest.raises(SequenceGapError, match=rf"^{re.escape(message)}$"):
        recover_log(tmp_path)


def test_invalid_checkpoints_are_reported_and_set_aside(tmp_path: Path) -> None:
    """Checkpoints beyond the last seq or damaged are reported with a reason and renamed aside."""
    [path] = build_log(tmp_path, [4])
    good = write_checkpoint(tmp_path, 2)
    beyond = write_checkpoint(tmp_path, 9)
    damaged = write_checkpoint(tmp_path, 3)
    damaged.write_bytes(damaged.read_bytes()[:-1])
    report = recover_log(tmp_path)
    assert report.invalid_checkpoints == (
        InvalidCheckpoint(path=damaged, reason="payload length 5 but 4 bytes follow the header"),
        InvalidCheckpoint(path=beyond, reason="seq 9 is beyond the log's last seq 4"),
    )
    assert report.newest_checkpoint_seq == 2
    assert sorted(file.name for file in (tmp_path / "checkpoints").iterdir()) == [
        good.name,
        damaged.name + ".invalid",
        beyond.name + ".invalid",
    ]
    assert path.exists()


def test_checkpoint_beyond_a_cut_tail_is_invalid(tmp_path: Path) -> None:
    """The checkpoint check uses the last seq after the torn tail is cut."""
    [path] = build_log(tmp_path, [3])
    path.write_bytes(path.read_bytes()[:-1])
    write_checkpoint(tmp_path, 3)
    report = recover_log(tmp_path)
    assert [invalid.reason for invalid in report.invalid_checkpoints] == [
        "seq 3 is beyond the log's last seq 2"
    ]
    assert report.newest_checkpoint_seq is None


def test_temporary_files_of_interrupted_checkpoints_are_removed(tmp_path: Path) -> None:
    """A checkpoint temp file left by a crash is removed and reported."""
    build_log(tmp_path, [1])
    temporary = tmp_path / "checkpoints" / "00000000000000000001.ckpt.tmp"
    temporary.write_bytes(b"half")
    assert recover_log(tmp_path).removed_temporary_files == (temporary,)
    assert not temporary.exists()


def test_records_missing_without_a_covering_checkpoint(tmp_path: Path) -> None:
    """A log starting at seq N > 1 needs a valid checkpoint at seq >= N - 1; nothing is modified."""
    [path] = build_log(tmp_path, [3], first_seq=10)
    write_checkpoint(tmp_path, 8)
    path.write_bytes(path.read_bytes() + b"\x00")
    before = snapshot(tmp_path)
    message = re.escape(
        f"{tmp_path}: records 1..9 are missing: the oldest segment starts at seq 10"
        " and no valid checkpoint is at seq >= 9 (newest valid checkpoint: 8)"
    )
    with pytest.raises(RecordsMissingError, match=rf"^{message}$"):
        recover_log(tmp_path)
    assert snapshot(tmp_path) == before
    write_checkpoint(tmp_path, 9)
    assert recover_log(tmp_path).first_seq == 10


def test_recovery_is_idempotent(tmp_path: Path) -> None:
    """Recovering a recovered log finds nothing to do."""
    [path] = build_log(tmp_path, [3])
    path.write_bytes(path.read_bytes() + b"\x07")
    assert recover_log(tmp_path).cut is not None
    before = snapshot(tmp_path)
    assert recover_log(tmp_path).cut is None
    assert snapshot(tmp_path) == before


def test_recover_a_directory_that_is_not_a_log(tmp_path: Path) -> None:
    """Recovery refuses a directory without the marker."""
    with pytest.raises(NotALogError):
        recover_log(tmp_path)
