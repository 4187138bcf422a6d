"""`aether render`: project Kubernetes manifests offline into the Envoy config a node or the edge would get.

The manifests fold through the same reducers as a live cluster's objects (`aether.kube.manifests`), the pods
standing in for the registrar (`aether.kube.offline`), and the same projections run. Same input, same bytes out:
nothing reads a clock (the state is projected at time 0) and every list is in a defined order.
"""

from __future__ import annotations

import argparse
import enum
import json
import sys
from pathlib import Path
from typing import Any

import attrs
import yaml
from google.protobuf import json_format

from aether.cli.commands import summary
from aether.core.gateway import gateway_view
from aether.core.order import sorted_items
from aether.core.project import project_node
from aether.core.project.bootstrap import static_bootstrap, unpacked
from aether.core.project.edge import EdgeOptions, project_edge
from aether.core.project.names import ANY_ADDRESS
from aether.core.snapshot import SHORT_NAMES, TYPE_ORDER, Snapshot
from aether.core.state import State
from aether.kube.manifests import ManifestDirectory, ManifestError
from aether.kube.offline import addressless_pods, cni_joined, fold_offline

__all__ = [
    "EDGE_NODE_ID",
    "RENDER_SOURCE",
    "Identity",
    "OutputFormat",
    "RenderRequest",
    "add_parser",
    "bootstrap_document",
    "check_pod_addresses",
    "render",
    "render_snapshot",
    "render_state",
    "run_render",
    "snapshot_document",
    "status_document",
]

RENDER_SOURCE = "directory"
"""The source of the events a render folds."""
RENDER_TIME = 0
"""The observation time of every event a render folds (and its projection time): renders read no clock."""
EDGE_NODE_ID = "aether-edge"
"""The node id of an edge render (a running edge uses its pod's name)."""
EXIT_UNREADABLE = 1
"""The manifests could not be read at all (a file that does not open, YAML that does not parse)."""

REDACTED = "<redacted>"
_RESOURCE_KEYS = {
    "CDS": "clusters",
    "EDS": "endpoints",
    "LDS": "listeners",
    "RDS": "routes",
    "SDS": "secrets",
}


class OutputFormat(enum.StrEnum):
    """What `render` prints."""

    JSON = "json"
    """The snapshot: every resource by type, as the xDS server would serve it (private keys redacted)."""
    BOOTSTRAP = "bootstrap"
    """A static Envoy bootstrap that `envoy -c` runs unchanged (see `aether.core.project.bootstrap`)."""


class Identity(enum.StrEnum):
    """How upstream connections authenticate."""

    SPIFFE = "spiffe"
    """mTLS with SVIDs, as deployed (a node render presents the SVIDs the state holds: manifests carry none)."""
    NONE = "none"
    """Cleartext HTTP/2 to `<pod ip>:18008`: routing tests without SPIFFE."""


@attrs.frozen(kw_only=True)
class RenderRequest:
    """What to render: the command line's flags."""

    manifests: Path
    node: str = ""
    """The node to project (its pods' listeners); empty: every pod (single-node local mode)."""
    edge: bool = False
    """Project the edge instead of a node."""
    output_format: OutputFormat = OutputFormat.JSON
    identity: Identity = Identity.SPIFFE
    bind: str = ANY_ADDRESS
    """The edge's listener address."""
    admin: tuple[str, int] | None = None
    """The bootstrap's admin address; None leaves the admin API off."""
    status: bool = False
    """Print the computed status as YAML instead of the config."""
    capture: bool = True
    """Render every pod as the CNI joins it in a cluster (its own network namespace: capture listeners on 18001
    and 18082); False: local mode, pods in the node's namespace (no capture)."""


def render_state(reading: ManifestDirectory, *, capture: bool = True) -> State:
    """Return the state the manifests of `reading` fold to (the pods registered as endpoints), each pod in a
    network namespace of its own as the CNI would join it unless not `capture` (`aether.kube.offline.cni_joined`)."""
    events = reading.events(source=RENDER_SOURCE, observed_at=RENDER_TIME)
    return fold_offline(
        cni_joined(events) if capture else events, source=RENDER_SOURCE, observed_at=RENDER_TIME
    )


def check_pod_addresses(reading: ManifestDirectory) -> None:
    """Check that every pod of `reading` that joins the mesh has an IP (offline, nothing assigns one; a render
    would silently leave the pod out).

    Raises:
        ManifestError: The first such pod, naming its document and the fix.
    """
    for pod in addressless_pods(reading.events(source=RENDER_SOURCE, observed_at=RENDER_TIME)):
        where = reading.objects[f"Pod/{pod.key}"]
        raise ManifestError(
            where.path,
            index=where.index,
            reason=f"pod {pod.key} has no IP: set status.podIP in its manifest (a render has no cluster to assign one)",
        )


def render_snapshot(state: State, request: RenderRequest) -> Snapshot:
    """Return the snapshot of `state` for the node or the edge `request` names."""
    if request.edge:
        options = EdgeOptions(bind=request.bind, cleartext=request.identity == Identity.NONE)
        return project_edge(state, node_id=EDGE_NODE_ID, options=options)
    return project_node(state, node_name=request.node, now=RENDER_TIME)


def _as_dict(message: Any) -> dict[str, Any]:
    document: dict[str, Any] = json_format.MessageToDict(message, preserving_proto_field_name=True)
    return document


def _redacted(document: dict[str, Any]) -> dict[str, Any]:
    certificate = document.get("tls_certificate", {})
    if "private_key" in certificate:
        certificate["private_key"] = REDACTED
    return document


