"""Tests for the writer: group commit, rollover, reopen, failures, checkpoints and retention."""

from __future__ import annotations

import errno
import re
import resource
import signal
import stat
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import trio
import trio.testing

from aether.log import (
    MAX_PAYLOAD,
    Checkpoint,
    CheckpointSeqError,
    CorruptRecordError,
    LogBrokenError,
    LogClosedError,
    LogStatistics,
    LogWriteError,
    NotALogError,
    PayloadTooLargeError,
    TailCut,
    list_checkpoints,
    open_event_log,
    read_newest_checkpoint,
    scan_log,
    verify_log,
    writer,
)
from aether.log.active_segment import ActiveSegment, write_batch
from aether.log.layout import list_segment_files

from .helpers import build_log, flip_byte, frame_offsets, names, payload, snapshot


def _read(directory: Path, from_seq: int = 1) -> list[tuple[int, bytes]]:
    return [(record.seq, record.payload) for record in scan_log(directory, from_seq=from_seq)]


async def test_appends_round_trip(tmp_path: Path) -> None:
    """Appended payloads read back in order with the seqs append returned."""
    directory = tmp_path / "log"
    async with open_event_log(directory) as log:
        assert log.recovery.created
        assert await log.append(b"first") == 1
        assert await log.append_many([b"second", b"", b"fourth"]) == range(2, 5)
        assert await log.append_many([]) == range(5, 5)
        assert log.last_seq == 4
        records = await trio.to_thread.run_sync(lambda: list(log.read(from_seq=2)))
        assert [(record.seq, record.payload) for record in records] == [
            (2, b"second"),
            (3, b""),
            (4, b"fourth"),
        ]
    assert _read(directory) == [(1, b"first"), (2, b"second"), (3, b""), (4, b"fourth")]
    assert verify_log(directory).ok
    segment = directory / "segments" / "00000000000000000001.seg"
    assert stat.S_IMODE(segment.stat().st_mode) == 0o600
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700


async def test_statistics_count_batches_fsyncs_and_bytes(tmp_path: Path) -> None:
    """One sequential append is one batch, one write and one fsync."""
    async with open_event_log(tmp_path) as log:
        await log.append(b"a" * 10)
        await log.append_many([b"b" * 20, b"c" * 30])
        assert log.statistics() == LogStatistics(
            appends=3,
            batches=2,
            fsyncs=2,
            bytes_written=3 * 16 + 60,
            rollovers=0,
            checkpoints_written=0,
            segments_deleted=0,
            segments=1,
            last_seq=3,
            appenders_waiting=0,
        )


async def test_group_commit_batches_concurrent_appends(tmp_path: Path) -> None:
    """256 concurrent appenders share fsyncs: far fewer batches than appends, every seq exactly once."""
    seqs: list[int] = []

    async def appender(index: int) -> None:
        for round_ in range(4):
            seqs.append(await log.append(f"{index}/{round_}".encode()))

    async with open_event_log(tmp_path) as log:
        async with trio.open_nursery() as nursery:
            for index in range(256):
                nursery.start_soon(appender, index)
        statistics = log.statistics()
    assert sorted(seqs) == list(range(1, 1025))
    assert statistics.appends == 1024
    assert statistics.fsyncs == statistics.batches
    assert statistics.batches <= 1024 // 16
    assert sorted(payload for _, payload in _read(tmp_path)) == sorted(
        f"{index}/{round_}".encode() for index in range(256) for round_ in range(4)
    )


async def test_append_many_gets_consecutive_seqs_among_concurrent_appends(tmp_path: Path) -> None:
    """An append_many batch is never interleaved with other appends."""
    ranges: list[range] = []

    async def appender(index: int) -> None:
        ranges.append(await log.append_many([bytes([index])] * 5))

    async with open_event_log(tmp_path) as log, trio.open_nursery() as nursery:
        for index in range(50):
            nursery.start_soon(appender, index)
    by_seq = dict(_read(tmp_path))
    for seqs in ranges:
        assert len(seqs) == 5
        assert len({by_seq[seq] for seq in seqs}) == 1


