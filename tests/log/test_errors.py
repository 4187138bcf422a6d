"""Tests for the log's exception tree and messages."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from aether.log import errors

SEGMENT = Path("log/segments/00000000000000000001.seg")


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (
            errors.NotALogError(Path("log"), found="directory is empty"),
            "log: not an aether event log (directory is empty)",
        ),
        (
            errors.BadMagicError(SEGMENT, offset=0, found=b"NOPE\x00\x00\x00\x00", expected=b"AETHSEG1"),
            f"{SEGMENT} at offset 0: bad magic b'NOPE\\x00\\x00\\x00\\x00' (expected b'AETHSEG1')",
        ),
        (
            errors.CorruptRecordError(
                SEGMENT, offset=4096, reason="crc32c mismatch (stored 0x1234abcd, computed 0x00000001)"
            ),
            f"{SEGMENT} at offset 4096: crc32c mismatch (stored 0x1234abcd, computed 0x00000001)",
        ),
        (
            errors.TornTailError(SEGMENT, offset=90, reason="incomplete frame header (3 of 16 bytes)"),
            f"{SEGMENT} at offset 90: torn tail (incomplete frame header (3 of 16 bytes))",
        ),
        (
            errors.SequenceGapError(Path("b.seg"), previous=Path("a.seg"), expected=4, found=9),
            "b.seg: seq gap after a.seg (expected first seq 4, got 9)",
        ),
        (
            errors.RecordsMissingError(Path("log"), first_seq=10, newest_checkpoint_seq=None),
            "log: records 1..9 are missing: the oldest segment starts at seq 10"
            " and no valid checkpoint is at seq >= 9 (newest valid checkpoint: None)",
        ),
        (
            errors.CheckpointError(Path("c.ckpt"), reason="seq 9 is beyond the log's last seq 4"),
            "c.ckpt: invalid checkpoint: seq 9 is beyond the log's last seq 4",
        ),
        (
            errors.LogRangeError(Path("log"), seq=3, first_seq=50),
            "log: seq 3 is no longer in the log (the oldest record is seq 50)",
        ),
        (
            errors.PayloadTooLargeError(70_000_000, maximum=67_108_864),
            "payload: size must be at most 67108864 bytes (got 70000000)",
        ),
        (
            errors.CheckpointSeqError(Path("log"), seq=12, last_seq=10),
            "log: checkpoint seq must be 0..10 (got 12)",
        ),
        (
            errors.LogWriteError(SEGMENT, operation="fsync", error=OSError(errno.EIO, "Input/output error")),
            f"{SEGMENT}: fsync failed: [Errno 5] Input/output error",
        ),
        (errors.LogBrokenError(Path("log")), "log: event log refuses appends after a failed write"),
        (errors.LogClosedError(Path("log")), "log: event log is closed"),
    ],
)
def test_messages_name_the_subject_and_show_the_values(error: errors.LogError, message: str) -> None:
    """Each message is lowercase, names the file or directory, and shows the values found."""
    assert str(error) == message


def test_every_exception_descends_from_log_error() -> None:
    """One root: every public exception is a LogError, damage ones are LogDamageError."""
    exceptions = [getattr(errors, name) for name in errors.__all__]
    assert all(issubclass(exception, errors.LogError) for exception in exceptions)
    damage = {
        errors.BadMagicError,
        errors.CorruptRecordError,
        errors.TornTailError,
        errors.SequenceGapError,
        errors.RecordsMissingError,
    }
    assert {exception for exception in exceptions if issubclass(exception, errors.LogDamageError)} == {
        errors.LogDamageError,
        *damage,
    }
    assert issubclass(errors.LogRangeError, LookupError)
    assert issubclass(errors.PayloadTooLargeError, ValueError)
    assert issubclass(errors.CheckpointSeqError, ValueError)


def test_closed_and_broken_are_distinct() -> None:
    """'We closed it' and 'it broke' are different exceptions."""
    assert not issubclass(errors.LogClosedError, errors.LogBrokenError)
    assert not issubclass(errors.LogBrokenError, errors.LogClosedError)
