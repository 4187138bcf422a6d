"""Kubernetes manifests on disk: the multi-document YAML files of a directory, read into objects and events.

`ManifestDirectory.read(path)` reads every `*.yaml`, `*.yml` and `*.json` file under `path` (recursively, in path
order); `events()` gives the events that build its objects from nothing, and `changes_since(previous)` the events
that take one reading to the next (what a directory watcher appends when files change).

Two kinds of trouble, kept apart on purpose. Input that cannot be read at all (a file that does not open, YAML
that does not parse) raises `ManifestError`, naming the file and the document index. A document that parses but is
not a Kubernetes object, or an object defined twice, is a `ManifestProblem`: reported, skipped, and everything else
still reads (the same rule as the reducers': one bad object never hides the good ones).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import yaml

from aether.core.events import Event
from aether.core.reduce.kube import canonical_json
from aether.kube.convert import ObjectError, deletion_events, object_events, object_meta
from aether.kube.errors import KubeError
from aether.kube.yaml_documents import RefusedDocument, load_documents

__all__ = [
    "MANIFEST_SUFFIXES",
    "ManifestDirectory",
    "ManifestError",
    "ManifestObject",
    "ManifestProblem",
    "manifest_files",
]

MANIFEST_SUFFIXES = (".json", ".yaml", ".yml")
"""The files a manifest directory reads (JSON is YAML, so one parser serves both)."""


class ManifestError(KubeError, OSError):
    """The manifest `path` cannot be read: document `index` (from 0; -1: the file itself) fails for `reason`."""

    def __init__(self, path: str, *, index: int, reason: str) -> None:
        super().__init__(path, index, reason)
        self.path = path
        self.index = index
        self.reason = reason

    def __str__(self) -> str:
        where = self.path if self.index < 0 else f"{self.path} document {self.index}"
        return f"manifest {where}: {self.reason}"


@attrs.frozen(kw_only=True)
class ManifestProblem:
    """A document that was read but skipped: not a Kubernetes object, or an object already defined."""

    path: str
    """The file, relative to the directory."""
    index: int
    """The document's index in the file, from 0."""
    message: str
    key: str = ""
    """The `<kind>/<namespace>/<name>` of the object the document defines, when its metadata reads (a source keeps
    that object as the log holds it); empty otherwise."""

    def __str__(self) -> str:
        return f"{self.path} document {self.index}: {self.message}"


@attrs.frozen(kw_only=True)
class ManifestObject:
    """One Kubernetes object of a manifest directory, and where it was defined."""

    key: str
    """`<kind>/<namespace>/<name>` (`aether.core.events.ObjectMeta.key`): what readings are compared by."""
    path: str
    """The file, relative to the directory."""
    index: int
    """The document's index in the file, from 0 (items of a `List` share their document's index)."""
    body: Mapping[str, Any] = attrs.field(eq=False)
    """The object as parsed (compared through `text`, which is canonical)."""
    text: str
    """The object as canonical JSON: equal texts, equal objects."""


def manifest_files(directory: Path) -> tuple[Path, ...]:
    """Return the manifest files under `directory`, sorted by relative path (hidden files and directories skipped).

    Raises:
        ManifestError: `directory` does not exist or is not a directory.
    """
    if not directory.is_dir():
        raise ManifestError(str(directory), index=-1, reason="not a directory")
    return tuple(
        sorted(
            (
                path
                for path in directory.rglob("*")
                if path.suffix in MANIFEST_SUFFIXES
                and path.is_file()
                and not any(part.startswith(".") for part in path.relative_to(directory).parts)
            ),
            key=lambda path: path.relative_to(directory).as_posix(),
        )
    )


def _documents(text: str, name: str) -> Iterator[tuple[int, Any]]:
    parsed = 0
    try:
        for document in load_documents(text):
            yield parsed, document
            parsed += 1
    except yaml.YAMLError as exc:  # `parsed` documents went fine: the error is in the next one
        reason = " ".join(f"not YAML ({exc})".split())
        raise ManifestError(name, index=parsed, reason=reason) from exc


