"""Tests for choosing and deleting the segments and checkpoints a checkpoint makes unnecessary."""

from __future__ import annotations

from pathlib import Path

from aether.log.checkpoint import CheckpointFile, list_checkpoints
from aether.log.layout import SegmentFile, list_segment_files
from aether.log.reader import scan_log
from aether.log.retention import RetentionPlan, apply_retention, plan_retention

from .helpers import build_log, write_checkpoint


def _segments(*first_seqs: int) -> list[SegmentFile]:
    return [SegmentFile(first_seq=seq, path=Path(f"{seq:020d}.seg")) for seq in first_seqs]


def _checkpoints(*seqs: int) -> list[CheckpointFile]:
    return [CheckpointFile(seq=seq, path=Path(f"{seq:020d}.ckpt")) for seq in seqs]


def test_no_checkpoint_means_nothing_is_deleted() -> None:
    """Without a checkpoint every record is still needed."""
    plan = plan_retention(segments=_segments(1, 11, 21), checkpoints=[], retention_margin=0)
    assert plan == RetentionPlan(segments=(), checkpoints=())


def test_segments_wholly_at_or_below_the_bound_are_deleted() -> None:
    """A segment goes when its last seq is <= newest checkpoint - margin; the rest stay."""
    segments = _segments(1, 11, 21, 31)
    plan = plan_retention(segments=segments, checkpoints=_checkpoints(25), retention_margin=5)
    assert plan == RetentionPlan(segments=tuple(segments[:2]), checkpoints=())
    plan = plan_retention(segments=segments, checkpoints=_checkpoints(25), retention_margin=6)
    assert plan == RetentionPlan(segments=tuple(segments[:1]), checkpoints=())


def test_the_active_segment_is_never_deleted() -> None:
    """Even a checkpoint at the very last seq leaves the last segment."""
    segments = _segments(1, 11)
    plan = plan_retention(segments=segments, checkpoints=_checkpoints(1000), retention_margin=0)
    assert plan == RetentionPlan(segments=tuple(segments[:1]), checkpoints=())


def test_two_checkpoints_are_kept_and_the_older_one_stays_replayable() -> None:
    """Older checkpoints go; segments are kept back to the older kept checkpoint."""
    segments = _segments(1, 11, 21, 31)
    checkpoints = _checkpoints(5, 12, 35)
    plan = plan_retention(segments=segments, checkpoints=checkpoints, retention_margin=0)
    assert plan == RetentionPlan(segments=tuple(segments[:1]), checkpoints=tuple(checkpoints[:1]))


def test_apply_retention_deletes_the_planned_files_and_the_log_stays_readable(tmp_path: Path) -> None:
    """After deletion the log starts at the first kept segment and reads from there."""
    build_log(tmp_path, [10, 10, 10])
    for seq in (8, 15, 22):
        write_checkpoint(tmp_path, seq)
    plan = plan_retention(
        segments=list_segment_files(tmp_path), checkpoints=list_checkpoints(tmp_path), retention_margin=0
    )
    apply_retention(tmp_path, plan)
    assert [segment.first_seq for segment in list_segment_files(tmp_path)] == [11, 21]
    assert [checkpoint.seq for checkpoint in list_checkpoints(tmp_path)] == [15, 22]
    assert [record.seq for record in scan_log(tmp_path, from_seq=16)] == list(range(16, 31))
