"""Tests for the blocking operations on the active segment: create, write a batch, roll over, open."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from aether.log.active_segment import create_segment, open_for_append, roll_over, write_batch
from aether.log.errors import LogWriteError, NotALogError
from aether.log.frame import encode_frames, encode_segment_header
from aether.log.layout import create_log_directory, segment_path

from .helpers import build_log, names


def test_create_segment_writes_a_durable_header(tmp_path: Path) -> None:
    """A new segment holds exactly its header and is private."""
    create_log_directory(tmp_path)
    active = create_segment(tmp_path, 7)
    os.close(active.descriptor)
    assert (active.path, active.size) == (segment_path(tmp_path, 7), 16)
    assert active.path.read_bytes() == encode_segment_header(7)
    assert stat.S_IMODE(active.path.stat().st_mode) == 0o600


def test_create_segment_never_reuses_an_existing_file(tmp_path: Path) -> None:
    """An existing segment is never truncated or overwritten."""
    [path] = build_log(tmp_path, [2])
    before = path.read_bytes()
    message = re.escape(f"{path}: segment create failed: [Errno 17] File exists: '{path}'")
    with pytest.raises(LogWriteError, match=rf"^{message}$"):
        create_segment(tmp_path, 1)
    assert path.read_bytes() == before


def test_write_batch_appends_frames_and_roll_over_starts_the_next_segment(tmp_path: Path) -> None:
    """A batch lands at the end of the active segment; a rollover opens the next one."""
    create_log_directory(tmp_path)
    active = write_batch(create_segment(tmp_path, 1), first_seq=1, payloads=[b"a", b"bb"])
    assert active.size == 16 + 2 * 16 + 3
    active = roll_over(tmp_path, active, first_seq=3)
    active = write_batch(active, first_seq=3, payloads=[b"c"])
    os.close(active.descriptor)
    assert segment_path(tmp_path, 1).read_bytes() == encode_segment_header(1) + encode_frames(
        first_seq=1, payloads=[b"a", b"bb"]
    )
    assert segment_path(tmp_path, 3).read_bytes() == encode_segment_header(3) + encode_frames(
        first_seq=3, payloads=[b"c"]
    )


def test_open_for_append_opens_the_last_segment_at_its_end(tmp_path: Path) -> None:
    """The last segment is opened for append with its current size."""
    _, last = build_log(tmp_path, [2, 3])
    opened = open_for_append(tmp_path, create=False)
    os.close(opened.active.descriptor)
    assert (opened.active.path, opened.active.size, opened.segments) == (last, last.stat().st_size, 2)
    assert opened.recovery.last_seq == 5


def test_open_for_append_creates_the_first_segment(tmp_path: Path) -> None:
    """A new log gets segment 1."""
    opened = open_for_append(tmp_path / "log", create=True)
    os.close(opened.active.descriptor)
    assert opened.recovery.created
    assert names(tmp_path / "log" / "segments") == ["00000000000000000001.seg"]


def test_open_for_append_without_create(tmp_path: Path) -> None:
    """Without create, an empty directory is not a log."""
    with pytest.raises(NotALogError):
        open_for_append(tmp_path, create=False)