async def test_appenders_wait_for_room_while_a_full_batch_is_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While one batch is written, the next fills up to MAX_BATCH_RECORDS and later appenders wait (counted in
    `appenders_waiting`) for the batch after it; an append_many larger than the bound goes out whole."""
    monkeypatch.setattr(writer, "MAX_BATCH_RECORDS", 3)
    release = threading.Event()
    held = write_batch

    def write_when_released(
        active: ActiveSegment, *, first_seq: int, payloads: Sequence[bytes]
    ) -> ActiveSegment:
        release.wait(timeout=30)
        return held(active, first_seq=first_seq, payloads=payloads)

    monkeypatch.setattr(writer, "write_batch", write_when_released)
    seqs: dict[bytes, range] = {}

    async def appender(name: bytes, count: int) -> None:
        if count == 1:
            seq = await log.append(name)
            seqs[name] = range(seq, seq + 1)
        else:
            seqs[name] = await log.append_many([name] * count)

    async with open_event_log(tmp_path) as log:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(appender, b"first", 1)
            await trio.testing.wait_all_tasks_blocked()  # the committer holds [first]
            for index in range(8):
                nursery.start_soon(appender, b"one-%d" % index, 1)
            try:
                await trio.testing.wait_all_tasks_blocked()
                assert log.statistics().appenders_waiting == 5  # 3 of the 8 fill the pending batch
            finally:
                release.set()
        assert (await log.append_many([b"burst"] * 5)) == range(10, 15)
        statistics = log.statistics()
    assert sorted(seq for span in seqs.values() for seq in span) == list(range(1, 10))
    assert statistics.appends == 14
    assert statistics.batches == 5  # [first], 3, 3, 2, then the burst of 5 whole
    assert statistics.appenders_waiting == 0
    assert {payload: seq for seq, payload in _read(tmp_path)}.keys() == {*seqs, b"burst"}


async def test_an_append_cancelled_before_it_starts_appends_nothing(tmp_path: Path) -> None:
    """A call made in a cancelled scope raises Cancelled and adds nothing to the log."""
    async with open_event_log(tmp_path) as log:
        with trio.CancelScope() as scope:
            scope.cancel()
            await log.append(b"never")
        with trio.CancelScope() as scope:
            scope.cancel()
            await log.append_many([b"never", b"never"])
        assert await log.append(b"kept") == 1
    assert _read(tmp_path) == [(1, b"kept")]


async def test_seqs_continue_across_rollover_and_reopen(tmp_path: Path) -> None:
    """Segments roll over at the size limit, are named by first seq, and a reopen continues the seqs."""
    for session in range(3):
        async with open_event_log(tmp_path, segment_max_bytes=256) as log:
            assert log.recovery.last_seq == session * 20
            for seq in range(session * 20 + 1, session * 20 + 21):
                assert await log.append(payload(seq)) == seq
            assert log.statistics().rollovers > 0
    assert _read(tmp_path) == [(seq, payload(seq)) for seq in range(1, 61)]
    segments = list_segment_files(tmp_path)
    assert len(segments) > 3
    for segment in segments:
        assert next(iter(scan_log(tmp_path, from_seq=segment.first_seq))).segment == segment.path
    assert verify_log(tmp_path).ok


async def test_appending_never_rewrites_a_byte(tmp_path: Path) -> None:
    """The bytes of every segment before an append are a prefix of its bytes after."""
    before: dict[str, bytes] = {}
    for session in range(2):
        async with open_event_log(tmp_path, segment_max_bytes=300) as log:
            for round_ in range(15):
                await log.append_many([payload(round_)] * (1 + round_ % 3))
                after = snapshot(tmp_path)
                for name, content in before.items():
                    assert after[name].startswith(content), (session, round_, name)
                before = after


async def test_open_cuts_a_torn_tail_and_continues_after_it(tmp_path: Path) -> None:
    """Opening runs recovery: the torn tail is cut and the next append reuses its seq."""
    [path] = build_log(tmp_path, [5])
    offsets = frame_offsets(path)
    path.write_bytes(path.read_bytes()[:-3])
    async with open_event_log(tmp_path) as log:
        assert log.recovery.cut == TailCut(
            segment=path,
            offset=offsets[-2],
            bytes_cut=offsets[-1] - offsets[-2] - 3,
            reason=f"payload length {len(payload(5))} runs past the end of the file"
            f" ({len(payload(5)) - 3} bytes follow the header)",
            segment_deleted=False,
        )
        assert await log.append(b"new five") == 5
    assert _read(tmp_path, from_seq=4) == [(4, payload(4)), (5, b"new five")]


async def test_open_refuses_a_corrupt_log_and_modifies_nothing(tmp_path: Path) -> None:
    """Mid-log corruption stops the open with the file and offset; no byte changes."""
    [path] = build_log(tmp_path, [5])
    flip_byte(path, frame_offsets(path)[2] + 18)
    before = snapshot(tmp_path)
    with pytest.raises(
        CorruptRecordError, match=rf"^{re.escape(f'{path} at offset {frame_offsets(path)[2]}: ')}"
    ):
        async with open_event_log(tmp_path):
            pass  # pragma: no cover - the open fails
    assert snapshot(tmp_path) == before


async def test_open_without_create_needs_an_existing_log(tmp_path: Path) -> None:
    """create=False never makes a log."""
    message = re.escape(f"{tmp_path / 'log'}: not an aether event log (directory does not exist)")
    with pytest.raises(NotALogError, match=rf"^{message}$"):
        async with open_event_log(tmp_path / "log", create=False):
            pass  # pragma: no cover - the open fails
    assert not (tmp_path / "log").exists()


async def test_open_refuses_a_foreign_directory(tmp_path: Path) -> None:
    """A non-empty directory without the marker is not made into a log."""
    (tmp_path / "data.db").write_bytes(b"x")
    with pytest.raises(NotALogError):
        async with open_event_log(tmp_path):
            pass  # pragma: no cover - the open fails
    assert names(tmp_path) == ["data.db"]


async def test_a_closed_log_refuses_appends(tmp_path: Path) -> None:
    """After the block, appends and checkpoints raise LogClosedError."""
    async with open_event_log(tmp_path) as log:
        await log.append(b"x")
    message = re.escape(f"{tmp_path}: event log is closed")
    with pytest.raises(LogClosedError, match=rf"^{message}$"):
        await log.append(b"y")
    with pytest.raises(LogClosedError, match=rf"^{message}$"):
        await log.write_checkpoint(seq=1, payload=b"")


async def test_an_error_in_the_block_closes_the_log(tmp_path: Path) -> None:
    """An exception leaving the block comes out of the committer's nursery as an ExceptionGroup."""
    with pytest.RaisesGroup(KeyError):
        async with open_event_log(tmp_path) as log:
            await log.append(b"x")
            raise KeyError("boom")
    with pytest.raises(LogClosedError):
        await log.append(b"y")
    assert _read(tmp_path) == [(1, b"x")]


