"""Tests of `aether.identity.files`: the SVID directory source, on real files, its events folded by the real core.

The source polls every millisecond; a test waits for polls with `wait_polls`, never for time. A change written
while poll N runs may be seen by poll N or N+1, so a test waits for two polls past the write before it looks.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import immutables
import pytest
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
from aether.core.state import Diagnostics, IdentityState, Rejection, RejectionReason
from aether.core.values import Redacted
from aether.identity import (
    SvidDirectoryError,
    SvidFileSource,
    SvidFilesStatistics,
    TrustDomainError,
    owner_of_file,
    serve_svid_files,
    spiffe_id_of,
    svid_file_name,
)
from aether.identity.mint import TestCA, remove_svid, write_bundle, write_svid
from aether.testing import AT, fold_events

TD = "aether.internal"
WEB_ID = f"spiffe://{TD}/ns/shop/sa/web"
DB_ID = f"spiffe://{TD}/ns/shop/sa/db"
CA = TestCA(TD)
WEB = CA.issue(WEB_ID, not_after=AT + 3_600 * 10**9)
DB = CA.issue(DB_ID)
BUNDLE = TrustBundle(trust_domain=TD, bundle_pem=CA.bundle_pem)
TICK = 0.001
"""The poll interval of the tests, in seconds: a test waits for polls, so shorter only means faster."""


def _rotated(svid: Svid) -> SvidRotated:
    return SvidRotated(observed_at=AT, source="identity", svid=svid)


def _bundle_rotated(bundle: TrustBundle = BUNDLE) -> TrustBundleRotated:
    return TrustBundleRotated(observed_at=AT, source="identity", bundle=bundle)


def _drain(receive: trio.MemoryReceiveChannel[Event]) -> list[Event]:
    """Return every event sent so far; the last `receive_nowait` raising WouldBlock proves there is no other."""
    events: list[Event] = []
    while True:
        try:
            events.append(receive.receive_nowait())
        except trio.WouldBlock:
            return events


@asynccontextmanager
async def _watching(
    directory: Path, *, trust_domain: str | None = None
) -> AsyncIterator[tuple[SvidFileSource, trio.MemoryReceiveChannel[Event]]]:
    """Run the source on `directory` for the block, its events buffered on the channel yielded."""
    send, receive = trio.open_memory_channel[Event](100)
    async with trio.open_nursery() as nursery, receive:
        with trio.fail_after(10):
            source: SvidFileSource = await nursery.start(
                functools.partial(
                    serve_svid_files,
                    directory,
                    send=send,
                    poll_interval=TICK,
                    trust_domain=trust_domain,
                    clock=lambda: AT,
                )
            )
        yield source, receive
        nursery.cancel_scope.cancel()


async def _after_two_polls(source: SvidFileSource, receive: trio.MemoryReceiveChannel[Event]) -> list[Event]:
    """Wait until two more polls have completed, then return what they sent."""
    with trio.fail_after(10):
        await source.wait_polls(source.statistics().polls + 2)
    return _drain(receive)


def _directory(tmp_path: Path) -> Path:
    directory = tmp_path / "svids"
    write_bundle(directory, CA.bundle_pem)
    write_svid(directory, owner="shop/web", content=WEB)
    write_svid(directory, owner="shop/db", content=DB)
    return directory


def test_file_names_map_to_service_accounts_and_spiffe_ids() -> None:
    """`<ns>_<sa>.pem` holds the SVID of `<ns>/<sa>`; the bundle, dot files and other names are no SVID files."""
    assert svid_file_name("shop/web") == "shop_web.pem"
    assert owner_of_file("shop_web.pem") == "shop/web"
    assert owner_of_file("shop_web.v2.pem") == "shop/web.v2"
    assert [
        owner_of_file(name) for name in ("bundle.pem", ".shop_web.pem.tmp", "Shop_web.pem", "shop_.pem")
    ] == [None] * 4
    assert [owner_of_file(name) for name in ("shop_web.key", "shop-web.pem", "_web.pem")] == [None] * 3
    assert spiffe_id_of("shop/web", trust_domain=TD) == WEB_ID


async def test_start_up_sends_the_bundle_then_each_svid_by_file_name(tmp_path: Path) -> None:
    """Initial load: TrustBundleRotated, then one SvidRotated per file in name order, before `started`."""
    async with _watching(_directory(tmp_path)) as (source, receive):
        assert _drain(receive) == [_bundle_rotated(), _rotated(DB.svid()), _rotated(WEB.svid())]
        assert source.trust_domain == TD
        assert source.statistics() == SvidFilesStatistics(polls=1, svid_files=2, ignored=(), events_sent=3)


async def test_a_poll_that_finds_nothing_new_sends_nothing(tmp_path: Path) -> None:
    """Two polls over unchanged files, one of them rewritten with the same bytes: no event at all."""
    directory = _directory(tmp_path)
    async with _watching(directory) as (source, receive):
        _drain(receive)
        write_svid(directory, owner="shop/web", content=WEB)
        assert await _after_two_polls(source, receive) == []
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(trio.WouldBlock):
            receive.receive_nowait()
        assert source.statistics().events_sent == 3


async def test_a_rotated_svid_is_sent_once_with_its_new_expiry(tmp_path: Path) -> None:
    """A new certificate for the same service account: exactly one SvidRotated, carrying the new not_after."""
    directory = _directory(tmp_path)
    rotated = CA.issue(WEB_ID, not_after=AT + 7_200 * 10**9)
    async with _watching(directory) as (source, receive):
        _drain(receive)
        write_svid(directory, owner="shop/web", content=rotated)
        assert await _after_two_polls(source, receive) == [_rotated(rotated.svid())]
        assert rotated.not_after == AT + 7_200 * 10**9 != WEB.not_after
        assert await _after_two_polls(source, receive) == []


async def test_a_removed_svid_file_sends_svid_removed(tmp_path: Path) -> None:
    """Deleting `shop_db.pem` sends SvidRemoved for db's SPIFFE ID, once."""
    directory = _directory(tmp_path)
    async with _watching(directory) as (source, receive):
        _drain(receive)
        remove_svid(directory, owner="shop/db")
        assert await _after_two_polls(source, receive) == [
            SvidRemoved(observed_at=AT, source="identity", spiffe_id=DB_ID)
        ]
        assert source.statistics().svid_files == 1


