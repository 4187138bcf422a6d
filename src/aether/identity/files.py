"""An SVID source that watches a directory of PEM files and sends what it reads to the journal.

The directory's layout (the source reads nothing else):

- `bundle.pem`: the trust bundle, the CA certificates of the trust domain as PEM `CERTIFICATE` blocks.
  The trust domain is the `trust_domain` argument (`--trust-domain`) or, without it, the one the bundle's CA
  certificates name in their URI SAN `spiffe://<trustDomain>` when the source starts; it never changes while the
  source runs.
- `<namespace>_<serviceAccount>.pem`, one per service account: the X.509-SVID of
  `spiffe://<trustDomain>/ns/<namespace>/sa/<serviceAccount>` in one file, its certificate chain (leaf first, then
  the intermediates) and its private key (one unencrypted `PRIVATE KEY`, `EC PRIVATE KEY` or `RSA PRIVATE KEY`
  block). Namespaces and service accounts never hold '_', so the first '_' splits the name.

Names starting with '.' are skipped (Kubernetes' `..data` links, temporary files of atomic writes); any other name
is ignored and listed in `statistics().ignored`. One file per SVID keeps a certificate and its key together: a
writer that replaces the file atomically (writes a temporary file in the directory, then renames it over the old
one) never shows the source a new certificate with the old key. A file written in place may be read half-written;
that folds into a rejection, lifted when the next poll reads it whole.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import attrs
import trio

from aether.core.events import (
    Event,
    Svid,
    SvidRemoved,
    SvidRotated,
    TrustBundle,
    TrustBundleRemoved,
    TrustBundleRotated,
)
from aether.core.validation import service_key_problem, trust_domain_problem
from aether.core.values import Redacted
from aether.identity.errors import SvidDirectoryError, TrustDomainError
from aether.identity.pem import bundle_from_pem, bundle_trust_domains, svid_from_pem
from aether.identity.x509 import report_http3
from aether.sync import LatestValue

BUNDLE_FILE = "bundle.pem"
"""The name of the trust bundle's file."""

SVID_SUFFIX = ".pem"
"""How the name of an SVID's file ends."""

SOURCE = "identity"
"""The `source` of the events this source sends."""

POLL_INTERVAL = 1.0
"""Seconds between two reads of the directory: SVIDs rotate in hours, and a second keeps a file swapped by hand
prompt while a node's few small files cost next to nothing to read."""


def svid_file_name(owner: str) -> str:
    """Return the name of the file of the SVID of service account `owner` (`<namespace>/<serviceAccount>`)."""
    namespace, _, account = owner.partition("/")
    return f"{namespace}_{account}{SVID_SUFFIX}"


def owner_of_file(name: str) -> str | None:
    """Return the service account `<namespace>/<serviceAccount>` that file `name` holds the SVID of, or None."""
    if name.startswith(".") or not name.endswith(SVID_SUFFIX):
        return None
    namespace, underscore, account = name.removesuffix(SVID_SUFFIX).partition("_")
    owner = f"{namespace}/{account}"
    if not underscore or service_key_problem(owner) is not None:
        return None
    return owner


def spiffe_id_of(owner: str, *, trust_domain: str) -> str:
    """Return the SPIFFE ID of service account `owner` (`<namespace>/<serviceAccount>`) in `trust_domain`."""
    namespace, _, account = owner.partition("/")
    return f"spiffe://{trust_domain}/ns/{namespace}/sa/{account}"


@attrs.frozen(kw_only=True)
class SvidFilesStatistics:
    """Counters of an SVID file source."""

    polls: int
    """Reads of the directory completed, the one at start-up included."""
    svid_files: int
    """SVID files the last read found."""
    ignored: tuple[str, ...]
    """Names in the directory that are neither the bundle nor an SVID file, sorted (names starting with '.' aside)."""
    events_sent: int
    """Events sent to the journal."""