def snapshot_document(snapshot: Snapshot) -> dict[str, Any]:
    """Return `snapshot` as JSON-ready dicts: node, per-type versions, and resources by type in name order.

    Private keys are replaced by `<redacted>`: the document is for reading, the bootstrap for running.
    """
    resources: dict[str, list[dict[str, Any]]] = {}
    versions: dict[str, str] = {}
    for type_url in TYPE_ORDER:
        short = SHORT_NAMES[type_url]
        held = sorted_items(snapshot.of_type(type_url))
        versions[_RESOURCE_KEYS[short]] = snapshot.version(type_url)
        resources[_RESOURCE_KEYS[short]] = [
            _redacted(_as_dict(unpacked(resource.packed))) for _, resource in held
        ]
    return {"node": snapshot.node_id, "versions": versions, "resources": resources}


def bootstrap_document(snapshot: Snapshot, *, admin: tuple[str, int] | None = None) -> dict[str, Any]:
    """Return the static bootstrap of `snapshot` as JSON-ready dicts (what `envoy -c` reads)."""
    return _as_dict(static_bootstrap(snapshot, admin=admin))


def status_document(state: State, reading: ManifestDirectory) -> dict[str, Any]:
    """Return the status `render --status` prints: each Gateway API object's computed status, the events the
    reducers rejected, and the manifest documents that were skipped."""
    view = gateway_view(state)
    return {
        "objects": {key: _status_dict(item) for key, item in sorted_items(view.status)},
        "rejections": [
            {"subject": item.subject, "reason": str(item.reason), "message": item.message}
            for _, item in sorted_items(state.diagnostics.rejections)
        ],
        "skipped": [
            {"file": item.path, "document": item.index, "message": item.message} for item in reading.problems
        ],
    }


def _camel_case(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.capitalize() for part in rest)


def _status_dict(value: Any) -> Any:
    """A status value as plain data with the API's camelCase names, empty strings and lists left out (numbers
    kept: 0 attached routes is news)."""
    if attrs.has(type(value)):
        fields = (
            (_camel_case(field.name), _status_dict(getattr(value, field.name)))
            for field in attrs.fields(type(value))
        )
        return {name: item for name, item in fields if not (isinstance(item, str | list) and not item)}
    if isinstance(value, tuple | list):
        return [_status_dict(item) for item in value]
    return value


def render(request: RenderRequest) -> str:
    """Return what `aether render` prints for `request`.

    Raises:
        ManifestError: The manifests cannot be read (a file or document that does not parse), or (but for
            `--status`) a pod that joins the mesh has no IP.
    """
    reading = ManifestDirectory.read(request.manifests)
    state = render_state(reading, capture=request.capture)
    if request.status:  # the status lists such a pod's rejection: it is the view to find out why
        return yaml.safe_dump(status_document(state, reading), sort_keys=False, allow_unicode=True)
    check_pod_addresses(reading)
    snapshot = render_snapshot(state, request)
    if request.output_format == OutputFormat.BOOTSTRAP:
        document = bootstrap_document(snapshot, admin=request.admin)
    else:
        document = snapshot_document(snapshot)
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _address(text: str) -> tuple[str, int]:
    host, colon, port = text.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"must be HOST:PORT with a port 0..65535 (got {text!r})")
    return host.strip("[]"), int(port)


def add_parser(roles: Any) -> None:
    """Add `aether render` to the root parser's subparsers `roles`."""
    parser = roles.add_parser("render", help=summary("render"))
    parser.add_argument(
        "--manifests", type=Path, required=True, metavar="DIR", help="a directory of YAML manifests"
    )
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--node", default="", metavar="NAME", help="project this node (default: every pod)")
    target.add_argument("--edge", action="store_true", help="project the edge (Gateways of the edge's class)")
    parser.add_argument(
        "--format",
        dest="output_format",
        type=OutputFormat,
        choices=list(OutputFormat),
        default=OutputFormat.JSON,
        help="json: the snapshot by resource type; bootstrap: a static Envoy bootstrap (default json)",
    )
    parser.add_argument("--status", action="store_true", help="print the computed status conditions as YAML")
    parser.add_argument(
        "--identity",
        type=Identity,
        choices=list(Identity),
        default=Identity.SPIFFE,
        help="none: cleartext HTTP/2 upstreams to <pod ip>:18008 (default spiffe)",
    )
    parser.add_argument("--bind", default=ANY_ADDRESS, metavar="ADDRESS", help="the edge's listener address")
    parser.add_argument("--admin", type=_address, metavar="HOST:PORT", help="the bootstrap's admin address")
    parser.add_argument(
        "--no-capture",
        dest="capture",
        action="store_false",
        help="local mode: pods share the node's network namespace, no capture listeners (default: each pod in "
        "its own namespace, captured, as the CNI joins it in a cluster)",
    )
    parser.set_defaults(run=run_render)


def run_render(arguments: argparse.Namespace) -> int:
    """`aether render`: print the projection; exit 1 when the manifests cannot be read or a meshed pod has no IP."""
    request = RenderRequest(
        manifests=arguments.manifests,
        node=arguments.node,
        edge=arguments.edge,
        output_format=arguments.output_format,
        identity=arguments.identity,
        bind=arguments.bind,
        admin=arguments.admin,
        status=arguments.status,
        capture=arguments.capture,
    )
    try:
        text = render(request)
    except ManifestError as exc:
        print(f"aether render: error: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    sys.stdout.write(text)
    return 0
