"""YAML from users, read within bounds: the safe loader, refusing alias bombs, recursive anchors and integers
too long to convert, one document at a time (the rest of the stream still reads).

A 1 KB document whose anchors nest seven levels deep names 43 million nodes; the loader shares them, but every
consumer that walks the result (JSON, the converters) expands them. The bound is checked on the composed node
graph, in time linear in its distinct nodes, before anything is constructed.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import attrs
import yaml
from yaml.constructor import SafeConstructor

__all__ = ["MAX_ALIAS_EXPANSION", "MAX_INTEGER_DIGITS", "RefusedDocument", "load_documents"]

MAX_ALIAS_EXPANSION = 100_000
"""Nodes that aliases may add to a document once expanded, beyond the nodes the document writes out itself.
Manifests rarely use anchors, and those that do reuse a few small blocks: this leaves them a hundred thousand
nodes (a few MB of JSON) while an alias bomb, which grows exponentially, is refused before it costs anything."""
MAX_INTEGER_DIGITS = sys.int_info.default_max_str_digits
"""Python converts no longer integer text (4300 digits); no field the mesh reads holds anything near it."""

if TYPE_CHECKING:
    _Base = yaml.SafeLoader
else:  # libyaml's safe loader when PyYAML was built with it (about ten times faster), the pure one otherwise
    _Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@attrs.frozen(kw_only=True)
class RefusedDocument:
    """A document that parses but is refused (the documents around it still read)."""

    reason: str


class _Refusal(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [item for pair in node.value for item in pair]
    return []


def _where(node: yaml.Node) -> str:
    return f"line {node.start_mark.line + 1}"


def _check_expansion(root: yaml.Node) -> None:
    """Raise `_Refusal` when aliases expand `root` by more than `MAX_ALIAS_EXPANSION` nodes or refer to a node
    that contains them. Iterative (no recursion limit) and memoized (each distinct node is counted once)."""
    sizes: dict[yaml.Node, int] = {}
    open_nodes: set[yaml.Node] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        if finished:
            open_nodes.discard(node)
            sizes[node] = 1 + sum(sizes[child] for child in _children(node))
            continue
        if node in sizes:
            continue
        if node in open_nodes:  # Invariant: open nodes are the ancestors of the node being expanded.
            raise _Refusal(f"{_where(node)}: an alias refers to a node that contains it (a recursive anchor)")
        open_nodes.add(node)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node))
    expanded, written = sizes[root], len(sizes)
    if expanded - written > MAX_ALIAS_EXPANSION:
        raise _Refusal(
            f"{_where(root)}: aliases expand the document from {written} to {expanded} nodes; at most "
            f"{MAX_ALIAS_EXPANSION} may come from aliases (anchors reused inside anchors: an alias bomb?)"
        )


class _BoundedLoader(_Base):
    """The safe loader; a document past the bounds constructs to a `RefusedDocument`."""

    def construct_document(self, node: yaml.Node) -> Any:
        try:
            _check_expansion(node)
            return super().construct_document(node)
        except _Refusal as refusal:
            reason = refusal.reason
        except (
            ValueError,
            RecursionError,
        ) as error:  # a timestamp like 2026-13-45: the value cannot be built
            reason = f"a value cannot be read ({error})"
        # What a failed construction left behind must not leak into the next document.
        self.constructed_objects.clear()
        self.recursive_objects.clear()
        self.state_generators.clear()
        self.deep_construct = False
        return RefusedDocument(reason=reason)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> Any:
        value = str(node.value)
        if len(value) > MAX_INTEGER_DIGITS:
            raise _Refusal(
                f"{_where(node)}: an integer of {len(value)} characters is longer than the "
                f"{MAX_INTEGER_DIGITS} digits it may have"
            )
        return SafeConstructor.construct_yaml_int(self, node)


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)


def load_documents(text: str) -> Iterator[Any]:
    """Yield the documents of YAML stream `text`, a refused one as a `RefusedDocument`.

    Raises:
        yaml.YAMLError: `text` is not YAML (the stream stops at the document that fails).
    """
    return yaml.load_all(text, Loader=_BoundedLoader)
