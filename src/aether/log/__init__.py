"""The durable, append-only event log: framed, checksummed segments, group commit, recovery, checkpoints.

Payloads are opaque bytes; encoding events is another layer's job.
"""

from __future__ import annotations

from aether.log.checkpoint import (
    Checkpoint,
    CheckpointFile,
    InvalidCheckpoint,
    NewestCheckpoint,
    list_checkpoints,
    read_checkpoint,
    read_newest_checkpoint,
)
from aether.log.errors import (
    BadMagicError,
    CheckpointError,
    CheckpointSeqError,
    CorruptRecordError,
    LogBrokenError,
    LogClosedError,
    LogDamageError,
    LogError,
    LogLockedError,
    LogRangeError,
    LogWriteError,
    NotALogError,
    PayloadTooLargeError,
    RecordsMissingError,
    SequenceGapError,
    TornTailError,
)
from aether.log.frame import MAX_PAYLOAD
from aether.log.layout import LOCK_NAME, RUN_LOG_NAME, find_log_directory
from aether.log.lock import LogLock, lock_log, read_lock_owner, wait_lock_log
from aether.log.reader import read_last_seq, scan_log, scan_log_batches, tail_mark
from aether.log.recovery import RecoveryReport, TailCut, recover_log
from aether.log.retention import CHECKPOINTS_KEPT, DEFAULT_RETENTION_MARGIN
from aether.log.segment import LogRecord, RecordBatch
from aether.log.verify import Finding, Severity, VerifyReport, verify_log
from aether.log.writer import (
    DEFAULT_SEGMENT_MAX_BYTES,
    MAX_BATCH_BYTES,
    MAX_BATCH_RECORDS,
    EventLog,
    LogStatistics,
    open_event_log,
)

__all__ = [
    "CHECKPOINTS_KEPT",
    "DEFAULT_RETENTION_MARGIN",
    "DEFAULT_SEGMENT_MAX_BYTES",
    "LOCK_NAME",
    "MAX_BATCH_BYTES",
    "MAX_BATCH_RECORDS",
    "MAX_PAYLOAD",
    "RUN_LOG_NAME",
    "BadMagicError",
    "Checkpoint",
    "CheckpointError",
    "CheckpointFile",
    "CheckpointSeqError",
    "CorruptRecordError",
    "EventLog",
    "Finding",
    "InvalidCheckpoint",
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
    "NewestCheckpoint",
    "NotALogError",
    "PayloadTooLargeError",
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
