"""Tests of `aether.kube.yaml_documents`: YAML from users read within bounds, a document at a time."""

from __future__ import annotations

from pathlib import Path

import pytest

from aether.kube.config import ClusterConfig
from aether.kube.errors import ConfigError
from aether.kube.yaml_documents import MAX_ALIAS_EXPANSION, RefusedDocument, load_documents


def alias_bomb(levels: int = 7) -> str:
    """The classic billion laughs as an HTTPRoute's spec: each anchor is a list of nine aliases of the previous one
    (under 1 KB)."""
    lines = [
        "apiVersion: gateway.networking.k8s.io/v1",
        "kind: HTTPRoute",
        "metadata: {name: bomb, namespace: shop}",
        "spec:",
        '  a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]',
    ]
    lines += [
        f"  a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 9)}]" for level in range(1, levels + 1)
    ]
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_before_it_expands_and_the_next_document_still_reads() -> None:
    """Seven levels of nine-fold aliases name 54 million nodes: refused with the count; the next document reads."""
    text = alias_bomb()
    assert len(text) < 1024
    refused, after = list(load_documents(f"{text}---\nkind: Service\n"))
    assert refused == RefusedDocument(
        reason=f"line 1: aliases expand the document from 38 to 54481025 nodes; at most {MAX_ALIAS_EXPANSION} may "
        "come from aliases (anchors reused inside anchors: an alias bomb?)"
    )
    assert after == {"kind": "Service"}


def test_a_few_aliases_read_as_shared_values() -> None:
    """Anchors used as manifests use them (a block reused a few times) read as before."""
    (document,) = load_documents("base: &b {port: 80}\none: *b\ntwo: *b\n")
    assert document == {"base": {"port": 80}, "one": {"port": 80}, "two": {"port": 80}}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("spec: &x {a: *x}\n", "line 1: an alias refers to a node that contains it (a recursive anchor)"),
        (
            "\nn: " + "9" * 5001 + "\n",
            "line 2: an integer of 5001 characters is longer than the 4300 digits it may have",
        ),
        ("at: 2026-13-45\n", "a value cannot be read (month must be in 1..12)"),
    ],
)
def test_documents_no_consumer_could_walk_or_build_are_refused(text: str, reason: str) -> None:
    """A recursive anchor, an integer Python will not convert and an impossible date are refused, not raised."""
    assert list(load_documents(f"{text}---\nok: 1\n")) == [RefusedDocument(reason=reason), {"ok": 1}]


def test_a_kubeconfig_that_is_an_alias_bomb_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(alias_bomb())
    with pytest.raises(ConfigError, match=r"cannot read the kubeconfig: line 1: aliases expand the document"):
        ClusterConfig.from_kubeconfig(path)
