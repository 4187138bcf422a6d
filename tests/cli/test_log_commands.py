"""`aether log replay|inspect|verify|recover` on real logs: output, determinism, and every kind of bad input."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aether.cli import main
from aether.core.events import MeshConfig, MeshConfigUpdated, encode_event
from aether.log.frame import FRAME_HEADER_SIZE, SEGMENT_HEADER_SIZE, encode_frames, encode_segment_header
from aether.log.layout import create_log_directory, segment_path

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "sample-log"


def _files(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()
    }


def _event(index: int) -> bytes:
    config = MeshConfig(mesh_domain=f"mesh{index}.internal", trust_domain="example.org")
    return encode_event(MeshConfigUpdated(observed_at=index, source="test", config=config))


def _log(directory: Path, payloads: list[bytes]) -> Path:
    """Write a one-segment log holding `payloads` (frame by frame, bypassing the writer)."""
    create_log_directory(directory)
    segment = segment_path(directory, 1)
    segment.write_bytes(encode_segment_header(1) + encode_frames(first_seq=1, payloads=payloads))
    return segment


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_replay_of_the_sample_log_prints_its_summary_and_digest(capsys: pytest.CaptureFixture[str]) -> None:
    """`aether log replay` folds every record of the shipped sample log (from its checkpoint)."""
    status, out, err = _run(capsys, "log", "replay", str(SAMPLE))
    assert (status, err) == (0, "")
    assert "folded            11 records from checkpoint at seq 11\nseq               22\n" in out
    assert "  seq 20 InvalidSpec HTTPRoute/shop/Cart_Retry: " in out


def test_the_shipped_sample_log_is_what_the_script_writes(tmp_path: Path) -> None:
    """examples/make_sample_log.py regenerates examples/sample-log byte for byte."""
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "make_sample_log.py"), "--output", str(tmp_path / "log")],
        check=True,
        capture_output=True,
    )
    assert _files(tmp_path / "log") == _files(SAMPLE)


@pytest.mark.parametrize(
    "argv",
    [
        ["log", "replay", str(SAMPLE)],
        ["log", "replay", str(SAMPLE), "--format", "json"],
        ["log", "replay", str(SAMPLE), "--until", "7", "--no-checkpoint"],
        ["log", "inspect", str(SAMPLE)],
        ["log", "verify", str(SAMPLE)],
    ],
)
def test_output_is_byte_identical_across_processes_and_hash_seeds(argv: list[str]) -> None:
    """Two runs under different PYTHONHASHSEEDs print the same bytes."""
    outputs = [
        subprocess.run(
            [sys.executable, "-m", "aether.cli", *argv],
            check=True,
            capture_output=True,
            env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"},
        ).stdout
        for seed in ("1", "2024")
    ]
    assert outputs[0] == outputs[1]
    assert outputs[0]


def test_replay_until_matches_a_replay_without_checkpoints(capsys: pytest.CaptureFixture[str]) -> None:
    """Replaying to seq 15 from the checkpoint at 11 gives the digest of folding records 1..15."""
    _, with_checkpoint, _ = _run(capsys, "log", "replay", str(SAMPLE), "--until", "15")
    _, without, _ = _run(capsys, "log", "replay", str(SAMPLE), "--until", "15", "--no-checkpoint")
    digest = [line for line in with_checkpoint.splitlines() if line.startswith("digest")]
    assert digest == [line for line in without.splitlines() if line.startswith("digest")]
    assert "folded            4 records from checkpoint at seq 11" in with_checkpoint


def test_a_directory_that_is_not_a_log_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A directory without the marker gets a clear error and exit 1, and is left alone."""
    (tmp_path / "notes.txt").write_text("hello")
    for command in ("replay", "inspect", "verify", "recover"):
        status, _, err = _run(capsys, "log", command, str(tmp_path))
        assert status == 1
        assert err.startswith(f"aether: error: {tmp_path}")
        assert "not an aether event log" in err or "not a log" in err, err
    assert _files(tmp_path) == {"notes.txt": b"hello"}


def test_a_segment_with_a_foreign_magic_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A segment that does not start with the segment magic is named, at offset 0."""
    segment = _log(tmp_path / "log", [_event(1)])
    segment.write_bytes(b"NOTMAGIC" + segment.read_bytes()[8:])
    before = _files(tmp_path)
    for command in ("replay", "inspect", "recover"):
        status, _, err = _run(capsys, "log", command, str(tmp_path / "log"))
        assert status == 1
        assert str(segment) in err, err
        assert "offset 0" in err, err
    status, out, _ = _run(capsys, "log", "verify", str(tmp_path / "log"))
    assert status == 1
    assert f"{segment} at offset 0: corruption:" in out
    assert _files(tmp_path) == before


def _damaged(tmp_path: Path, damage: str) -> tuple[Path, int]:
    """A three-record log damaged in its middle record; returns the segment and the damaged frame's offset."""
    payloads = [_event(1), _event(2), _event(3)]
    segment = _log(tmp_path / "log", payloads)
    data = bytearray(segment.read_bytes())
    offset = SEGMENT_HEADER_SIZE + FRAME_HEADER_SIZE + len(payloads[0])
    if damage == "checksum":
        data[offset + FRAME_HEADER_SIZE] ^= 0xFF
    else:  # a length that points past the end of the segment
        data[offset : offset + 4] = (1_000_000).to_bytes(4, "little")
    segment.write_bytes(bytes(data))
    return segment, offset


