"""What one `aether-cni` invocation was asked: the CNI_* environment and the network config on stdin (pure).

The network config is the plugin's entry in the node's conflist, plus what the runtime adds. Our keys
(camelCase, like the spec's own):

| key | type | default | meaning |
|---|---|---|---|
| `agentSocket` | path | `/run/aether/cni.sock` | the agent's CNI service |
| `agentTimeoutSeconds` | number > 0 | 10 | the whole agent call, its bounded wait for the proxy's ACK included |
| `meshDNS` | `"IPv4[:port]"` | none | the node's mesh-dns (port 18054 when omitted); none: pod DNS is left alone |
| `excludeOutboundPorts` | list of ports | `[]` | never captured on this node, for every pod (added to the pod's own) |
| `excludeOutboundIPRanges` | list of IPv4 CIDRs | `[]` | likewise, destination ranges |

Read from the runtime: `cniVersion`, `name`, `prevResult` (we are chained: it is passed through as our result),
`runtimeConfig["io.kubernetes.cri.pod-annotations"]` (when the conflist declares that capability) and, for GC,
`cni.dev/valid-attachments`.
"""

from __future__ import annotations

import enum
import ipaddress
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from aether.cni.capture import MESH_DNS_PORT, ip_range_problem, port_problem
from aether.cni.errors import (
    DecodeFailure,
    IncompatibleVersion,
    InvalidEnvironment,
    InvalidNetworkConfig,
)

__all__ = [
    "DEFAULT_AGENT_SOCKET",
    "DEFAULT_AGENT_TIMEOUT",
    "LATEST_VERSION",
    "POD_ANNOTATIONS_CAPABILITY",
    "SUPPORTED_VERSIONS",
    "Command",
    "Invocation",
    "NetworkConfig",
    "PodArgs",
    "version_result",
]

SUPPORTED_VERSIONS = ("0.4.0", "1.0.0", "1.1.0")
"""The spec versions we implement: a chained plugin needs `prevResult` (0.3+) and CHECK (0.4+); GC and STATUS
are 1.1 commands."""
LATEST_VERSION = SUPPORTED_VERSIONS[-1]

DEFAULT_AGENT_SOCKET = Path("/run/aether/cni.sock")
DEFAULT_AGENT_TIMEOUT = 10.0
"""Seconds for one agent call: the agent waits at most a few seconds for the proxy's ACK, plus its log's fsync;
kubelet's own CNI timeout is minutes, and a stuck agent must still fail the ADD well before that."""

POD_ANNOTATIONS_CAPABILITY = "io.kubernetes.cri.pod-annotations"


class Command(enum.Enum):
    """The CNI operations (CNI_COMMAND)."""

    ADD = "ADD"
    DEL = "DEL"
    CHECK = "CHECK"
    GC = "GC"
    STATUS = "STATUS"
    VERSION = "VERSION"


_NEEDS_CONTAINER = frozenset({Command.ADD, Command.DEL, Command.CHECK})


@attrs.frozen(kw_only=True)
class PodArgs:
    """The Kubernetes pod named by CNI_ARGS."""

    namespace: str
    name: str
    uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@attrs.frozen(kw_only=True)
