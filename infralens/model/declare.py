"""Declarations on models: each record field declared once, with its spec, default and doc.

`declared(spec)` on a dataclass field is what the validator, the JSON Schemas, the reference, the
claims check and search read; `record(Model, ...)` turns a declared dataclass into a Record spec."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterator

from infralens.model.schema import (
    INVALID,
    Context,
    Either,
    Field,
    Fields,
    ListOf,
    Record,
    Spec,
)


def declared(spec: Spec, *, required: bool = False, default: Any = None, key: str | None = None, section: str | None = None, indexed: bool = True) -> Any:
    """Declare a model field that a manifest writes: its spec (type, constraints, doc) and how it is used.

    `key` is the manifest key when it differs from the field's name; `section` names the lab page
    section whose search document the field's text goes into; `indexed=False` keeps its text out
    of search. A required field has no default, so it comes first among a model's fields.
    """
    metadata = {"spec": spec, "required": required, "key": key, "section": section, "indexed": indexed}
    if required:
        return dataclasses.field(metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def derived(doc: str) -> Any:
    """Declare a model field that the parser fills in (a mark, the file's name), not a manifest key."""
    return dataclasses.field(metadata={"derived": doc})


def declarations(model: type) -> list[tuple[dataclasses.Field, dict]]:
    """Return the declared (manifest) fields of a model with their metadata, in order."""
    return [(f, dict(f.metadata)) for f in dataclasses.fields(model) if "spec" in f.metadata]


def record(
    model: type,
    name: str,
    *,
    finish: Callable[["Fields", Context], dict | Any] | None = None,
    exclusive: tuple[tuple[str, ...], ...] = (),
    doc: str | None = None,
) -> "Record":
    """Return the validator of a model's mapping, made from the model's declared fields.

    `finish(fields, ctx)` returns the values of the model's other fields (marks, defaults that
    depend on other keys), or INVALID after recording a problem.
    """
    fields: dict[str, Field] = {}
    names: dict[str, str] = {}
    for f, meta in declarations(model):
        key = meta["key"] or f.name
        names[key] = f.name
        default = None if f.default is dataclasses.MISSING else f.default
        fields[key] = Field(meta["spec"], meta["required"], default)

    def build(checked: "Fields", ctx: Context) -> Any:
        extra = finish(checked, ctx) if finish else {}
        if extra is INVALID:
            return INVALID
        values = {names[key]: value for key, value in checked.values.items()}
        return model(**{**values, **extra})

    return Record(name, fields, build, doc or _summary(model.__doc__), exclusive)


def _summary(text: str | None) -> str:
    """A docstring's first paragraph as one line: its wrapped lines joined, never cut at the first."""
    return " ".join((text or "").strip().split("\n\n")[0].split())


def texts(value: Any, wanted: Callable[[Spec, dict], bool]) -> Iterator[tuple[str, dict]]:
    """Yield (text, field metadata) for every string a model value holds in a field whose spec is wanted.

    Walks nested models and lists through their declarations, so a new field is found without
    anyone listing it again.
    """
    for f, meta in declarations(type(value)):
        yield from _leaves(getattr(value, f.name), meta["spec"], meta, wanted)


def _leaves(value: Any, spec: Spec, meta: dict, wanted) -> Iterator[tuple[str, dict]]:
    if value is None:
        return
    if dataclasses.is_dataclass(value):
        for f, inner in declarations(type(value)):
            inner = {**inner, "section": meta.get("section"), "indexed": meta.get("indexed", True) and inner.get("indexed", True)}
            yield from _leaves(getattr(value, f.name), inner["spec"], inner, wanted)
    elif isinstance(value, tuple) and isinstance(spec, ListOf):
        for item in value:
            yield from _leaves(item, spec.item, meta, wanted)
    elif isinstance(value, tuple) and isinstance(spec, Either) and spec.sequence is not None:
        for item in value:
            yield from _leaves(item, spec.sequence, meta, wanted)
    elif isinstance(value, str):
        leaf = spec.scalar if isinstance(spec, Either) else spec
        if leaf is not None and wanted(leaf, meta):
            yield value, meta