async def test_a_new_svid_file_is_sent(tmp_path: Path) -> None:
    """A file that appears while the source runs is sent like one found at start-up."""
    directory = _directory(tmp_path)
    api = CA.issue(f"spiffe://{TD}/ns/shop/sa/api")
    async with _watching(directory) as (source, receive):
        _drain(receive)
        write_svid(directory, owner="shop/api", content=api)
        assert await _after_two_polls(source, receive) == [_rotated(api.svid())]


async def test_a_changed_bundle_is_sent_and_a_removed_one_is_removed(tmp_path: Path) -> None:
    """The bundle gains a second root: TrustBundleRotated; the file goes: TrustBundleRemoved."""
    directory = _directory(tmp_path)
    second_root = TestCA(TD, key=CA.new_key()).cert_pem
    async with _watching(directory) as (source, receive):
        _drain(receive)
        write_bundle(directory, CA.bundle_pem + second_root)
        assert await _after_two_polls(source, receive) == [
            _bundle_rotated(TrustBundle(trust_domain=TD, bundle_pem=CA.bundle_pem + second_root))
        ]
        (directory / "bundle.pem").unlink()
        assert await _after_two_polls(source, receive) == [
            TrustBundleRemoved(observed_at=AT, source="identity", trust_domain=TD)
        ]


async def test_bad_files_are_sent_with_what_the_source_found(tmp_path: Path) -> None:
    """Garbage, another identity, an expired leaf and a foreign key: each an SvidRotated telling the facts."""
    directory = tmp_path / "svids"
    write_bundle(directory, CA.bundle_pem)
    expired = CA.issue(f"spiffe://{TD}/ns/shop/sa/old", not_after=AT - 10**9)
    write_svid(directory, owner="shop/garbage", content=b"not PEM\n")
    write_svid(directory, owner="shop/other", content=WEB)
    write_svid(directory, owner="shop/old", content=expired)
    write_svid(directory, owner="shop/web", content=WEB.cert_chain_pem + DB.private_key_pem)
    (directory / "shop_dir.pem").mkdir()
    async with _watching(directory) as (_, receive):
        assert _drain(receive) == [
            _bundle_rotated(),
            _rotated(
                Svid(
                    spiffe_id=f"spiffe://{TD}/ns/shop/sa/dir",
                    cert_chain_pem=b"",
                    private_key=Redacted(b""),
                    problem="the file cannot be read (IsADirectoryError: Is a directory)",
                )
            ),
            _rotated(
                Svid(
                    spiffe_id=f"spiffe://{TD}/ns/shop/sa/garbage",
                    cert_chain_pem=b"",
                    private_key=Redacted(b""),
                    problem="the file holds no certificate",
                )
            ),
            _rotated(expired.svid()),
            _rotated(WEB.svid(spiffe_id=f"spiffe://{TD}/ns/shop/sa/other")),
            _rotated(
                Svid(
                    spiffe_id=WEB_ID,
                    cert_chain_pem=WEB.cert_chain_pem,
                    private_key=Redacted(DB.private_key_pem),
                    not_after=WEB.not_after,
                    leaf_spiffe_id=WEB_ID,
                    problem="the private key does not match the leaf certificate",
                )
            ),
        ]