class Invocation:
    """The CNI_* environment of one invocation."""

    command: Command
    container_id: str = ""
    netns: Path | None = None
    """CNI_NETNS; None when unset (allowed for DEL: the namespace may be gone)."""
    ifname: str = ""
    pod: PodArgs | None = None
    """None when CNI_ARGS names no Kubernetes pod: then the plugin passes the previous result through."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Invocation:
        """Read the CNI_* variables.

        Raises:
            InvalidEnvironment: CNI_COMMAND is missing or unknown, or a variable its command needs is missing.
        """
        raw = environ.get("CNI_COMMAND", "")
        try:
            command = Command(raw)
        except ValueError:
            known = ", ".join(item.value for item in Command)
            raise InvalidEnvironment(f"CNI_COMMAND must be one of {known} (got {raw!r})") from None
        if command not in _NEEDS_CONTAINER:
            return cls(command=command)
        for name in ("CNI_CONTAINERID", "CNI_IFNAME") + (
            ("CNI_NETNS",) if command is not Command.DEL else ()
        ):
            if not environ.get(name):
                raise InvalidEnvironment(
                    f"{name} must be set for {command.value} (got {environ.get(name)!r})"
                )
        netns = environ.get("CNI_NETNS", "")
        if netns and not netns.startswith("/"):
            raise InvalidEnvironment(f"CNI_NETNS must be an absolute path (got {netns!r:.80})")
        if netns:
            _check_path_length(netns, name="CNI_NETNS")
        return cls(
            command=command,
            container_id=environ["CNI_CONTAINERID"],
            netns=Path(netns) if netns else None,
            ifname=environ["CNI_IFNAME"],
            pod=_pod_args(environ.get("CNI_ARGS", "")),
        )


NAME_MAX = 255
"""Bytes of one path component on Linux (`NAME_MAX`): a longer one makes every system call fail (ENAMETOOLONG)."""
PATH_MAX = 4096
"""Bytes of a whole path on Linux (`PATH_MAX`)."""


def _check_path_length(path: str, *, name: str) -> None:
    """Raise `InvalidEnvironment` when `path` cannot name a file: a component or the whole path is too long."""
    encoded = path.encode(errors="surrogateescape")
    longest = max((len(part) for part in encoded.split(b"/")), default=0)
    if longest > NAME_MAX:
        raise InvalidEnvironment(
            f"{name} must be a path whose components have at most {NAME_MAX} bytes (one has {longest})",
            details=f"{len(encoded)} bytes starting {path[:40]!r}",
        )
    if len(encoded) >= PATH_MAX:
        raise InvalidEnvironment(
            f"{name} must be a path of under {PATH_MAX} bytes (got {len(encoded)})",
            details=f"got {path!r:.80}",
        )


def _pod_args(text: str) -> PodArgs | None:
    """Read `K8S_POD_NAMESPACE`, `K8S_POD_NAME` and `K8S_POD_UID` from CNI_ARGS (`K=V;K=V`)."""
    values: dict[str, str] = {}
    for item in text.split(";"):
        key, equals, value = item.partition("=")
        if equals:
            values[key.strip()] = value.strip()
    namespace, name = values.get("K8S_POD_NAMESPACE", ""), values.get("K8S_POD_NAME", "")
    if not namespace or not name:
        return None
    return PodArgs(namespace=namespace, name=name, uid=values.get("K8S_POD_UID", ""))


@attrs.frozen(kw_only=True)
class NetworkConfig:
    """The network config from stdin, validated."""

    cni_version: str
    name: str = ""
    agent_socket: Path = DEFAULT_AGENT_SOCKET
    agent_timeout: float = DEFAULT_AGENT_TIMEOUT
    mesh_dns: tuple[str, int] | None = None
    exclude_ports: tuple[int, ...] = ()
    exclude_ranges: tuple[str, ...] = ()
    prev_result: Mapping[str, Any] | None = None
    """The previous plugin's result, as received (passed through unchanged but for `cniVersion`)."""
    pod_annotations: Mapping[str, str] = attrs.field(factory=dict)
    valid_container_ids: tuple[str, ...] = ()
    """GC: the containers the runtime still has."""

    @property
    def pod_ips(self) -> tuple[str, ...]:
        """The IPv4 addresses of `prevResult` (without prefix length), in its order."""
        ips: list[str] = []
        for entry in (self.prev_result or {}).get("ips", []):  # a list: checked by `from_json`
            address = entry.get("address") if isinstance(entry, dict) else None
            if not isinstance(address, str):
                continue
            address = address.partition("/")[0]
            try:
                if ipaddress.ip_address(address).version == 4:
                    ips.append(address)
            except ValueError:
                continue
        return tuple(ips)

    @classmethod
    def from_json(cls, content: bytes) -> NetworkConfig:
        """Parse and validate the network config.

        Raises:
            DecodeFailure: `content` is empty, not UTF-8 JSON, or not an object.
            IncompatibleVersion: `cniVersion` is not in `SUPPORTED_VERSIONS`.
            InvalidNetworkConfig: a key has the wrong type or value (the message names it).
        """
        document = _decode(content)
        version = document.get("cniVersion")
        if not isinstance(version, str) or not version:
            raise InvalidNetworkConfig(
                f"network config: 'cniVersion' must be a version string (got {version!r})"
            )
        if version not in SUPPORTED_VERSIONS:
            raise IncompatibleVersion(
                f"network config: cniVersion {version!r} is not supported",
                details=f"supported: {', '.join(SUPPORTED_VERSIONS)}",
            )
        prev = _prev_result(document)
        return cls(
            cni_version=version,
            name=_typed(document, "name", str, ""),
            agent_socket=_socket(document),
            agent_timeout=_timeout(document),
            mesh_dns=_mesh_dns(document),
            exclude_ports=tuple(
                sorted({int(item) for item in _checked_list(document, "excludeOutboundPorts")})
            ),
            exclude_ranges=tuple(_checked_list(document, "excludeOutboundIPRanges")),
            prev_result=prev,
            pod_annotations=_annotations(document),
            valid_container_ids=_attachments(document),
        )

    @classmethod
    def version_of(cls, content: bytes) -> str:
        """Return the `cniVersion` of `content` when it is one we speak, else `LATEST_VERSION` (for errors)."""
        try:
            document = _loads(content)
        except DecodeFailure:
            return LATEST_VERSION
        version = document.get("cniVersion") if isinstance(document, dict) else None
        return version if isinstance(version, str) and version in SUPPORTED_VERSIONS else LATEST_VERSION


