"""Sans-IO encoding and decoding of the log's byte formats: segment headers, frames and checkpoints.

Nothing here touches a file; callers hand in bytes and get bytes or values back.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence

import attrs
import crc32c

__all__ = [
    "CHECKPOINT_HEADER_SIZE",
    "CHECKPOINT_MAGIC",
    "FRAME_HEADER_SIZE",
    "MAX_PAYLOAD",
    "SEGMENT_HEADER_SIZE",
    "SEGMENT_MAGIC",
    "FrameHeader",
    "SegmentHeader",
    "decode_checkpoint",
    "encode_checkpoint",
    "encode_frame",
    "encode_frames",
    "encode_segment_header",
    "find_valid_frame",
    "frame_checksum",
    "frame_problem",
]

SEGMENT_MAGIC = b"AETHSEG1"
"""The first 8 bytes of every segment file."""

CHECKPOINT_MAGIC = b"AETHCKP1"
"""The first 8 bytes of every checkpoint file."""

# Segment header: magic, then the seq of the segment's first frame (u64 little-endian).
_SEGMENT_HEADER = struct.Struct("<8sQ")
SEGMENT_HEADER_SIZE = _SEGMENT_HEADER.size

# Frame header: payload length (u32), crc32c (u32), seq (u64), all little-endian.
_FRAME_HEADER = struct.Struct("<IIQ")
FRAME_HEADER_SIZE = _FRAME_HEADER.size
unpack_frame_header = _FRAME_HEADER.unpack
"""`unpack_frame_header(data) -> (length, checksum, seq)` for exactly FRAME_HEADER_SIZE bytes (the hot path)."""
unpack_frame_header_from = _FRAME_HEADER.unpack_from
"""`unpack_frame_header_from(data, offset) -> (length, checksum, seq)` (the hot path of a segment read whole)."""

# The fields the checksum covers besides the payload, in this order: length, then seq.
_CHECKSUMMED_FIELDS = struct.Struct("<IQ")

CHECKPOINT_HEADER_SIZE = len(CHECKPOINT_MAGIC) + FRAME_HEADER_SIZE

MAX_PAYLOAD = 64 * 2**20
"""The largest payload one frame may hold (64 MiB).

A reader trusts a length field only up to this bound, so a damaged length can never make it allocate
gigabytes, and a length above it is reported as corruption at once.
Events are hundreds of bytes; 64 MiB leaves room for the largest single event we can imagine
(a full trust bundle or a big Gateway API object) while staying far below the u32 limit.
"""

# A seq of 0 is never valid, so a frame whose seq field is all zeros can be skipped without a checksum.
# This pattern lets the search jump over zero-filled stretches (the usual torn tail after a crash) in C.
_NONZERO = re.compile(rb"[^\x00]")


@attrs.frozen(kw_only=True)
class SegmentHeader:
    """The 16-byte header at the start of a segment file."""

    magic: bytes
    """The magic found; a valid segment has :data:`SEGMENT_MAGIC`."""
    first_seq: int
    """The seq of the segment's first frame; it must agree with the file name."""

    @classmethod
    def from_bytes(cls, data: bytes) -> SegmentHeader:
        """Decode a header from exactly :data:`SEGMENT_HEADER_SIZE` bytes.

        Args:
            data: The first bytes of a segment file.

        Returns:
            The decoded header; the magic is not checked.
        """
        magic, first_seq = _SEGMENT_HEADER.unpack(data)
        return cls(magic=magic, first_seq=first_seq)


@attrs.frozen(kw_only=True)
class FrameHeader:
    """The 16-byte header in front of every frame's payload."""

    length: int
    """The payload length in bytes."""
    checksum: int
    """The stored crc32c over the length, the seq and the payload."""
    seq: int
    """The record's sequence number."""

    @classmethod
    def from_bytes(cls, data: bytes, *, offset: int = 0) -> FrameHeader:
        """Decode a frame header from ``data`` at ``offset``.

        Args:
            data: A buffer holding at least :data:`FRAME_HEADER_SIZE` bytes at ``offset``.
            offset: Where the header starts in ``data``.

        Returns:
            The decoded header; nothing is checked.
        """
        length, checksum, seq = _FRAME_HEADER.unpack_from(data, offset)
        return cls(length=length, checksum=checksum, seq=seq)


def encode_segment_header(first_seq: int) -> bytes:
    """Encode a segment header.

    Args:
        first_seq: The seq of the segment's first frame.

    Returns:
        The 16 header bytes.
    """
    return _SEGMENT_HEADER.pack(SEGMENT_MAGIC, first_seq)


def frame_checksum(*, seq: int, payload: bytes) -> int:
    """Compute a frame's crc32c: over the 4 length bytes, the 8 seq bytes, then the payload.

    Args:
        seq: The record's sequence number.
        payload: The record's payload.

    Returns:
        The crc32c as an unsigned 32-bit integer.
    """
    fields = _CHECKSUMMED_FIELDS.pack(len(payload), seq)
    return int(crc32c.crc32c(payload, value=crc32c.crc32c(fields)))


