"""Read-only verification of a whole log: every frame of every segment and every checkpoint.

Unlike recovery it never stops at the first problem and never modifies anything.
"""

from __future__ import annotations

import enum
from pathlib import Path

import attrs

from aether.log.checkpoint import scan_checkpoints
from aether.log.errors import RecordsMissingError, SequenceGapError
from aether.log.layout import check_log_directory, list_segment_files
from aether.log.segment import DamageKind, LogRecord, scan_segment

__all__ = ["Finding", "Severity", "VerifyReport", "verify_log"]


class Severity(enum.Enum):
    """How serious a finding is."""

    TORN_TAIL = "torn tail"
    """The last segment ends in an interrupted write; recovery cuts it and loses nothing committed."""
    CORRUPTION = "corruption"
    """Committed data is damaged or missing; recovery refuses to run."""
    INVALID_CHECKPOINT = "invalid checkpoint"
    """A checkpoint cannot be used; replay falls back to an older one."""


@attrs.frozen(kw_only=True)
class Finding:
    """One problem found by :func:`verify_log`."""

    file: Path
    """The segment or checkpoint file (the log directory for problems of the log as a whole)."""
    offset: int | None
    """The offset in the file, or None when the problem is not at one place in a file."""
    reason: str
    """What is wrong, with the values found."""
    severity: Severity
    """Torn tail, corruption or invalid checkpoint."""

    def __str__(self) -> str:
        where = str(self.file) if self.offset is None else f"{self.file} at offset {self.offset}"
        return f"{where}: {self.severity.value}: {self.reason}"


@attrs.frozen(kw_only=True)
class VerifyReport:
    """What :func:`verify_log` found."""

    directory: Path
    """The log directory."""
    segments: int
    """How many segment files were checked."""
    records: int
    """How many good records they hold."""
    first_seq: int
    """The seq of the oldest segment's first record (``last_seq + 1`` for a log without records)."""
    last_seq: int
    """The seq of the last good record."""
    checkpoints: int
    """How many checkpoint files were checked."""
    valid_checkpoints: int
    """How many of them are valid."""
    findings: tuple[Finding, ...]
    """Every problem found, in the order found."""

    @property
    def ok(self) -> bool:
        """True when nothing was found."""
        return not self.findings


_SEVERITIES = {
    DamageKind.TORN_TAIL: Severity.TORN_TAIL,
    DamageKind.CORRUPT_RECORD: Severity.CORRUPTION,
    DamageKind.BAD_MAGIC: Severity.CORRUPTION,
}


def verify_log(directory: Path) -> VerifyReport:
    """Check every frame of every segment and every checkpoint, modifying nothing.

    After corrupt frames, checking continues with the next valid frame in the same segment.

    Args:
        directory: The log directory.

    Returns:
        The counts and every finding.

    Raises:
        NotALogError: If ``directory`` is not a log.
    """
    check_log_directory(directory)
    segments = list_segment_files(directory)
    findings: list[Finding] = []
    records = 0
    last_seq: int | None = None
    for index, segment in enumerate(segments):
        if last_seq is not None and segment.first_seq != last_seq + 1:
            reason = SequenceGapError(
                segment.path,
                previous=segments[index - 1].path,
                expected=last_seq + 1,
                found=segment.first_seq,
            ).reason
            findings.append(Finding(file=segment.path, offset=0, reason=reason, severity=Severity.CORRUPTION))
        last_seq = segment.first_seq - 1
        for item in scan_segment(segment, last=index == len(segments) - 1, oldest=index == 0, resync=True):
            if isinstance(item, LogRecord):
                records += 1
                last_seq = item.seq
            else:
                severity = _SEVERITIES[item.kind]
                findings.append(
                    Finding(file=item.segment, offset=item.offset, reason=item.reason, severity=severity)
                )
    final_seq = 0 if last_seq is None else last_seq
    checkpoints = scan_checkpoints(directory, last_seq=final_seq)
    for invalid in checkpoints.invalid:
        findings.append(
            Finding(
                file=invalid.path, offset=None, reason=invalid.reason, severity=Severity.INVALID_CHECKPOINT
            )
        )
    for path in checkpoints.set_aside:
        findings.append(
            Finding(
                file=path,
                offset=None,
                reason="set aside as invalid by an earlier recovery",
                severity=Severity.INVALID_CHECKPOINT,
            )
        )
    first_seq = segments[0].first_seq if segments else 1
    if first_seq > 1:
        newest = checkpoints.valid[-1].seq if checkpoints.valid else None
        if newest is None or newest < first_seq - 1:
            reason = RecordsMissingError(directory, first_seq=first_seq, newest_checkpoint_seq=newest).reason
            findings.append(Finding(file=directory, offset=None, reason=reason, severity=Severity.CORRUPTION))
    return VerifyReport(
        directory=directory,
        segments=len(segments),
        records=records,
        first_seq=min(first_seq, final_seq + 1),
        last_seq=final_seq,
        checkpoints=len(checkpoints.valid) + len(checkpoints.invalid),
        valid_checkpoints=len(checkpoints.valid),
        findings=tuple(findings),
    )
