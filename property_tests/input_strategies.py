"""Hypothesis strategies for what users and peers hand the adapters: manifest text, CNI configs and environments,
registrar requests. Mostly well-formed, so that the checks past parsing run too; the rest is junk on purpose
(arbitrary bytes, YAML punctuation, out-of-range integers, deep nesting, anchors, zoned IPv6 addresses)."""

from __future__ import annotations

import json
from typing import Any

import yaml
from hypothesis import strategies as st

from aether.proto.registrar.v1 import registrar_pb2
from aether.proto.registry.v1 import registry_pb2

_integers = st.one_of(
    st.integers(-5, 70_000),
    st.sampled_from((-1, 2**31, 2**32, 2**63, 2**64, 10**27, -(2**63) - 1)),
    st.integers(min_value=-(10**40), max_value=10**40),
)
_scalars = st.one_of(st.none(), st.booleans(), _integers, st.floats(allow_nan=False), st.text(max_size=8))
json_like = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(alphabet="abkp", max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)
"""Values a JSON or YAML document may hold, with integers past every wire type."""

_KINDS = ("Service", "Pod", "Secret", "HTTPRoute", "Gateway", "GatewayClass", "ReferenceGrant", "List")
_API_VERSIONS = ("v1", "gateway.networking.k8s.io/v1", "gateway.networking.k8s.io/v1beta1", "apps/v1")


@st.composite
def kube_documents(draw: st.DrawFn) -> dict[str, Any]:
    """A Kubernetes-shaped document: mostly the fields the converters read, with values of any type or range."""
    metadata = {
        "name": draw(st.one_of(st.sampled_from(("web", "db")), json_like)),
        "namespace": draw(st.one_of(st.sampled_from(("shop", "")), json_like)),
        "generation": draw(st.one_of(_integers, json_like)),
        "labels": draw(st.one_of(st.just({"aether.io/managed": "true"}), json_like)),
    }
    document: dict[str, Any] = {
        "apiVersion": draw(st.sampled_from(_API_VERSIONS)),
        "kind": draw(st.sampled_from(_KINDS)),
        "metadata": metadata,
        "spec": draw(
            st.one_of(
                st.fixed_dictionaries(
                    {"ports": st.lists(st.fixed_dictionaries({"port": _integers}), max_size=3)}
                ),
                json_like,
            )
        ),
    }
    if document["kind"] == "List":
        document["items"] = draw(st.one_of(st.lists(json_like, max_size=2), json_like))
    if draw(st.booleans()):
        document["status"] = {
            "podIP": draw(st.sampled_from(("10.0.0.1", "fe80::1%eth0", "x"))),
            "podIPs": draw(json_like),
        }
    return document


def _anchored(levels: int, width: int) -> str:
    lines = ["apiVersion: v1", "kind: Service", "metadata: {name: a}", "spec:", "  l0: &l0 [x, y]"]
    lines += [f"  l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * width)}]" for n in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


manifest_texts = st.one_of(
    st.lists(kube_documents(), min_size=1, max_size=3).map(yaml.safe_dump_all),
    st.lists(kube_documents(), min_size=1, max_size=2).map(lambda docs: json.dumps(docs[0])),
    st.text(alphabet="[]{}&*:-!|>'\"#%@?,\n\t 019aeknv.", max_size=60),
    st.builds(_anchored, st.integers(1, 12), st.integers(1, 12)),
    st.binary(max_size=60).map(lambda raw: raw.decode("utf-8", errors="replace")),
    st.integers(1, 3000).map(lambda depth: "spec: " + "[" * depth + "]" * depth),
)
"""The text of one manifest file."""

_CNI_KEYS = (
    "cniVersion",
    "name",
    "agentSocket",
    "agentTimeoutSeconds",
    "meshDNS",
    "excludeOutboundPorts",
    "excludeOutboundIPRanges",
    "prevResult",
    "runtimeConfig",
    "cni.dev/valid-attachments",
)


@st.composite
def cni_configs(draw: st.DrawFn) -> dict[str, Any]:
    """A network config: our keys and the runtime's, each with a likely value or any value."""
    config: dict[str, Any] = {"cniVersion": draw(st.sampled_from(("1.1.0", "1.0.0", "0.4.0", "9.9")))}
    for key in draw(st.lists(st.sampled_from(_CNI_KEYS), max_size=6, unique=True)):
        config[key] = draw(json_like)
    if draw(st.booleans()):
        config["prevResult"] = {"ips": draw(st.one_of(st.lists(json_like, max_size=3), json_like))}
    return config


cni_stdins = st.one_of(
    cni_configs().map(lambda config: json.dumps(config).encode()),
    st.binary(max_size=80),
    st.integers(1, 200_000).map(lambda depth: b"[" * depth),
    st.integers(1, 6000).map(
        lambda digits: b'{"cniVersion": "1.1.0", "agentTimeoutSeconds": ' + b"9" * digits + b"}"
    ),
)
"""What the runtime may write on the plugin's stdin."""

cni_environments = st.fixed_dictionaries(
    {"CNI_COMMAND": st.sampled_from(("ADD", "DEL", "CHECK", "GC", "STATUS", "VERSION", "", "add"))},
    optional={
        "CNI_CONTAINERID": st.text(max_size=8),
        "CNI_IFNAME": st.sampled_from(("eth0", "")),
        "CNI_NETNS": st.one_of(
            st.text(alphabet="/abn.%", max_size=12),
            st.integers(1, 5000).map(lambda length: "/run/netns/" + "n" * length),
        ),
        "CNI_ARGS": st.text(alphabet="K8S_POD_NAMESPACE=;abc", max_size=40),
    },
)
"""CNI_* environments, valid or not (text without NUL: an environment cannot hold one)."""

ip_texts = st.one_of(
    st.sampled_from(
        ("10.0.0.1", "fe80::1", "fe80::1%eth0", "fe80::0001", "::ffff:10.0.0.1", "10.0.0.256", "")
    ),
    st.ip_addresses().map(str),
    st.text(alphabet="0123456789abcdef:.%", max_size=20),
)


@st.composite
def registrations(draw: st.DrawFn) -> registrar_pb2.RegisterEndpointRequest:
    """A RegisterEndpoint request: fields of every range the wire allows."""
    uint32 = st.integers(0, 2**32 - 1)
    ports = st.one_of(st.integers(1, 65535), uint32)  # mostly valid, so that the other checks run
    endpoint = registry_pb2.ServiceEndpoint(
        ip=draw(ip_texts),
        port=draw(ports),
        ports=draw(st.lists(ports, max_size=3)),
        weight=draw(uint32),
        metadata=draw(st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2)),
        health=draw(st.integers(0, 4)),  # type: ignore[arg-type]
        health_check_mode=draw(st.integers(0, 3)),  # type: ignore[arg-type]
    )
    request = registrar_pb2.RegisterEndpointRequest(
        service_name=draw(st.sampled_from(("shop/web", "shop/web", "Shop/web", "shop", "", "shop/web/x"))),
        protocol=draw(st.sampled_from((1, 2, 1, 0, 4))),  # type: ignore[arg-type]
    )
    if draw(st.integers(0, 9)):
        request.endpoint.CopyFrom(endpoint)
    return request
