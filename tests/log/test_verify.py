"""Tests for read-only verification of a whole log."""

from __future__ import annotations

from pathlib import Path

import pytest

from aether.log.errors import NotALogError
from aether.log.verify import Finding, Severity, VerifyReport, verify_log

from .helpers import build_log, flip_byte, frame_offsets, snapshot, write_checkpoint


def test_clean_log_has_no_findings(tmp_path: Path) -> None:
    """A sound log verifies with counts and no findings."""
    build_log(tmp_path, [2, 3])
    write_checkpoint(tmp_path, 4)
    report = verify_log(tmp_path)
    assert report == VerifyReport(
        directory=tmp_path,
        segments=2,
        records=5,
        first_seq=1,
        last_seq=5,
        checkpoints=1,
        valid_checkpoints=1,
        findings=(),
    )
    assert report.ok


def test_verify_reports_every_problem_and_modifies_nothing(tmp_path: Path) -> None:
    """Corruption, a torn tail and invalid checkpoints are all reported; no byte changes."""
    first, last = build_log(tmp_path, [4, 3])
    first_offsets = frame_offsets(first)
    flip_byte(first, first_offsets[1] + 17)
    last_size = last.stat().st_size
    last.write_bytes(last.read_bytes() + bytes(32))
    write_checkpoint(tmp_path, 3)
    beyond = write_checkpoint(tmp_path, 8)
    set_aside = tmp_path / "checkpoints" / "00000000000000000002.ckpt.invalid"
    set_aside.write_bytes(b"old")
    before = snapshot(tmp_path)
    report = verify_log(tmp_path)
    assert snapshot(tmp_path) == before
    corrupt, torn, invalid, old = report.findings
    assert (corrupt.file, corrupt.offset, corrupt.severity) == (first, first_offsets[1], Severity.CORRUPTION)
    assert corrupt.reason.startswith("crc32c mismatch (stored 0x")
    assert torn == Finding(
        file=last, offset=last_size, reason="zero-filled tail (32 bytes)", severity=Severity.TORN_TAIL
    )
    assert invalid == Finding(
        file=beyond,
        offset=None,
        reason="seq 8 is beyond the log's last seq 7",
        severity=Severity.INVALID_CHECKPOINT,
    )
    assert old == Finding(
        file=set_aside,
        offset=None,
        reason="set aside as invalid by an earlier recovery",
        severity=Severity.INVALID_CHECKPOINT,
    )
    # Checking resumed after the corrupt record: records 1, 3, 4 of the first segment and 5..7.
    assert (report.records, report.last_seq, report.checkpoints, report.valid_checkpoints) == (6, 7, 2, 1)
    assert not report.ok
    assert str(torn) == f"{last} at offset {last_size}: torn tail: zero-filled tail (32 bytes)"


def test_verify_reports_gaps_and_missing_records(tmp_path: Path) -> None:
    """A gap between segments and records missing before the oldest segment are corruption."""
    [first] = build_log(tmp_path, [2], first_seq=5)
    [later] = build_log(tmp_path / "other", [1], first_seq=9)
    moved = tmp_path / "segments" / later.name
    moved.write_bytes(later.read_bytes())
    findings = verify_log(tmp_path).findings
    assert findings == (
        Finding(
            file=moved,
            offset=0,
            reason=f"seq gap after {first} (expected first seq 7, got 9)",
            severity=Severity.CORRUPTION,
        ),
        Finding(
            file=tmp_path,
            offset=None,
            reason="records 1..4 are missing: the oldest segment starts at seq 5"
            " and no valid checkpoint is at seq >= 4 (newest valid checkpoint: None)",
            severity=Severity.CORRUPTION,
        ),
    )
    assert str(findings[1]).startswith(f"{tmp_path}: corruption: records 1..4 are missing")


def test_verify_a_directory_that_is_not_a_log(tmp_path: Path) -> None:
    """Verification refuses a directory without the marker."""
    with pytest.raises(NotALogError):
        verify_log(tmp_path)