def version_result(stdin: bytes) -> str:
    """Return the answer to VERSION: the config's `cniVersion` (when we speak it) and every version we support."""
    return json.dumps(
        {"cniVersion": NetworkConfig.version_of(stdin), "supportedVersions": list(SUPPORTED_VERSIONS)}
    )


MAX_NUMBER_DIGITS = 100
"""Digits a JSON number of the config may have: no key holds more than a few (a port, a timeout); Python refuses
to convert integers past 4300 digits, and converting long ones costs quadratic time."""


class _NumberTooLong(ValueError):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.length = len(text)


def _bounded_number(text: str) -> int:
    if len(text) > MAX_NUMBER_DIGITS:
        raise _NumberTooLong(text)
    return int(text)


def _loads(content: bytes) -> Any:
    """Decode `content` as JSON, with numbers and nesting bounded.

    Raises:
        DecodeFailure: `content` is empty, not UTF-8 JSON, nests too deeply or holds a number too long.
    """
    if not content.strip():
        raise DecodeFailure("network config: stdin is empty; the runtime must pass the config as JSON")
    try:
        return json.loads(content, parse_int=_bounded_number)
    except _NumberTooLong as exc:
        raise DecodeFailure(
            f"network config: a number on stdin has {exc.length} digits, more than {MAX_NUMBER_DIGITS}",
            details=f"{str(exc)[:20]}... ({exc.length} digits)",
        ) from None
    except RecursionError:
        # Python's JSON decoder recurses per nesting level: a stack of '[' ends it before any limit of ours.
        raise DecodeFailure(
            "network config: stdin nests arrays or objects too deeply to decode",
            details=f"{len(content)} bytes starting {content[:20]!r}",
        ) from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise DecodeFailure("network config: stdin is not JSON", details=str(exc)) from exc


def _decode(content: bytes) -> dict[str, Any]:
    document = _loads(content)
    if not isinstance(document, dict):
        raise DecodeFailure(f"network config: must be a JSON object (got {type(document).__name__})")
    return document