async def test_a_payload_over_the_maximum_is_refused(tmp_path: Path) -> None:
    """A payload larger than MAX_PAYLOAD raises before anything is written."""
    async with open_event_log(tmp_path) as log:
        message = re.escape(f"payload: size must be at most {MAX_PAYLOAD} bytes (got {MAX_PAYLOAD + 1})")
        with pytest.raises(PayloadTooLargeError, match=rf"^{message}$"):
            await log.append_many([b"ok", bytes(MAX_PAYLOAD + 1)])
        assert log.last_seq == 0


async def test_a_payload_must_be_bytes(tmp_path: Path) -> None:
    """Anything but bytes is refused before anything is written."""
    async with open_event_log(tmp_path) as log:
        with pytest.raises(TypeError, match=r"^payload: must be bytes \(got 'str'\)$"):
            await log.append_many([b"ok", "text"])  # type: ignore[list-item]
        assert log.last_seq == 0


@pytest.fixture
def file_size_limit() -> Iterator[None]:
    """Make writes past a file size fail with EFBIG instead of killing the process with SIGXFSZ."""
    previous_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    previous_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, previous_limit)
        signal.signal(signal.SIGXFSZ, previous_handler)


@pytest.mark.usefixtures("file_size_limit")
async def test_a_failed_write_fails_its_batch_and_breaks_the_log(tmp_path: Path) -> None:
    """Every waiter of the failed batch gets LogWriteError; later appends get LogBrokenError."""
    errors: list[BaseException] = []

    async def appender() -> None:
        try:
            await log.append(b"z" * 100)
        except LogWriteError as error:
            errors.append(error)

    async with open_event_log(tmp_path) as log:
        # A large first record keeps other files the test process writes under the limit.
        await log.append(bytes(2**20))
        size = log.statistics().bytes_written + 16
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 50, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(appender)
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        assert len(errors) == 3
        segment = tmp_path / "segments" / "00000000000000000001.seg"
        for error in errors:
            assert str(error) == f"{segment}: write failed: [Errno 27] File too large"
            assert isinstance(error.__cause__, OSError)
            assert error.__cause__.errno == errno.EFBIG
        assert len({id(error) for error in errors}) == 3
        message = re.escape(f"{tmp_path}: event log refuses appends after a failed write")
        with pytest.raises(LogBrokenError, match=rf"^{message}$") as caught:
            await log.append(b"after")
        assert isinstance(caught.value.__cause__, LogWriteError)
        assert log.last_seq == 1
    async with open_event_log(tmp_path) as log:
        assert log.recovery.cut is not None
        assert log.recovery.cut.bytes_cut == 50
        assert await log.append(b"after reopen") == 2