class SvidFileSource:
    """What `serve_svid_files` hands to `task_status.started`: its trust domain, statistics, and poll waits."""

    def __init__(self, *, directory: Path, trust_domain: str) -> None:
        self.directory = directory
        """The directory watched."""
        self.trust_domain = trust_domain
        """The trust domain of every SVID and of the bundle."""
        self._seen: dict[str, bytes] = {}
        """The content digest of each file as last sent, by name."""
        self._polls = LatestValue(0)
        """Reads of the directory completed, their events sent."""
        self._events_sent = self._svid_files = 0
        self._ignored: tuple[str, ...] = ()

    def statistics(self) -> SvidFilesStatistics:
        """Return the source's counters."""
        return SvidFilesStatistics(
            polls=self._polls.value,
            svid_files=self._svid_files,
            ignored=self._ignored,
            events_sent=self._events_sent,
        )

    async def wait_polls(self, count: int) -> None:
        """Block until `count` reads of the directory have completed, their events sent (start-up's is the first)."""
        await self._polls.wait_value(lambda polls: polls >= count)

    async def _publish(
        self, listing: _Listing, *, send: trio.MemorySendChannel[Event], observed_at: int
    ) -> None:
        """Send an event for each file that appeared, changed or disappeared since the last read."""
        for event in _events(
            listing.files, self._seen, trust_domain=self.trust_domain, observed_at=observed_at
        ):
            await send.send(event)
            self._events_sent += 1
        self._seen = {name: read.digest for name, read in listing.files.items()}
        self._svid_files = sum(1 for name in listing.files if name != BUNDLE_FILE)
        self._ignored = listing.ignored
        self._polls.set(self._polls.value + 1)


