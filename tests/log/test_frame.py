"""Tests for the sans-IO frame, segment header and checkpoint codecs."""

from __future__ import annotations

import struct

import crc32c
import pytest

from aether.log.frame import (
    CHECKPOINT_MAGIC,
    FRAME_HEADER_SIZE,
    MAX_PAYLOAD,
    SEGMENT_MAGIC,
    FrameHeader,
    SegmentHeader,
    decode_checkpoint,
    encode_checkpoint,
    encode_frame,
    encode_frames,
    encode_segment_header,
    find_valid_frame,
    frame_checksum,
    frame_problem,
)


def test_segment_header_is_magic_then_first_seq_little_endian() -> None:
    """A segment header is the 8-byte magic followed by the first seq as a u64 little-endian."""
    assert encode_segment_header(258) == b"AETHSEG1" + (258).to_bytes(8, "little")
    assert SegmentHeader.from_bytes(encode_segment_header(258)) == SegmentHeader(
        magic=SEGMENT_MAGIC, first_seq=258
    )


def test_frame_layout_is_length_crc_seq_payload() -> None:
    """A frame is <IIQ (length, crc32c, seq) then the payload; the crc covers length, seq and payload."""
    frame = encode_frame(seq=7, payload=b"hello")
    expected_crc = crc32c.crc32c(struct.pack("<I", 5) + struct.pack("<Q", 7) + b"hello")
    assert frame == struct.pack("<IIQ", 5, expected_crc, 7) + b"hello"
    assert frame_checksum(seq=7, payload=b"hello") == expected_crc
    assert FrameHeader.from_bytes(frame) == FrameHeader(length=5, checksum=expected_crc, seq=7)


def test_encode_frames_numbers_consecutively() -> None:
    """encode_frames gives each payload the next seq."""
    frames = encode_frames(first_seq=10, payloads=[b"a", b"", b"ccc"])
    assert frames == encode_frame(seq=10, payload=b"a") + encode_frame(seq=11, payload=b"") + encode_frame(
        seq=12, payload=b"ccc"
    )


def test_frame_problem_accepts_a_valid_frame() -> None:
    """A frame with the right checksum and the expected seq has no problem."""
    header = FrameHeader.from_bytes(encode_frame(seq=3, payload=b"x"))
    assert frame_problem(header, b"x", expected_seq=3) is None


def test_frame_problem_reports_a_checksum_mismatch_with_both_values() -> None:
    """A damaged payload is reported with the stored and the computed crc32c."""
    header = FrameHeader.from_bytes(encode_frame(seq=3, payload=b"x"))
    computed = frame_checksum(seq=3, payload=b"y")
    expected = f"crc32c mismatch (stored 0x{header.checksum:08x}, computed 0x{computed:08x})"
    assert frame_problem(header, b"y", expected_seq=3) == expected


def test_frame_problem_reports_an_unexpected_seq() -> None:
    """A valid frame with the wrong seq is reported with both seqs."""
    header = FrameHeader.from_bytes(encode_frame(seq=5, payload=b"x"))
    assert frame_problem(header, b"x", expected_seq=4) == "sequence number 5 where 4 was expected"


def test_find_valid_frame_skips_garbage_and_old_seqs() -> None:
    """The search finds the first complete frame with a good checksum and a seq above the bound."""
    old = encode_frame(seq=2, payload=b"old")
    new = encode_frame(seq=9, payload=b"new")
    data = b"\xff" * 5 + old + b"\x00" * 40 + new
    assert find_valid_frame(data, start=0, after_seq=2) == 5 + len(old) + 40
    assert find_valid_frame(data, start=0, after_seq=1) == 5


def test_find_valid_frame_finds_nothing_in_zeros_or_a_truncated_frame() -> None:
    """Zero-filled bytes and an incomplete frame hold no valid frame."""
    frame = encode_frame(seq=4, payload=b"payload")
    assert find_valid_frame(bytes(4096), start=0, after_seq=0) is None
    assert find_valid_frame(bytes(100) + frame[:-1], start=0, after_seq=0) is None


def test_find_valid_frame_finds_a_frame_right_after_zeros() -> None:
    """Jumping over zero runs never jumps over a frame that starts inside one."""
    frame = encode_frame(seq=1, payload=b"")
    for zeros in range(0, 40):
        assert find_valid_frame(bytes(zeros) + frame, start=0, after_seq=0) == zeros


def test_find_valid_frame_ignores_lengths_above_the_maximum() -> None:
    """A header claiming more than MAX_PAYLOAD bytes is never taken for a frame."""
    data = struct.pack("<IIQ", MAX_PAYLOAD + 1, 0, 1) + bytes(64)
    assert find_valid_frame(data, start=0, after_seq=0) is None


def test_checkpoint_round_trip() -> None:
    """A checkpoint is the checkpoint magic, a frame header and the payload, and decodes back."""
    data = encode_checkpoint(seq=42, payload=b"state")
    assert data.startswith(CHECKPOINT_MAGIC)
    assert data[len(CHECKPOINT_MAGIC) :] == encode_frame(seq=42, payload=b"state")
    assert decode_checkpoint(data) == (42, b"state")


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"AETHCKP1" + bytes(3), "incomplete checkpoint header (11 of 24 bytes)"),
        (b"NOTACKPT" + bytes(16), "bad magic b'NOTACKPT' (expected b'AETHCKP1')"),
        (encode_checkpoint(seq=1, payload=b"abc")[:-1], "payload length 3 but 2 bytes follow the header"),
    ],
)
def test_decode_checkpoint_reports_damage(data: bytes, reason: str) -> None:
    """A damaged checkpoint decodes to the reason, with the values found."""
    assert decode_checkpoint(data) == reason


def test_decode_checkpoint_reports_a_checksum_mismatch() -> None:
    """A flipped payload byte is a checksum mismatch."""
    data = bytearray(encode_checkpoint(seq=1, payload=b"abc"))
    data[-1] ^= 0xFF
    stored = int.from_bytes(data[12:16], "little")
    computed = frame_checksum(seq=1, payload=bytes(data[-3:]))
    assert (
        decode_checkpoint(bytes(data))
        == f"crc32c mismatch (stored 0x{stored:08x}, computed 0x{computed:08x})"
    )
    assert FRAME_HEADER_SIZE == 16
