"""Guards the public names of aether.log."""

from __future__ import annotations

import ast
from pathlib import Path

import aether.log


def test_public_names_are_exactly_these() -> None:
    """The export list changes only on purpose."""
    assert sorted(aether.log.__all__) == [
        "BadMagicError",
        "CHECKPOINTS_KEPT",
        "Checkpoint",
        "CheckpointError",
        "CheckpointFile",
        "CheckpointSeqError",
        "CorruptRecordError",
        "DEFAULT_RETENTION_MARGIN",
        "DEFAULT_SEGMENT_MAX_BYTES",
        "EventLog",
        "Finding",
        "InvalidCheckpoint",
        "LOCK_NAME",
        "LogBrokenError",
        "LogClosedError",
        "LogDamageError",
        "LogError",
        "LogLock",
        "LogLockedError",
        "LogRangeError",
        "LogRecord",
        "LogStatistics",
        "LogWriteError",
        "MAX_BATCH_BYTES",
        "MAX_BATCH_RECORDS",
        "MAX_PAYLOAD",
        "NewestCheckpoint",
        "NotALogError",
        "PayloadTooLargeError",
        "RUN_LOG_NAME",
        "RecordBatch",
        "RecordsMissingError",
        "RecoveryReport",
        "SequenceGapError",
        "Severity",
        "TailCut",
        "TornTailError",
        "VerifyReport",
        "find_log_directory",
        "list_checkpoints",
        "lock_log",
        "open_event_log",
        "read_checkpoint",
        "read_last_seq",
        "read_lock_owner",
        "read_newest_checkpoint",
        "recover_log",
        "scan_log",
        "scan_log_batches",
        "tail_mark",
        "verify_log",
        "wait_lock_log",
    ]


def test_every_public_name_exists_and_reports_this_package() -> None:
    """Each exported name resolves, and classes say they live in aether.log."""
    for name in aether.log.__all__:
        value = getattr(aether.log, name)
        if isinstance(value, type):
            assert value.__module__.startswith("aether.log.")


def test_the_log_does_not_import_the_core() -> None:
    """The log is payload-agnostic: no module of it imports aether.core."""
    package = Path(aether.log.__file__).parent
    imported: set[str] = set()
    for module in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module is not None:
                imported.add(node.module)
    assert "aether.log.errors" in imported
    assert (
        sorted(name for name in imported if name.startswith("aether.") and not name.startswith("aether.log"))
        == []
    )
