"""Builders shared by the log tests: logs written frame by frame, payloads, and directory snapshots."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from aether.log.checkpoint import checkpoint_path
from aether.log.frame import encode_checkpoint, encode_frames, encode_segment_header
from aether.log.layout import LOCK_NAME, create_log_directory, segment_path


def payload(seq: int) -> bytes:
    """Return a distinct, recognisable payload for ``seq`` (its length varies with the seq)."""
    return f"event-{seq}-".encode() + bytes(seq % 7)


def build_log(directory: Path, segments: Sequence[int], *, first_seq: int = 1) -> list[Path]:
    """Create a log whose segments hold ``segments[i]`` records each, with :func:`payload` payloads.

    Args:
        directory: The log directory to create.
        segments: How many records each segment holds, oldest first.
        first_seq: The first seq of the oldest segment.

    Returns:
        The segment paths, oldest first.
    """
    create_log_directory(directory)
    paths = []
    seq = first_seq
    for count in segments:
        path = segment_path(directory, seq)
        frames = encode_frames(first_seq=seq, payloads=[payload(s) for s in range(seq, seq + count)])
        path.write_bytes(encode_segment_header(seq) + frames)
        paths.append(path)
        seq += count
    return paths


def write_checkpoint(directory: Path, seq: int, data: bytes = b"state") -> Path:
    """Write a valid checkpoint file at ``seq`` directly, bypassing the writer."""
    path = checkpoint_path(directory, seq)
    path.write_bytes(encode_checkpoint(seq=seq, payload=data))
    return path


def snapshot(directory: Path) -> dict[str, bytes]:
    """Return every file under ``directory`` (relative path to content), to prove nothing changed.

    The lock file (`aether.log.lock`) is left out: it names the last process that opened the log, not its content.
    """
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file() and path.name != LOCK_NAME
    }


def names(directory: Path) -> list[str]:
    """Return the sorted names of the entries of ``directory``."""
    return sorted(path.name for path in directory.iterdir())


def frame_offsets(path: Path) -> list[int]:
    """Return the offset of every frame in a well-formed segment file, plus the file size at the end."""
    data = path.read_bytes()
    offsets = [16]
    while offsets[-1] < len(data):
        length = int.from_bytes(data[offsets[-1] : offsets[-1] + 4], "little")
        offsets.append(offsets[-1] + 16 + length)
    return offsets


def flip_byte(path: Path, offset: int) -> None:
    """Invert one byte of a file in place."""
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))
