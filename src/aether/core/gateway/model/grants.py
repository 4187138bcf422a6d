"""ReferenceGrant: which kinds in which namespaces may reference objects of this namespace."""

from __future__ import annotations

import json

import attrs

from aether.core.events.kube import ObjectMeta
from aether.core.gateway.model.fields import SpecInvalid, items, obj, text


@attrs.frozen(kw_only=True)
class ReferenceGrant:
    """A ReferenceGrant in `meta.namespace`: references from any `from_` entry to any `to` entry are allowed."""

    meta: ObjectMeta
    from_: tuple[tuple[str, str, str], ...]
    """`(group, kind, namespace)` of the referring objects."""
    to: tuple[tuple[str, str, str], ...]
    """`(group, kind, name)` of the referred objects in the grant's namespace; an empty name allows every one."""

    def permits(
        self, *, group: str, kind: str, namespace: str, to_group: str, to_kind: str, to_name: str
    ) -> bool:
        """True when the grant lets a `group/kind` object in `namespace` refer to `to_group/to_kind/to_name` here."""
        return (group, kind, namespace) in self.from_ and any(
            item[:2] == (to_group, to_kind) and item[2] in ("", to_name) for item in self.to
        )


def parse_reference_grant(meta: ObjectMeta, spec_json: str) -> ReferenceGrant | None:
    """Return the grant, or None when the schema refuses it (an invalid grant grants nothing)."""
    try:
        spec = obj(json.loads(spec_json), "spec")
        sources = []
        for index, raw in enumerate(items(spec.get("from"), "spec.from", max_items=16, min_items=1)):
            entry = obj(raw, f"spec.from[{index}]")
            sources.append(
                (
                    text(entry.get("group"), f"spec.from[{index}].group", default=""),
                    text(entry.get("kind"), f"spec.from[{index}].kind", min_length=1),
                    text(entry.get("namespace"), f"spec.from[{index}].namespace", min_length=1),
                )
            )
        targets = []
        for index, raw in enumerate(items(spec.get("to"), "spec.to", max_items=16, min_items=1)):
            entry = obj(raw, f"spec.to[{index}]")
            targets.append(
                (
                    text(entry.get("group"), f"spec.to[{index}].group", default=""),
                    text(entry.get("kind"), f"spec.to[{index}].kind", min_length=1),
                    text(entry.get("name"), f"spec.to[{index}].name", default=""),
                )
            )
        return ReferenceGrant(meta=meta, from_=tuple(sources), to=tuple(targets))
    except (SpecInvalid, ValueError):
        return None
