"""The demo's live view: a `Frame` (what the mesh looks like now) and `render`, which turns it into lines.

`render` is pure, so the view is tested by comparing lines. On a terminal the demo redraws the frame in place a
few times a second; elsewhere (`--check`, a pipe) it prints only the narration.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

__all__ = ["EndpointRow", "Frame", "ServiceRow", "render"]

CLEAR = "\x1b[H\x1b[2J"
"""Move the cursor home and clear the screen (ANSI)."""


@attrs.frozen(kw_only=True)
class EndpointRow:
    """One endpoint of a service, as the node's state holds it."""

    pod: str
    ip: str
    health: str


@attrs.frozen(kw_only=True)
class ServiceRow:
    """One service the traffic source calls: its endpoints and what the recent requests met."""

    service: str
    endpoints: tuple[EndpointRow, ...]
    ok: int
    """Successful requests in the recent window."""
    failed: int
    split: Mapping[str, int]
    """Successful requests in the recent window per answering replica."""


@attrs.frozen(kw_only=True)
class Frame:
    """Everything the view shows."""

    elapsed: float
    log_dir: str
    seq: int
    """The event log's sequence number (events folded)."""
    xds: Mapping[str, str]
    """Sync state per xDS type (CDS, EDS, LDS, RDS, SDS): SYNCED, STALE, NACKED or NOT SENT."""
    services: tuple[ServiceRow, ...]
    total_ok: int
    total_failed: int
    routes: tuple[str, ...] = ()
    """Route status lines (`HTTPRoute shop/x: Accepted=False (UnsupportedValue): ...`)."""
    problems: tuple[str, ...] = ()
    """Manifest documents the directory source skipped."""
    narration: tuple[str, ...] = ()
    """The scenario so far, newest last."""


def _bar(share: float, width: int = 20) -> str:
    filled = round(share * width)
    return "#" * filled + "." * (width - filled)


def render(frame: Frame) -> list[str]:
    """Return the lines of `frame`."""
    lines = [
        f"aether demo  {frame.elapsed:6.1f} s   log seq {frame.seq}   {frame.log_dir}",
        "xDS  " + "  ".join(f"{kind} {state}" for kind, state in sorted(frame.xds.items()))
        if frame.xds
        else "xDS  (Envoy not connected yet)",
        f"requests  ok {frame.total_ok}  failed {frame.total_failed}",
        "",
    ]
    for row in frame.services:
        lines.append(f"{row.service}  (last 2 s: {row.ok} ok, {row.failed} failed)")
        for endpoint in row.endpoints:
            lines.append(f"    endpoint {endpoint.pod:<14} {endpoint.ip:<15} {endpoint.health}")
        total = sum(row.split.values())
        for backend, count in row.split.items():
            share = count / total if total else 0.0
            lines.append(f"    answered by {backend:<14} {_bar(share)} {share:6.1%}")
    if frame.routes:
        lines += ["", "routes"] + [f"    {line}" for line in frame.routes]
    if frame.problems:
        lines += ["", "manifest problems (last good objects kept)"] + [
            f"    {line}" for line in frame.problems
        ]
    if frame.narration:
        lines += ["", "scenario"] + [f"    {line}" for line in frame.narration[-12:]]
    return lines