async def test_checkpoint_and_retention(tmp_path: Path) -> None:
    """A checkpoint deletes only eligible segments and old checkpoints; a reopen still works."""
    async with open_event_log(tmp_path, segment_max_bytes=200, retention_margin=0) as log:
        for seq in range(1, 41):
            await log.append(payload(seq))
        assert [segment.first_seq for segment in list_segment_files(tmp_path)] == [1, 8, 15, 22, 29, 36]
        await log.write_checkpoint(seq=12, payload=b"state 12")
        # Only 1..7 lies wholly at or below 12; 8..14 still holds 13 and 14.
        assert [segment.first_seq for segment in list_segment_files(tmp_path)] == [8, 15, 22, 29, 36]
        await log.write_checkpoint(seq=30, payload=b"state 30")
        # The older kept checkpoint (12) bounds retention, so replay can still start from it.
        assert [segment.first_seq for segment in list_segment_files(tmp_path)] == [8, 15, 22, 29, 36]
        await log.write_checkpoint(seq=35, payload=b"state 35")
        # Now 30 is the older kept checkpoint: 8..14, 15..21 and 22..28 go; 29..35 holds 30 and stays.
        assert [segment.first_seq for segment in list_segment_files(tmp_path)] == [29, 36]
        assert [checkpoint.seq for checkpoint in list_checkpoints(tmp_path)] == [30, 35]
        statistics = log.statistics()
        assert (statistics.checkpoints_written, statistics.segments_deleted, statistics.segments) == (3, 4, 2)
    async with open_event_log(tmp_path, segment_max_bytes=200) as log:
        assert (log.recovery.first_seq, log.recovery.newest_checkpoint_seq) == (29, 35)
        assert await log.append(b"41") == 41
    newest = read_newest_checkpoint(tmp_path)
    assert newest.checkpoint == Checkpoint(seq=35, payload=b"state 35")
    assert [seq for seq, _ in _read(tmp_path, from_seq=31)] == list(range(31, 42))
    assert verify_log(tmp_path).ok


