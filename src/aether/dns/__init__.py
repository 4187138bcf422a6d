"""Mesh DNS: answers `<service>.<namespace>.<mesh domain>` from the agent's record file, forwards the rest."""

from __future__ import annotations

from aether.dns.answer import (
    Answered,
    Dropped,
    Forward,
    MeshResolver,
    Resolution,
    ResolverStatistics,
    Transport,
)
from aether.dns.errors import ListenAddressInvalid, MeshDnsError, RecordsFileRejected
from aether.dns.forward import HostPort, forward_query, upstreams_from_resolv_conf
from aether.dns.records import MeshRecords, ParsedRecords, parse_records
from aether.dns.server import MeshDnsStatistics, RunningMeshDns, serve_mesh_dns

__all__ = [
    "Answered",
    "Dropped",
    "Forward",
    "HostPort",
    "ListenAddressInvalid",
    "MeshDnsError",
    "MeshDnsStatistics",
    "MeshRecords",
    "MeshResolver",
    "ParsedRecords",
    "RecordsFileRejected",
    "Resolution",
    "ResolverStatistics",
    "RunningMeshDns",
    "Transport",
    "forward_query",
    "parse_records",
    "serve_mesh_dns",
    "upstreams_from_resolv_conf",
]