async def serve_svid_files(
    directory: Path,
    *,
    send: trio.MemorySendChannel[Event],
    poll_interval: float = POLL_INTERVAL,
    trust_domain: str | None = None,
    clock: Callable[[], int] = time.time_ns,
    task_status: trio.TaskStatus[SvidFileSource] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Send the trust bundle and the SVIDs of `directory` to `send`, then every change to them, until cancelled.

    At start-up the source reads the directory and sends `TrustBundleRotated` and one `SvidRotated` per SVID file
    (sorted by name), then calls `task_status.started(source)`. Every `poll_interval` seconds it reads the directory
    again and sends `TrustBundleRotated` or `SvidRotated` for a file whose content changed, `TrustBundleRemoved` or
    `SvidRemoved` for one that is gone, and nothing for a read that found nothing new. Events are stamped with
    `clock()` (ns since the epoch) once per read.

    Args:
        directory: The directory in the layout of this module's docstring; one that does not exist holds no files.
        send: Where events go (`Journal.sender()`).
        poll_interval: Seconds between two reads.
        trust_domain: The trust domain; without it, the one the CA certificates of `bundle.pem` name.
        clock: The wall clock, in nanoseconds since the epoch.
        task_status: Receives the `SvidFileSource` once the first read's events are sent.

    Resource handling:
        The source owns `send` and closes it when it ends. Files are read in a worker thread, all of a read at once.

    Error handling:
        Bad material never raises: an SVID or bundle that does not parse, names another identity, has a key that
        does not match or expired is sent with what the source found (`Svid.problem`, `Svid.leaf_spiffe_id`,
        `Svid.not_after`, `TrustBundle.problem`), and the reducer rejects it while the one in force stays.
        A file that cannot be read is sent with the reason as its problem.

    Raises:
        TrustDomainError: `trust_domain` is malformed, or none was given and `bundle.pem` is missing, cannot be
            read or does not name exactly one trust domain (at start-up only).
        SvidDirectoryError: `directory` exists but cannot be listed.
    """
    async with send:
        listing = await trio.to_thread.run_sync(_read_directory, directory)
        source = SvidFileSource(
            directory=directory, trust_domain=_settle_trust_domain(directory, listing, given=trust_domain)
        )
        await source._publish(listing, send=send, observed_at=clock())
        task_status.started(source)
        while True:
            await trio.sleep(poll_interval)
            listing = await trio.to_thread.run_sync(_read_directory, directory)
            await source._publish(listing, send=send, observed_at=clock())


@attrs.frozen(kw_only=True)
class _FileRead:
    content: bytes = b""
    error: str = ""
    """Why the file could not be read, or empty."""
    digest: bytes
    """What tells two reads apart: the hash of the content, or of the error."""


@attrs.frozen(kw_only=True)
class _Listing:
    files: Mapping[str, _FileRead]
    """The bundle and the SVID files, by name."""
    ignored: tuple[str, ...]


def _read_directory(directory: Path) -> _Listing:
    """Read the files of the layout in `directory` (blocking: run it in a worker thread)."""
    try:
        with os.scandir(directory) as entries:
            names = sorted(entry.name for entry in entries if not entry.name.startswith("."))
    except FileNotFoundError:
        return _Listing(files={}, ignored=())
    except OSError as exc:
        raise SvidDirectoryError(directory, reason=_describe(exc)) from exc
    files: dict[str, _FileRead] = {}
    ignored: list[str] = []
    for name in names:
        if name != BUNDLE_FILE and owner_of_file(name) is None:
            ignored.append(name)
            continue
        try:
            content = (directory / name).read_bytes()
        except FileNotFoundError:
            continue  # removed between the listing and the read: it is gone
        except OSError as exc:
            error = _describe(exc)
            files[name] = _FileRead(error=error, digest=hashlib.sha256(b"error\0" + error.encode()).digest())
        else:
            files[name] = _FileRead(content=content, digest=hashlib.sha256(content).digest())
    return _Listing(files=files, ignored=tuple(ignored))


def _describe(exc: OSError) -> str:
    return f"{type(exc).__name__}: {exc.strerror or exc}"


def _settle_trust_domain(directory: Path, listing: _Listing, *, given: str | None) -> str:
    domain = given if given is not None else _bundle_trust_domain(directory, listing)
    problem = trust_domain_problem(domain)
    if problem is not None:
        raise TrustDomainError(directory, reason=problem)
    return domain


def _bundle_trust_domain(directory: Path, listing: _Listing) -> str:
    read = listing.files.get(BUNDLE_FILE)
    if read is None:
        raise TrustDomainError(directory, reason=f"no trust domain given and {BUNDLE_FILE!r} is missing")
    if read.error:
        reason = f"no trust domain given and {BUNDLE_FILE!r} cannot be read ({read.error})"
        raise TrustDomainError(directory, reason=reason)
    domains = bundle_trust_domains(read.content)
    if len(domains) != 1:
        reason = (
            f"no trust domain given and the CA certificates of {BUNDLE_FILE!r} must name exactly one"
            f" in a URI SAN 'spiffe://<trustDomain>' (got {list(domains)!r})"
        )
        raise TrustDomainError(directory, reason=reason)
    return domains[0]


def _events(
    files: Mapping[str, _FileRead], seen: Mapping[str, bytes], *, trust_domain: str, observed_at: int
) -> list[Event]:
    """Return the events of going from the files `seen` (digests by name) to `files`: the bundle first."""
    events: list[Event] = []
    for name in sorted(files.keys() | seen.keys(), key=lambda name: (name != BUNDLE_FILE, name)):
        read = files.get(name)
        if read is None:
            events.append(_removal(name, trust_domain=trust_domain, observed_at=observed_at))
        elif read.digest != seen.get(name):
            events.append(_rotation(name, read, trust_domain=trust_domain, observed_at=observed_at))
    return events


def _rotation(name: str, read: _FileRead, *, trust_domain: str, observed_at: int) -> Event:
    unreadable = f"the file cannot be read ({read.error})"
    if name == BUNDLE_FILE:
        if read.error:
            bundle = TrustBundle(trust_domain=trust_domain, bundle_pem=b"", problem=unreadable)
        else:
            bundle = bundle_from_pem(read.content, trust_domain=trust_domain)
        return TrustBundleRotated(observed_at=observed_at, source=SOURCE, bundle=bundle)
    spiffe_id = _spiffe_id_of_file(name, trust_domain=trust_domain)
    if read.error:
        svid = Svid(spiffe_id=spiffe_id, cert_chain_pem=b"", private_key=Redacted(b""), problem=unreadable)
    else:
        svid = svid_from_pem(read.content, spiffe_id=spiffe_id)
    return SvidRotated(observed_at=observed_at, source=SOURCE, svid=report_http3(svid))


def _removal(name: str, *, trust_domain: str, observed_at: int) -> Event:
    if name == BUNDLE_FILE:
        return TrustBundleRemoved(observed_at=observed_at, source=SOURCE, trust_domain=trust_domain)
    spiffe_id = _spiffe_id_of_file(name, trust_domain=trust_domain)
    return SvidRemoved(observed_at=observed_at, source=SOURCE, spiffe_id=spiffe_id)


def _spiffe_id_of_file(name: str, *, trust_domain: str) -> str:
    owner = owner_of_file(name)
    assert owner is not None, f"file {name!r} was listed as an SVID file but names no service account"
    return spiffe_id_of(owner, trust_domain=trust_domain)
