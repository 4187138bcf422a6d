"""One writer per log: the owner holds an exclusive `flock` on the directory's `LOCK` file, which names its pid.

The kernel releases the lock when the owner's last descriptor closes, so a killed owner (`kill -9`, OOM) frees the
log at once, and a standby waiting on the lock takes over the moment it is free. Readers (`aether log replay`,
a standby warming up) take no lock: they read only records a writer has completed.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import trio

from aether.log.errors import LogLockedError
from aether.log.layout import (
    DIRECTORY_MODE,
    FILE_MODE,
    LOCK_NAME,
    check_log_directory,
    check_log_or_empty,
    fsync_directory,
)

__all__ = ["LogLock", "lock_log", "read_lock_owner", "wait_lock_log"]

_PID_BYTES = 32
"""A pid in decimal and a newline fit many times over; the owner's lock file holds nothing else."""


class LogLock:
    """The exclusive lock on a log directory, held until `release()` (or until the process ends)."""

    def __init__(self, directory: Path, descriptor: int) -> None:
        self.directory = directory
        """The log directory."""
        self._descriptor: int | None = descriptor

    @property
    def held(self) -> bool:
        """Whether this lock is still held (not released)."""
        return self._descriptor is not None

    def release(self) -> None:
        """Release the lock (idempotent); another process may then own the log."""
        if self._descriptor is not None:
            # The pid stays in the file: a lock file names its last owner, and only a held lock makes it the owner.
            os.close(self._descriptor)
            self._descriptor = None


def read_lock_owner(directory: Path) -> int | None:
    """Return the pid the lock file of `directory` names (its current or last owner), or None without one."""
    try:
        with open(directory / LOCK_NAME, "rb") as file:
            text = file.read(_PID_BYTES).strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() else None


def lock_log(directory: Path, *, create: bool = True) -> LogLock:
    """Take the lock on the log in `directory` now, and write this process's pid into it.

    Args:
        directory: The log directory.
        create: Make the directory if it is missing (the log is then created by its opener).

    Raises:
        LogLockedError: Another process holds it (the error names its pid).
        NotALogError: `directory` is neither a log nor empty (or, without `create`, missing): no file is made.
        OSError: The directory or the lock file cannot be created.
    """
    descriptor = _open_lock_file(directory, create=create)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise LogLockedError(directory, owner_pid=read_lock_owner(directory)) from None
    except BaseException:
        os.close(descriptor)
        raise
    return _owned(directory, descriptor)


async def wait_lock_log(directory: Path) -> LogLock:
    """Wait until the lock on the log in `directory` is free, take it, and write this process's pid into it.

    Raises:
        NotALogError: As `lock_log`.

    Resource handling:
        The wait blocks in `flock` in a worker thread, so it returns the moment the owner's lock goes. If this
        task is cancelled meanwhile, the thread is abandoned and closes its descriptor when its `flock` returns:
        a cancelled wait never keeps the lock.
    """
    descriptor = await trio.to_thread.run_sync(_open_lock_file, directory)
    # Invariant: exactly one side closes `descriptor` when the wait does not return: the thread if it is still in
    # `flock` when the task gives up (it was abandoned), else the task.
    guard = threading.Lock()
    thread_done = abandoned = False

    def wait() -> None:
        nonlocal thread_done
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        finally:
            with guard:
                thread_done = True
                if abandoned:
                    os.close(descriptor)

    returned = False
    try:
        await trio.to_thread.run_sync(wait, abandon_on_cancel=True)
        returned = True
    finally:
        if not returned:
            with guard:
                if thread_done:
                    os.close(descriptor)
                else:
                    abandoned = True
    return _owned(directory, descriptor)


def _open_lock_file(directory: Path, *, create: bool = True) -> int:
    # Checked before the lock file is made: a foreign directory, or a missing one without `create`, stays as it is.
    if create:
        check_log_or_empty(directory)
    else:
        check_log_directory(directory)
    if not directory.exists():
        directory.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)
        fsync_directory(directory.parent)
    return os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)


def _owned(directory: Path, descriptor: int) -> LogLock:
    """Write this process's pid into the held lock file (what a refused second start names)."""
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
    return LogLock(directory, descriptor)
