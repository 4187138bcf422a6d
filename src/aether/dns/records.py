"""The mesh record file the agent writes: parse and validate it into `MeshRecords` (pure: bytes in, values out)."""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from types import MappingProxyType

import attrs

from aether.dns.errors import RecordsFileRejected

# One DNS label: RFC 1123 host-name rules (letters, digits, inner hyphens; 1..63 characters).
_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


@attrs.frozen(kw_only=True)
class MeshRecords:
    """The mesh names one record file maps, keyed on `(namespace, service)` in lowercase."""

    generation: int
    """The agent's counter for this file; it only grows."""
    written_at: str
    """When the agent wrote the file, as the agent spelled it (informational)."""
    addresses: Mapping[tuple[str, str], ipaddress.IPv4Address]
    """`(namespace, service)` to the service's virtual IP (read-only)."""


@attrs.frozen(kw_only=True)
class ParsedRecords:
    """A record file that could be read, plus one message per entry that was skipped."""

    records: MeshRecords
    skipped: tuple[str, ...]
    """One message per bad entry (`records` keeps every good entry)."""


def parse_records(content: bytes) -> ParsedRecords:
    """Parse a record file `{"writtenAt", "generation", "records": {"<ns>/<svc>": "<ip>"}}`.

    Args:
        content: the file's bytes.

    Returns:
        The good entries, and a message for each bad entry that was skipped.

    Raises:
        RecordsFileRejected: the file as a whole is unusable (not JSON, not an object, no `records` object,
            or `generation` not a non-negative integer).
    """
    try:
        document = json.loads(content)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordsFileRejected(reason=f"not JSON ({exc})") from exc
    except RecursionError:
        # Python's decoder recurses per nesting level: a file of '[' ends it before any check of ours.
        raise RecordsFileRejected(reason="nests arrays or objects too deeply to decode") from None
    if not isinstance(document, dict):
        raise RecordsFileRejected(reason=f"top level must be an object (got {type(document).__name__})")
    entries = document.get("records")
    if not isinstance(entries, dict):
        raise RecordsFileRejected(reason=f"'records' must be an object (got {entries!r:.80})")
    generation = document.get("generation", 0)
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
        raise RecordsFileRejected(reason=f"'generation' must be an integer >= 0 (got {generation!r:.80})")
    written_at = document.get("writtenAt", "")
    addresses: dict[tuple[str, str], ipaddress.IPv4Address] = {}
    skipped: list[str] = []
    for key, value in entries.items():
        problem = _entry_problem(key, value)
        if problem is not None:
            skipped.append(problem)
            continue
        namespace, service = key.lower().split("/")
        addresses[(namespace, service)] = ipaddress.IPv4Address(value)
    records = MeshRecords(
        generation=generation, written_at=str(written_at), addresses=MappingProxyType(addresses)
    )
    return ParsedRecords(records=records, skipped=tuple(skipped))


def _entry_problem(key: str, value: object) -> str | None:
    """Return why the entry `key: value` is unusable, or None when it is good."""
    parts = key.lower().split("/")
    if len(parts) != 2 or not all(_LABEL.match(part) for part in parts):
        return f"record {key!r}: key must be '<namespace>/<service>' with DNS labels (got {key!r})"
    if not isinstance(value, str):
        return f"record {key!r}: address must be an IPv4 string (got {value!r:.80})"
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        return f"record {key!r}: address must be an IPv4 address (got {value!r:.80})"
    return None