async def test_retention_margin_keeps_records_before_the_checkpoint(tmp_path: Path) -> None:
    """Segments holding any of the last retention_margin records before the checkpoint stay."""
    async with open_event_log(tmp_path, segment_max_bytes=200, retention_margin=10) as log:
        for seq in range(1, 41):
            await log.append(payload(seq))
        await log.write_checkpoint(seq=40, payload=b"state 40")
        # Bound 40 - 10 = 30: 1..7, 8..14, 15..21 and 22..28 go; 29..35 holds 31..35 and stays.
        assert [segment.first_seq for segment in list_segment_files(tmp_path)] == [29, 36]


async def test_checkpoint_seq_must_be_in_the_log(tmp_path: Path) -> None:
    """A checkpoint beyond the last durable seq is refused."""
    async with open_event_log(tmp_path) as log:
        await log.append(b"x")
        message = re.escape(f"{tmp_path}: checkpoint seq must be 0..1 (got 2)")
        with pytest.raises(CheckpointSeqError, match=rf"^{message}$"):
            await log.write_checkpoint(seq=2, payload=b"")
        await log.write_checkpoint(seq=1, payload=b"")


@pytest.mark.usefixtures("file_size_limit")
async def test_a_failed_checkpoint_does_not_break_appends(tmp_path: Path) -> None:
    """A checkpoint that cannot be written fails alone; appends go on."""
    async with open_event_log(tmp_path) as log:
        await log.append(bytes(2**20))
        limit = log.statistics().bytes_written + 16 + 4096
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        checkpoint = tmp_path / "checkpoints" / "00000000000000000001.ckpt"
        message = re.escape(f"{checkpoint}: checkpoint write failed: [Errno 27] File too large")
        with pytest.raises(LogWriteError, match=rf"^{message}$"):
            await log.write_checkpoint(seq=1, payload=bytes(2**21))
        assert await log.append(b"still fine") == 2
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    async with open_event_log(tmp_path) as log:
        assert log.recovery.removed_temporary_files == (checkpoint.with_name(checkpoint.name + ".tmp"),)
        assert log.recovery.newest_checkpoint_seq is None


async def test_open_after_a_crash_during_rollover(tmp_path: Path) -> None:
    """A header-less last segment is deleted on open and the rollover happens again."""
    _, last = build_log(tmp_path, [3, 2])
    torn = last.with_name("00000000000000000006.seg")
    torn.write_bytes(b"AETHSEG")
    async with open_event_log(tmp_path, segment_max_bytes=64) as log:
        assert log.recovery.cut is not None
        assert log.recovery.cut.segment_deleted
        assert await log.append(b"six") == 6
        assert log.statistics().rollovers == 1
    assert [segment.first_seq for segment in list_segment_files(tmp_path)] == [1, 4, 6]
    assert _read(tmp_path, from_seq=5) == [(5, payload(5)), (6, b"six")]


async def test_open_finishes_a_log_whose_creation_stopped_after_the_marker(tmp_path: Path) -> None:
    """A marker without subdirectories is an empty log."""
    (tmp_path / "AETHER-LOG").write_bytes(b"aether event log v1\n")
    async with open_event_log(tmp_path, create=False) as log:
        assert not log.recovery.created
        assert await log.append(b"one") == 1
    assert names(tmp_path) == ["AETHER-LOG", "LOCK", "checkpoints", "segments"]


@pytest.mark.parametrize(
    ("segment_max_bytes", "retention_margin", "message"),
    [
        (0, 0, "segment_max_bytes: must be at least 1 (got 0)"),
        (1, -1, "retention_margin: must be at least 0 (got -1)"),
    ],
)
async def test_open_checks_its_options(
    tmp_path: Path, segment_max_bytes: int, retention_margin: int, message: str
) -> None:
    """Nonsense sizes are refused before anything is touched."""
    with pytest.raises(ValueError, match=rf"^{re.escape(message)}$"):
        async with open_event_log(
            tmp_path, segment_max_bytes=segment_max_bytes, retention_margin=retention_margin
        ):
            pass  # pragma: no cover - the open fails
    assert names(tmp_path) == []
