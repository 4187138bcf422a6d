"""Exceptions raised by the identity sources.

Every exception keeps structured fields and builds its message in ``__str__``. Bad identity material never raises:
it folds into a rejection (see `aether.identity.files`); these are for a source that cannot run at all.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["IdentityError", "SvidDirectoryError", "TrustDomainError"]


class IdentityError(Exception):
    """Root of every exception the identity sources raise.

    The tree::

        IdentityError
        ├── TrustDomainError    (also ValueError) the source cannot settle on a trust domain at start-up
        └── SvidDirectoryError  (also OSError) the SVID directory cannot be listed
    """


class TrustDomainError(IdentityError, ValueError):
    """The trust domain given is malformed, or none was given and the trust bundle does not name exactly one."""

    def __init__(self, directory: Path, *, reason: str) -> None:
        super().__init__(directory, reason)
        self.directory = directory
        """The SVID directory."""
        self.reason = reason
        """Why no trust domain could be settled on, in words."""

    def __str__(self) -> str:
        return f"svid directory {str(self.directory)!r}: {self.reason}"


class SvidDirectoryError(IdentityError, OSError):
    """The SVID directory exists but cannot be listed (not a directory, no permission, an I/O error).

    Chained (``from``) to the ``OSError`` that caused it. A directory that does not exist is not an error: it holds
    no files.
    """

    def __init__(self, directory: Path, *, reason: str) -> None:
        super().__init__(directory, reason)
        self.directory = directory
        """The SVID directory."""
        self.reason = reason
        """What went wrong, in words."""

    def __str__(self) -> str:
        return f"svid directory {str(self.directory)!r} cannot be listed: {self.reason}"
