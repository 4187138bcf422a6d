"""`aether.log.lock`: one process owns a log; the lock file names its pid; a waiter takes over when it is released."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import trio
import trio.lowlevel

from aether.log import LOCK_NAME, LogLockedError, NotALogError, lock_log, read_lock_owner, wait_lock_log


def test_a_held_log_refuses_a_second_lock_naming_the_owner_pid(tmp_path: Path) -> None:
    """The lock file names the owner; a second `lock_log` (even in the same process) raises with that pid."""
    directory = tmp_path / "log"
    owner = lock_log(directory)

    message = (
        f"{directory}: the log is owned by pid {os.getpid()} (it holds the lock on {directory}/LOCK); "
        "stop it first, or start with --standby to take over when it exits"
    )
    with pytest.raises(LogLockedError, match=rf"^{re.escape(message)}$") as refused:
        lock_log(directory)

    assert refused.value.owner_pid == read_lock_owner(directory) == os.getpid()
    owner.release()
    owner.release()  # idempotent
    assert not owner.held
    lock_log(directory).release()


def test_a_foreign_or_missing_directory_gets_no_lock_file(tmp_path: Path) -> None:
    """The lock is taken on a log or where one can be made: a foreign directory is left as it is."""
    (tmp_path / "data.db").write_bytes(b"x")
    with pytest.raises(NotALogError):
        lock_log(tmp_path)
    with pytest.raises(NotALogError):
        lock_log(tmp_path / "missing", create=False)

    assert sorted(path.name for path in tmp_path.iterdir()) == ["data.db"]
    assert read_lock_owner(tmp_path) is None


async def test_a_waiter_takes_the_lock_the_moment_it_is_released(tmp_path: Path) -> None:
    """`wait_lock_log` returns once the owner releases, and then owns the log."""
    owner = lock_log(tmp_path)
    taken: list[bool] = []

    async def waiter() -> None:
        lock = await wait_lock_log(tmp_path)
        taken.append(lock.held)
        lock.release()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await (
            trio.lowlevel.checkpoint()
        )  # the waiter is in its flock (or about to be): either way it must not have the lock
        assert taken == []
        owner.release()
    assert taken == [True]
    assert (tmp_path / LOCK_NAME).read_text() == f"{os.getpid()}\n"


async def test_a_cancelled_wait_never_keeps_the_lock(tmp_path: Path) -> None:
    """A waiter cancelled while the log is held leaves nothing behind: the next waiter gets the lock on release."""
    owner = lock_log(tmp_path)
    with trio.move_on_after(0.05):
        await wait_lock_log(tmp_path)
    owner.release()

    with trio.fail_after(10):
        lock = await wait_lock_log(tmp_path)
    assert lock.held
    lock.release()