def _prev_result(document: Mapping[str, Any]) -> dict[str, Any] | None:
    """The previous plugin's result: an object whose `ips`, when present, is a list (`NetworkConfig.pod_ips`
    reads the entries that are objects with an IPv4 `address`, and skips the rest)."""
    prev = document.get("prevResult")
    if prev is None:
        return None
    if not isinstance(prev, dict):
        raise InvalidNetworkConfig(f"network config: 'prevResult' must be an object (got {prev!r:.80})")
    ips = prev.get("ips", [])
    if not isinstance(ips, list):
        raise InvalidNetworkConfig(
            f"network config: 'prevResult.ips' must be a list (got {type(ips).__name__})",
            details=f"{ips!r:.80}",
        )
    return prev


def _typed(document: Mapping[str, Any], key: str, kind: type, default: Any) -> Any:
    value = document.get(key, default)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise InvalidNetworkConfig(f"network config: {key!r} must be a {kind.__name__} (got {value!r:.80})")
    return value


def _socket(document: Mapping[str, Any]) -> Path:
    text = _typed(document, "agentSocket", str, str(DEFAULT_AGENT_SOCKET))
    if not text.startswith("/"):
        raise InvalidNetworkConfig(f"network config: 'agentSocket' must be an absolute path (got {text!r})")
    # Here, not at the top: `aether-cni VERSION` reads this module without loading the gRPC stack.
    from aether.rpc.errors import InvalidListenAddressError
    from aether.rpc.listen import ListenAddress

    try:
        ListenAddress.unix(Path(text))  # what the call dials: a Unix socket path must fit `sun_path`
    except InvalidListenAddressError as exc:
        raise InvalidNetworkConfig(f"network config: 'agentSocket': {exc}") from None
    return Path(text)


def _timeout(document: Mapping[str, Any]) -> float:
    value = document.get("agentTimeoutSeconds", DEFAULT_AGENT_TIMEOUT)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 300:
        raise InvalidNetworkConfig(
            f"network config: 'agentTimeoutSeconds' must be a number in (0, 300] (got {value!r:.80})"
        )
    return float(value)


def _mesh_dns(document: Mapping[str, Any]) -> tuple[str, int] | None:
    text = _typed(document, "meshDNS", str, "")
    if not text:
        return None
    host, colon, port = text.partition(":")
    problem = port_problem(port, what="network config: 'meshDNS'") if colon else None
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        problem = f"network config: 'meshDNS' must be 'IPv4[:port]' such as '10.0.0.5:{MESH_DNS_PORT}' (got {text!r})"
    if problem is not None:
        raise InvalidNetworkConfig(problem)
    return host, int(port) if colon else MESH_DNS_PORT


def _checked_list(document: Mapping[str, Any], key: str) -> list[str]:
    items = _typed(document, key, list, [])
    checker = port_problem if key == "excludeOutboundPorts" else ip_range_problem
    texts: list[str] = []
    for item in items:
        text = str(item) if isinstance(item, int | str) and not isinstance(item, bool) else repr(item)
        problem = checker(text, what=f"network config: {key!r}")
        if problem is not None:
            raise InvalidNetworkConfig(problem)
        texts.append(text.strip())
    return texts


def _annotations(document: Mapping[str, Any]) -> dict[str, str]:
    runtime = _typed(document, "runtimeConfig", dict, {})
    annotations = runtime.get(POD_ANNOTATIONS_CAPABILITY, {})
    if not isinstance(annotations, dict) or not all(
        isinstance(key, str) and isinstance(value, str) for key, value in annotations.items()
    ):
        raise InvalidNetworkConfig(
            f"network config: runtimeConfig[{POD_ANNOTATIONS_CAPABILITY!r}] must map strings to strings"
        )
    return dict(annotations)


def _attachments(document: Mapping[str, Any]) -> tuple[str, ...]:
    items = _typed(document, "cni.dev/valid-attachments", list, [])
    ids: set[str] = set()
    for item in items:
        container = item.get("containerID") if isinstance(item, dict) else None
        if not isinstance(container, str) or not container:
            raise InvalidNetworkConfig(
                f"network config: each 'cni.dev/valid-attachments' entry needs a 'containerID' (got {item!r:.80})"
            )
        ids.add(container)
    return tuple(sorted(ids))
