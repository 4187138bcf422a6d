"""Parsing and validating the agent's record file."""

from __future__ import annotations

import ipaddress
import json

import pytest

from aether.dns import RecordsFileRejected, parse_records


def test_good_entries_are_kept_and_bad_ones_skipped_with_one_message_each() -> None:
    """Each bad entry gets one message; every good entry is kept, keys lowercased."""
    content = json.dumps(
        {
            "writtenAt": "2026-11-29T00:00:00Z",
            "generation": 3,
            "records": {
                "Default/Reviews": "10.96.0.10",
                "default/bad-ip": "10.96.0.300",
                "no-slash": "10.0.0.1",
                "default/v6": "fd00::1",
                "default/number": 7,
                "default/under_score": "10.0.0.2",
            },
        }
    ).encode()
    parsed = parse_records(content)
    assert parsed.records.generation == 3
    assert dict(parsed.records.addresses) == {("default", "reviews"): ipaddress.IPv4Address("10.96.0.10")}
    assert parsed.skipped == (
        "record 'default/bad-ip': address must be an IPv4 address (got '10.96.0.300')",
        "record 'no-slash': key must be '<namespace>/<service>' with DNS labels (got 'no-slash')",
        "record 'default/v6': address must be an IPv4 address (got 'fd00::1')",
        "record 'default/number': address must be an IPv4 string (got 7)",
        "record 'default/under_score': key must be '<namespace>/<service>' with DNS labels (got 'default/under_score')",
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{ half", r"^record file: not JSON \(.*\)$"),
        (b"[]", r"^record file: top level must be an object \(got list\)$"),
        (b'{"generation": 1}', r"^record file: 'records' must be an object \(got None\)$"),
        (
            b'{"generation": -1, "records": {}}',
            r"^record file: 'generation' must be an integer >= 0 \(got -1\)$",
        ),
        (b"\xff\xfe", r"^record file: not JSON \(.*\)$"),
    ],
)
def test_unusable_files_are_rejected(content: bytes, message: str) -> None:
    """A file that is not a JSON object with a `records` object is rejected as a whole."""
    with pytest.raises(RecordsFileRejected, match=message):
        parse_records(content)
