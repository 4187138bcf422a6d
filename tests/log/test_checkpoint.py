"""Tests for reading, listing and writing checkpoints."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest

from aether.log.checkpoint import (
    Checkpoint,
    CheckpointFile,
    InvalidCheckpoint,
    NewestCheckpoint,
    list_checkpoints,
    read_checkpoint,
    read_newest_checkpoint,
    write_checkpoint_file,
)
from aether.log.errors import CheckpointError, RecordsMissingError

from .helpers import build_log, write_checkpoint


def test_write_then_read_a_checkpoint(tmp_path: Path) -> None:
    """A written checkpoint reads back whole, private, with no temp file left."""
    build_log(tmp_path, [5])
    written = write_checkpoint_file(tmp_path, seq=4, payload=b"state at 4")
    assert written == CheckpointFile(seq=4, path=tmp_path / "checkpoints" / "00000000000000000004.ckpt")
    assert read_checkpoint(written.path) == Checkpoint(seq=4, payload=b"state at 4")
    assert stat.S_IMODE(written.path.stat().st_mode) == 0o600
    assert list_checkpoints(tmp_path) == (written,)


def test_list_checkpoints_ignores_other_files(tmp_path: Path) -> None:
    """Only <seq:020d>.ckpt files are listed, oldest first."""
    build_log(tmp_path, [5])
    paths = [write_checkpoint(tmp_path, seq) for seq in (3, 1)]
    (tmp_path / "checkpoints" / "00000000000000000002.ckpt.tmp").write_bytes(b"")
    (tmp_path / "checkpoints" / "00000000000000000004.ckpt.invalid").write_bytes(b"")
    assert list_checkpoints(tmp_path) == (
        CheckpointFile(seq=1, path=paths[1]),
        CheckpointFile(seq=3, path=paths[0]),
    )


def test_read_newest_checkpoint_skips_and_reports_invalid_newer_ones(tmp_path: Path) -> None:
    """The newest valid checkpoint wins; each newer invalid one is reported with its reason."""
    build_log(tmp_path, [6])
    write_checkpoint(tmp_path, 2, b"two")
    write_checkpoint(tmp_path, 4, b"four")
    damaged = write_checkpoint(tmp_path, 5)
    damaged.write_bytes(b"AETHCKP0" + damaged.read_bytes()[8:])
    beyond = write_checkpoint(tmp_path, 7)
    assert read_newest_checkpoint(tmp_path) == NewestCheckpoint(
        checkpoint=Checkpoint(seq=4, payload=b"four"),
        invalid=(
            InvalidCheckpoint(path=beyond, reason="seq 7 is beyond the log's last seq 6"),
            InvalidCheckpoint(path=damaged, reason="bad magic b'AETHCKP0' (expected b'AETHCKP1')"),
        ),
    )


def test_read_newest_checkpoint_of_a_log_without_checkpoints(tmp_path: Path) -> None:
    """With no checkpoint, replay starts at seq 1."""
    build_log(tmp_path, [2])
    assert read_newest_checkpoint(tmp_path, last_seq=2) == NewestCheckpoint(checkpoint=None, invalid=())


def test_read_newest_checkpoint_names_missing_records(tmp_path: Path) -> None:
    """After retention, a log without a checkpoint reaching its oldest segment cannot be replayed."""
    build_log(tmp_path, [2], first_seq=6)
    write_checkpoint(tmp_path, 4)
    message = re.escape(
        f"{tmp_path}: records 1..5 are missing: the oldest segment starts at seq 6"
        " and no valid checkpoint is at seq >= 5 (newest valid checkpoint: 4)"
    )
    with pytest.raises(RecordsMissingError, match=rf"^{message}$"):
        read_newest_checkpoint(tmp_path)


def test_read_checkpoint_checks_the_name_against_the_header(tmp_path: Path) -> None:
    """A checkpoint renamed to another seq is invalid."""
    build_log(tmp_path, [5])
    path = write_checkpoint(tmp_path, 3)
    renamed = path.rename(path.with_name("00000000000000000004.ckpt"))
    message = re.escape(f"{renamed}: invalid checkpoint: header says seq 3 but the file name says 4")
    with pytest.raises(CheckpointError, match=rf"^{message}$"):
        read_checkpoint(renamed)
    odd = renamed.rename(renamed.with_name("four.ckpt"))
    message = re.escape(f"{odd}: invalid checkpoint: file name is not <seq:020d>.ckpt")
    with pytest.raises(CheckpointError, match=rf"^{message}$"):
        read_checkpoint(odd)
