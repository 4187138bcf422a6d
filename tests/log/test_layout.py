"""Tests for the log directory layout: the marker, creation, modes and segment listing."""

from __future__ import annotations

import re
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from aether.log.errors import NotALogError
from aether.log.layout import (
    MARKER_CONTENT,
    SegmentFile,
    check_log_directory,
    create_log_directory,
    list_segment_files,
    segment_path,
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_create_log_directory_makes_a_private_log(tmp_path: Path) -> None:
    """A new log has the exact marker, the two subdirectories, directories 0o700 and files 0o600."""
    directory = tmp_path / "parent" / "log"
    assert create_log_directory(directory) is True
    assert (directory / "AETHER-LOG").read_bytes() == b"aether event log v1\n"
    assert sorted(path.name for path in directory.iterdir()) == ["AETHER-LOG", "checkpoints", "segments"]
    assert [_mode(directory), _mode(directory / "segments"), _mode(directory / "checkpoints")] == [0o700] * 3
    assert _mode(directory / "AETHER-LOG") == 0o600
    check_log_directory(directory)


def test_create_log_directory_uses_an_existing_empty_directory(tmp_path: Path) -> None:
    """An empty directory becomes a log and is made private."""
    tmp_path.chmod(0o755)
    assert create_log_directory(tmp_path) is True
    assert _mode(tmp_path) == 0o700
    assert (tmp_path / "AETHER-LOG").read_bytes() == MARKER_CONTENT


def test_create_log_directory_leaves_an_existing_log_alone(tmp_path: Path) -> None:
    """Creating over an existing log reports that nothing was created."""
    create_log_directory(tmp_path)
    (tmp_path / "segments" / "keep").write_bytes(b"x")
    assert create_log_directory(tmp_path) is False
    assert (tmp_path / "segments" / "keep").read_bytes() == b"x"


def test_create_log_directory_finishes_an_interrupted_creation(tmp_path: Path) -> None:
    """A directory holding only a half-written marker counts as empty."""
    (tmp_path / "AETHER-LOG.tmp").write_bytes(b"aether")
    assert create_log_directory(tmp_path) is True
    assert sorted(path.name for path in tmp_path.iterdir()) == ["AETHER-LOG", "checkpoints", "segments"]


def test_create_log_directory_refuses_a_foreign_directory(tmp_path: Path) -> None:
    """A non-empty directory without the marker is not a log and is not touched."""
    (tmp_path / "notes.txt").write_bytes(b"mine")
    message = re.escape(f"{tmp_path}: not an aether event log (no AETHER-LOG marker; found ['notes.txt'])")
    with pytest.raises(NotALogError, match=rf"^{message}$"):
        create_log_directory(tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["notes.txt"]


def test_check_log_directory_names_what_it_found(tmp_path: Path) -> None:
    """The error names the directory and lists (a few of) the entries found."""
    for index in range(7):
        (tmp_path / f"file{index}").write_bytes(b"")
    found = "['file0', 'file1', 'file2', 'file3', 'file4'] and 2 more"
    message = re.escape(f"{tmp_path}: not an aether event log (no AETHER-LOG marker; found {found})")
    with pytest.raises(NotALogError, match=rf"^{message}$") as caught:
        check_log_directory(tmp_path)
    assert caught.value.directory == tmp_path


def test_check_log_directory_rejects_a_marker_with_other_content(tmp_path: Path) -> None:
    """A marker with any other content is not our marker; the content is shown."""
    (tmp_path / "AETHER-LOG").write_bytes(b"aether event log v2\n")
    found = r"AETHER-LOG contains b'aether event log v2\n', expected b'aether event log v1\n'"
    message = re.escape(f"{tmp_path}: not an aether event log ({found})")
    with pytest.raises(NotALogError, match=rf"^{message}$"):
        check_log_directory(tmp_path)


@pytest.mark.parametrize(
    ("make", "found"),
    [
        (lambda path: None, "directory does not exist"),
        (lambda path: path.mkdir(), "directory is empty"),
        (lambda path: path.write_bytes(b""), "not a directory"),
        (lambda path: (path.mkdir(), (path / "AETHER-LOG").mkdir()), "AETHER-LOG is a directory"),
    ],
)
def test_check_log_directory_rejects_what_is_not_a_log(
    tmp_path: Path, make: Callable[[Path], object], found: str
) -> None:
    """Missing, empty, non-directory and marker-is-a-directory are all not a log."""
    path = tmp_path / "log"
    make(path)
    with pytest.raises(NotALogError, match=rf"^{re.escape(f'{path}: not an aether event log ({found})')}$"):
        check_log_directory(path)


def test_list_segment_files_sorts_by_seq_and_ignores_other_names(tmp_path: Path) -> None:
    """Only <seq:020d>.seg files are segments, sorted by their first seq."""
    create_log_directory(tmp_path)
    for seq in (30, 1, 200):
        segment_path(tmp_path, seq).write_bytes(b"")
    for name in ("1.seg", "00000000000000000005.seg.tmp", "README"):
        (tmp_path / "segments" / name).write_bytes(b"")
    assert list_segment_files(tmp_path) == tuple(
        SegmentFile(first_seq=seq, path=tmp_path / "segments" / f"{seq:020d}.seg") for seq in (1, 30, 200)
    )


def test_list_segment_files_of_a_log_without_segments_directory(tmp_path: Path) -> None:
    """A log whose creation stopped after the marker has no segments."""
    assert list_segment_files(tmp_path) == ()