async def test_bad_files_fold_into_rejections_that_name_the_identity_and_the_rule(tmp_path: Path) -> None:
    """The events of bad files, folded by the real core: one rejection each, nothing adopted but the bundle."""
    directory = tmp_path / "svids"
    write_bundle(directory, CA.bundle_pem)
    write_svid(directory, owner="shop/garbage", content=b"not PEM\n")
    write_svid(directory, owner="shop/other", content=WEB)
    write_svid(directory, owner="shop/old", content=CA.issue(f"spiffe://{TD}/ns/shop/sa/old", not_after=AT))
    async with _watching(directory) as (_, receive):
        state = fold_events(*_drain(receive))
    assert state.identity == IdentityState(trust_bundles=immutables.Map({TD: BUNDLE}))
    assert {subject: rejection.message for subject, rejection in state.diagnostics.rejections.items()} == {
        f"svid/spiffe://{TD}/ns/shop/sa/garbage": (
            f"svid 'spiffe://{TD}/ns/shop/sa/garbage': the file holds no certificate"
        ),
        f"svid/spiffe://{TD}/ns/shop/sa/other": (
            f"svid 'spiffe://{TD}/ns/shop/sa/other': the certificate names another identity (got {WEB_ID!r})"
        ),
        f"svid/spiffe://{TD}/ns/shop/sa/old": (
            f"svid 'spiffe://{TD}/ns/shop/sa/old': the certificate expired (not_after {AT!r} <= observed_at {AT!r})"
        ),
    }


async def test_a_bad_rotation_leaves_the_valid_svid_in_force_until_a_good_one_lifts_the_rejection(
    tmp_path: Path,
) -> None:
    """web's file turns into db's SVID: rejected, web's SVID stays; a good file again: adopted, rejection lifted."""
    directory = _directory(tmp_path)
    fixed = CA.issue(WEB_ID)
    async with _watching(directory) as (source, receive):
        events = _drain(receive)
        write_svid(directory, owner="shop/web", content=DB)
        events += await _after_two_polls(source, receive)
        rejected = fold_events(*events)
        write_svid(directory, owner="shop/web", content=fixed)
        events += await _after_two_polls(source, receive)
    assert rejected.identity.svids[WEB_ID] == WEB.svid()
    assert rejected.diagnostics == Diagnostics(
        rejections=immutables.Map(
            {
                f"svid/{WEB_ID}": Rejection(
                    subject=f"svid/{WEB_ID}",
                    reason=RejectionReason.INVALID_SVID,
                    message=f"svid {WEB_ID!r}: the certificate names another identity (got {DB_ID!r})",
                    seq=4,
                )
            }
        ),
        rejected_total=1,
    )
    lifted = fold_events(*events)
    assert lifted.identity.svids[WEB_ID] == fixed.svid()
    assert lifted.diagnostics == Diagnostics(rejected_total=1)


async def test_the_trust_domain_argument_names_the_ids_and_a_late_bundle_is_sent(tmp_path: Path) -> None:
    """With `trust_domain`, no bundle is needed at start; SVIDs are named in it; the bundle is sent when it comes."""
    directory = tmp_path / "svids"
    other = TestCA("example.org")
    write_svid(directory, owner="shop/web", content=other.issue("spiffe://example.org/ns/shop/sa/web"))
    async with _watching(directory, trust_domain="example.org") as (source, receive):
        first = _drain(receive)
        write_bundle(directory, other.bundle_pem)
        later = await _after_two_polls(source, receive)
    assert [event.subject for event in first] == ["svid/spiffe://example.org/ns/shop/sa/web"]
    assert later == [_bundle_rotated(TrustBundle(trust_domain="example.org", bundle_pem=other.bundle_pem))]


async def test_a_bundle_of_another_trust_domain_is_sent_with_its_problem(tmp_path: Path) -> None:
    """`trust_domain` says aether.internal, the bundle's CA names example.org: the bundle carries the problem."""
    directory = tmp_path / "svids"
    write_bundle(directory, TestCA("example.org").bundle_pem)
    async with _watching(directory, trust_domain=TD) as (_, receive):
        [event] = _drain(receive)
    assert event == _bundle_rotated(
        TrustBundle(
            trust_domain=TD,
            bundle_pem=TestCA("example.org").bundle_pem,
            problem="certificate 1 of the bundle names another trust domain (got 'example.org')",
        )
    )


async def test_an_unreadable_bundle_is_sent_with_its_problem(tmp_path: Path) -> None:
    """A bundle that cannot be read (a directory here) is a TrustBundleRotated with the reason."""
    directory = tmp_path / "svids"
    (directory / "bundle.pem").mkdir(parents=True)
    async with _watching(directory, trust_domain=TD) as (_, receive):
        assert _drain(receive) == [
            _bundle_rotated(
                TrustBundle(
                    trust_domain=TD,
                    bundle_pem=b"",
                    problem="the file cannot be read (IsADirectoryError: Is a directory)",
                )
            )
        ]