@pytest.mark.parametrize("damage", ["checksum", "length"])
def test_damage_in_the_middle_names_the_file_and_offset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    """A bad frame followed by a good one is corruption: every command refuses, naming file and offset."""
    segment, offset = _damaged(tmp_path, damage)
    before = _files(tmp_path)
    for command in ("replay", "inspect", "recover"):
        status, _, err = _run(capsys, "log", command, str(tmp_path / "log"))
        assert status == 1
        assert segment.name in err, err
        assert f"offset {offset}" in err, err
    status, out, _ = _run(capsys, "log", "verify", str(tmp_path / "log"))
    assert status == 1
    assert f"{segment} at offset {offset}: corruption:" in out
    assert _files(tmp_path) == before


def test_a_torn_tail_is_reported_by_verify_and_cut_by_recover(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Verify reports a half-written last record without touching it; recover cuts exactly it."""
    payloads = [_event(1), _event(2)]
    segment = _log(tmp_path / "log", payloads)
    whole = segment.read_bytes()
    segment.write_bytes(whole[:-3])
    status, out, _ = _run(capsys, "log", "verify", str(tmp_path / "log"))
    assert status == 1
    assert ": torn tail:" in out
    assert segment.read_bytes() == whole[:-3]
    status, out, _ = _run(capsys, "log", "recover", str(tmp_path / "log"))
    assert status == 0
    cut_at = SEGMENT_HEADER_SIZE + FRAME_HEADER_SIZE + len(payloads[0])
    assert out.startswith(f"{segment}: cut {len(whole) - 3 - cut_at} bytes at offset {cut_at} (")
    assert segment.read_bytes() == whole[:cut_at]
    status, out, _ = _run(capsys, "log", "verify", str(tmp_path / "log"))
    assert (status, out.splitlines()[-1]) == (0, "ok")


def test_an_event_kind_from_a_newer_version_is_named_with_file_and_offset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sound frame whose event kind this version does not know stops replay with file, offset and field."""
    unknown = _event(1)[:2] + bytes([0x82, 0x06, 0x00])  # observed_at, then oneof field 96 (empty)
    segment = _log(tmp_path / "log", [_event(1), unknown])
    offset = SEGMENT_HEADER_SIZE + FRAME_HEADER_SIZE + len(_event(1))
    before = _files(tmp_path)
    status, _, err = _run(capsys, "log", "replay", str(tmp_path / "log"))
    assert status == 1
    assert err == (
        f"aether: error: {segment} at offset {offset}: record 2: cannot decode event record: unknown event kind"
        " (oneof field numbers [96]); it was probably written by a newer version of aether\n"
    )
    status, out, _ = _run(capsys, "log", "verify", str(tmp_path / "log"))
    assert status == 1
    assert f"{segment} at offset {offset}: record 2: cannot decode event record" in out
    assert _files(tmp_path) == before


def test_replay_after_recovery_of_a_copy_leaves_the_original_untouched(tmp_path: Path) -> None:
    """Read-only commands never write: the sample log's bytes are unchanged after every command ran on it."""
    copy = tmp_path / "sample"
    shutil.copytree(SAMPLE, copy)
    before = _files(copy)
    for command in ("replay", "inspect", "verify"):
        assert main(["log", command, str(copy)]) == 0
    assert _files(copy) == before


@pytest.mark.parametrize(
    "argv",
    [
        ["replay"],
        ["replay", "--format", "snapshot"],
        ["replay", "--explain", "catalog.shop.aether.internal"],
        ["inspect"],
        ["verify"],
        ["recover"],
    ],
)
def test_a_run_directory_is_read_through_its_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """`aether demo --log-dir DIR` leaves the log at DIR/log: every log command given DIR reads DIR/log."""
    shutil.copytree(SAMPLE, tmp_path / "run" / "log")
    command, *options = argv
    through_run = _run(capsys, "log", command, str(tmp_path / "run"), *options)
    direct = _run(capsys, "log", command, str(tmp_path / "run" / "log"), *options)
    assert through_run == direct
    assert through_run[1], through_run


@pytest.mark.parametrize(
    ("given", "log"),
    [("run", "run/agent-log"), ("run/agent-log/segments", "run/agent-log")],
    ids=["log-one-level-down", "log-one-level-up"],
)
def test_a_directory_one_level_off_the_log_is_refused_naming_the_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], given: str, log: str
) -> None:
    """No log in DIR (nor in DIR/log), but one beside it: the one error line says where the log is."""
    shutil.copytree(SAMPLE, tmp_path / "run" / "agent-log")
    before = _files(tmp_path)
    for command in ("replay", "inspect", "verify", "recover"):
        status, out, err = _run(capsys, "log", command, str(tmp_path / given))
        assert (status, out) == (1, "")
        assert err.startswith(f"aether: error: {tmp_path / given}: not an aether event log ("), err
        assert err.endswith(f"; the log is at {tmp_path / log}\n"), err
        assert err.count("\n") == 1
    assert _files(tmp_path) == before