def encode_frame(*, seq: int, payload: bytes) -> bytes:
    """Encode one frame.

    Args:
        seq: The record's sequence number.
        payload: The record's payload, at most :data:`MAX_PAYLOAD` bytes.

    Returns:
        The header followed by the payload.
    """
    assert len(payload) <= MAX_PAYLOAD, "payload size is checked before framing; this is a bug"
    return _FRAME_HEADER.pack(len(payload), frame_checksum(seq=seq, payload=payload), seq) + payload


def encode_frames(*, first_seq: int, payloads: Sequence[bytes]) -> bytes:
    """Encode consecutive frames whose seqs start at ``first_seq``.

    Args:
        first_seq: The seq of the first payload; each next payload gets the next seq.
        payloads: The payloads, each at most :data:`MAX_PAYLOAD` bytes.

    Returns:
        The frames, back to back.
    """
    parts: list[bytes] = []
    for seq, payload in enumerate(payloads, start=first_seq):
        assert len(payload) <= MAX_PAYLOAD, "payload size is checked before framing; this is a bug"
        parts.append(_FRAME_HEADER.pack(len(payload), frame_checksum(seq=seq, payload=payload), seq))
        parts.append(payload)
    return b"".join(parts)


def frame_problem(header: FrameHeader, payload: bytes, *, expected_seq: int) -> str | None:
    """Check a complete frame's checksum and seq.

    Args:
        header: The decoded frame header.
        payload: The ``header.length`` payload bytes that followed it.
        expected_seq: The seq this frame must carry (the previous frame's plus one).

    Returns:
        None when the frame is valid, otherwise the reason, with the values found.
    """
    computed = frame_checksum(seq=header.seq, payload=payload)
    if computed != header.checksum:
        return f"crc32c mismatch (stored 0x{header.checksum:08x}, computed 0x{computed:08x})"
    if header.seq != expected_seq:
        return f"sequence number {header.seq!r} where {expected_seq!r} was expected"
    return None


def find_valid_frame(data: bytes, *, start: int, after_seq: int) -> int | None:
    """Search ``data`` byte by byte for the first valid frame at or after ``start``.

    A valid frame is complete, has a matching checksum and a seq greater than ``after_seq``.
    This decides whether damage is a torn tail (nothing valid follows) or corruption,
    so it only runs on the error path.

    Args:
        data: The bytes to search, e.g. the rest of a segment from the damaged frame on.
        start: The first offset in ``data`` to try.
        after_seq: The seq of the last good frame before the damage.

    Returns:
        The offset in ``data`` of the first valid frame, or None if there is none.
    """
    end = len(data)
    offset = start
    while offset + FRAME_HEADER_SIZE <= end:
        length, checksum, seq = _FRAME_HEADER.unpack_from(data, offset)
        if seq == 0:
            # Invariant: no frame can start at an offset whose seq field is all zeros,
            # so jump to the first offset whose seq field holds the next nonzero byte.
            match = _NONZERO.search(data, offset + FRAME_HEADER_SIZE - 8)
            if match is None:
                return None
            offset = max(offset + 1, match.start() - FRAME_HEADER_SIZE + 1)
            continue
        payload_end = offset + FRAME_HEADER_SIZE + length
        if seq > after_seq and length <= MAX_PAYLOAD and payload_end <= end:
            payload = data[offset + FRAME_HEADER_SIZE : payload_end]
            if frame_checksum(seq=seq, payload=payload) == checksum:
                return offset
        offset += 1
    return None


def encode_checkpoint(*, seq: int, payload: bytes) -> bytes:
    """Encode a checkpoint file: the checkpoint magic, a frame header, then the payload.

    Args:
        seq: The seq of the last record the checkpoint includes.
        payload: The opaque checkpoint payload (at most 4 GiB - 1).

    Returns:
        The whole file's bytes.
    """
    header = _FRAME_HEADER.pack(len(payload), frame_checksum(seq=seq, payload=payload), seq)
    return CHECKPOINT_MAGIC + header + payload


def decode_checkpoint(data: bytes) -> tuple[int, bytes] | str:
    """Decode a whole checkpoint file.

    Args:
        data: The file's bytes.

    Returns:
        ``(seq, payload)``, or the reason the bytes are not a valid checkpoint, with the values found.
    """
    if len(data) < CHECKPOINT_HEADER_SIZE:
        return f"incomplete checkpoint header ({len(data)!r} of {CHECKPOINT_HEADER_SIZE!r} bytes)"
    magic = data[: len(CHECKPOINT_MAGIC)]
    if magic != CHECKPOINT_MAGIC:
        return f"bad magic {magic!r} (expected {CHECKPOINT_MAGIC!r})"
    header = FrameHeader.from_bytes(data, offset=len(CHECKPOINT_MAGIC))
    payload = data[CHECKPOINT_HEADER_SIZE:]
    if len(payload) != header.length:
        return f"payload length {header.length!r} but {len(payload)!r} bytes follow the header"
    computed = frame_checksum(seq=header.seq, payload=payload)
    if computed != header.checksum:
        return f"crc32c mismatch (stored 0x{header.checksum:08x}, computed 0x{computed:08x})"
    return header.seq, payload
