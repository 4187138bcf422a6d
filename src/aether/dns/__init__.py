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
from aether.dns.cache import AnswerCache, AnswerCacheStatistics
from aether.dns.datagrams import QueryBatch
from aether.dns.errors import ListenAddressInvalid, MeshDnsError, RecordsFileRejected, WireFormatError
from aether.dns.forward import HostPort, Upstreams, serve_upstreams, upstreams_from_resolv_conf
from aether.dns.records import MeshRecords, ParsedRecords, parse_records
from aether.dns.server import MeshDnsStatistics, RunningMeshDns, serve_mesh_dns
from aether.dns.wire import Question, Reply, read_question, read_reply, upstream_query

__all__ = [
    "AnswerCache",
    "AnswerCacheStatistics",
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
    "QueryBatch",
    "Question",
    "RecordsFileRejected",
    "Reply",
    "Resolution",
    "ResolverStatistics",
    "RunningMeshDns",
    "Transport",
    "Upstreams",
    "WireFormatError",
    "parse_records",
    "read_question",
    "read_reply",
    "serve_mesh_dns",
    "serve_upstreams",
    "upstream_query",
    "upstreams_from_resolv_conf",
]