def _read_text(path: Path, name: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(name, index=-1, reason=str(exc)) from exc


def _objects(document: Any) -> tuple[Any, ...]:
    """The objects of a document: a `List` holds its `items`; an empty document holds none."""
    if document is None:
        return ()
    if isinstance(document, Mapping) and document.get("kind") == "List":
        items = document.get("items") or ()
        return tuple(items) if isinstance(items, list) else (items,)
    return (document,)


def _checked(body: Any) -> tuple[str, str]:
    """Return the key and canonical text of `body`, converting it once so that every later conversion succeeds.

    Raises:
        ObjectError: `body` is not a Kubernetes object, or a field the mesh reads has the wrong type.
    """
    key = object_meta(body).key
    object_events(body, source="", observed_at=0)
    try:
        text = canonical_json(body)
    except (TypeError, ValueError) as exc:  # YAML values JSON has not: dates, binary, non-string keys
        raise ObjectError("", rule="JSON-compatible", value=str(exc)) from exc
    return key, text


def _key_of(body: Any) -> str:
    """The key of `body` when its kind, name and namespace read (whatever else is wrong with it), else empty."""
    if not isinstance(body, Mapping):
        return ""
    metadata = body.get("metadata")
    names = (
        {field: metadata.get(field) for field in ("name", "namespace")}
        if isinstance(metadata, Mapping)
        else {}
    )
    try:
        return object_meta(
            {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), "metadata": names}
        ).key
    except ObjectError:
        return ""


@attrs.frozen(kw_only=True)
class ManifestDirectory:
    """One reading of a manifest directory: its objects by key, and the documents it skipped."""

    objects: Mapping[str, ManifestObject] = attrs.field(factory=dict)
    """Every object, keyed by `<kind>/<namespace>/<name>`, in key order."""
    problems: tuple[ManifestProblem, ...] = ()
    """The documents skipped (not Kubernetes objects, fields of the wrong type, duplicates), in file order."""

    @classmethod
    def read(cls, directory: Path) -> ManifestDirectory:
        """Read every manifest file under `directory` (see the module docstring).

        Raises:
            ManifestError: A file cannot be read or is not YAML (the error names the file and document index).
        """
        files = manifest_files(directory)
        names = [path.relative_to(directory).as_posix() for path in files]
        return cls.parse({name: _read_text(path, name) for name, path in zip(names, files, strict=True)})

    @classmethod
    def parse(cls, files: Mapping[str, str]) -> ManifestDirectory:
        """Parse manifest texts by file name (a directory's files, in name order, as `read` does; no I/O).

        Raises:
            ManifestError: A text is not YAML (the error names the file and document index).
        """
        objects: dict[str, ManifestObject] = {}
        problems: list[ManifestProblem] = []
        for name in sorted(files):
            for index, document in _documents(files[name], name):
                if isinstance(document, RefusedDocument):  # an alias bomb, say: skipped, the rest still reads
                    message = f"refused: {document.reason}"
                    problems.append(ManifestProblem(path=name, index=index, message=message))
                    continue
                for body in _objects(document):
                    try:
                        key, text = _checked(body)
                    except ObjectError as exc:
                        named = _key_of(body)
                        message = f"{named}: {exc}" if named else str(exc)
                        problems.append(ManifestProblem(path=name, index=index, message=message, key=named))
                        continue
                    known = objects.get(key)
                    if known is not None:
                        message = f"{key} is already defined in {known.path} document {known.index}; skipped"
                        problems.append(ManifestProblem(path=name, index=index, message=message, key=key))
                        continue
                    objects[key] = ManifestObject(key=key, path=name, index=index, body=body, text=text)
        return cls(objects={key: objects[key] for key in sorted(objects)}, problems=tuple(problems))

    def events(self, *, source: str, observed_at: int) -> tuple[Event, ...]:
        """Return the events that build this reading's objects from nothing, in key order."""
        return self.changes_since(ManifestDirectory(), source=source, observed_at=observed_at)

    def changes_since(
        self, previous: ManifestDirectory, *, source: str, observed_at: int
    ) -> tuple[Event, ...]:
        """Return the events that take `previous` to this reading: deletions first, then upserts, each in key order.

        An object whose text did not change gives no event (moving it to another file changes nothing). An object
        that changed into one the mesh does not read (a TLS Secret turned Opaque) is deleted.
        """
        deleted: list[Event] = []
        upserted: list[Event] = []
        for key, gone in previous.objects.items():
            if key not in self.objects:
                deleted.extend(deletion_events(gone.body, source=source, observed_at=observed_at))
        for key, new in self.objects.items():
            old = previous.objects.get(key)
            if old is not None and old.text == new.text:
                continue
            events = object_events(new.body, source=source, observed_at=observed_at, known=old is not None)
            if not events and old is not None:
                events = deletion_events(old.body, source=source, observed_at=observed_at)
            upserted.extend(events)
        return (*deleted, *upserted)