async def test_a_missing_directory_holds_nothing_until_it_appears(tmp_path: Path) -> None:
    """With `trust_domain`, a directory that does not exist yet is empty; its files are sent once written."""
    directory = tmp_path / "svids"
    async with _watching(directory, trust_domain=TD) as (source, receive):
        assert _drain(receive) == []
        write_svid(directory, owner="shop/web", content=WEB)
        assert await _after_two_polls(source, receive) == [_rotated(WEB.svid())]


async def test_other_names_are_ignored_and_listed(tmp_path: Path) -> None:
    """A README, a badly named file and dot files send nothing; the first two are listed in the statistics."""
    directory = _directory(tmp_path)
    for name in ("README", "Shop_Web.pem", ".shop_web.pem.tmp", "..data"):
        (directory / name).write_bytes(b"x")
    async with _watching(directory) as (source, receive):
        assert len(_drain(receive)) == 3
        assert source.statistics().ignored == ("README", "Shop_Web.pem")


@pytest.mark.parametrize(
    ("bundle", "trust_domain", "message"),
    [
        (None, None, "no trust domain given and 'bundle.pem' is missing"),
        (
            b"garbage",
            None,
            "no trust domain given and the CA certificates of 'bundle.pem' must name exactly one"
            " in a URI SAN 'spiffe://<trustDomain>' (got [])",
        ),
        (
            CA.bundle_pem + TestCA("example.org").bundle_pem,
            None,
            "no trust domain given and the CA certificates of 'bundle.pem' must name exactly one"
            " in a URI SAN 'spiffe://<trustDomain>' (got ['aether.internal', 'example.org'])",
        ),
        (
            CA.bundle_pem,
            "Aether",
            "trust domain must be lowercase letters, digits, '.', '-' or '_' (got 'Aether')",
        ),
    ],
    ids=["no-bundle", "no-domain", "two-domains", "bad-argument"],
)
async def test_a_source_without_a_trust_domain_does_not_start(
    tmp_path: Path, bundle: bytes | None, trust_domain: str | None, message: str
) -> None:
    """No trust domain to settle on is a start-up error naming the directory and the reason."""
    directory = tmp_path / "svids"
    directory.mkdir()
    if bundle is not None:
        write_bundle(directory, bundle)
    send, receive = trio.open_memory_channel[Event](100)
    with pytest.raises(TrustDomainError) as raised:
        await serve_svid_files(directory, send=send, trust_domain=trust_domain)
    assert str(raised.value) == f"svid directory {str(directory)!r}: {message}"
    assert [event async for event in receive] == []  # nothing sent, and the channel closed


async def test_an_unreadable_bundle_without_a_trust_domain_does_not_start(tmp_path: Path) -> None:
    """No argument and a bundle that cannot be read: the start-up error says why."""
    directory = tmp_path / "svids"
    (directory / "bundle.pem").mkdir(parents=True)
    send, _ = trio.open_memory_channel[Event](1)
    with pytest.raises(
        TrustDomainError,
        match=r"^svid directory '.*': no trust domain given and 'bundle.pem' cannot be read"
        r" \(IsADirectoryError: Is a directory\)$",
    ):
        await serve_svid_files(directory, send=send)


async def test_a_directory_that_cannot_be_listed_is_an_error(tmp_path: Path) -> None:
    """A regular file where the directory should be: SvidDirectoryError, chained to the OSError."""
    path = tmp_path / "svids"
    path.write_bytes(b"")
    send, _ = trio.open_memory_channel[Event](1)
    with pytest.raises(SvidDirectoryError) as raised:
        await serve_svid_files(path, send=send, trust_domain=TD)
    assert (
        str(raised.value)
        == f"svid directory {str(path)!r} cannot be listed: NotADirectoryError: Not a directory"
    )
    assert isinstance(raised.value.__cause__, NotADirectoryError)


async def test_the_source_closes_its_channel_when_it_ends(tmp_path: Path) -> None:
    """Cancelled, the source closes `send`: the receiver sees the end of the channel after the events."""
    send, receive = trio.open_memory_channel[Event](100)
    async with trio.open_nursery() as nursery:
        await nursery.start(
            functools.partial(serve_svid_files, _directory(tmp_path), send=send, poll_interval=TICK)
        )
        nursery.cancel_scope.cancel()
    assert len([event async for event in receive]) == 3


async def test_waiting_for_polls_already_done_returns_at_once(tmp_path: Path) -> None:
    """`wait_polls` for a count already reached only checkpoints."""
    async with _watching(_directory(tmp_path)) as (source, _):
        with trio.fail_after(10):
            await source.wait_polls(1)
        assert source.statistics().polls >= 1
