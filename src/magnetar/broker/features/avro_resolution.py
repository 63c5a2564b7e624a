"""Can a reader schema read what a writer schema wrote? Avro's schema resolution as
Pulsar's broker judges it: Pulsar checks Avro-based schemas with Avro's
``SchemaValidatorBuilder`` strategies, whose ``canRead`` builds the resolving decoder's
grammar (``ResolvingGrammarGenerator``) for the writer and reader and refuses the pair
if that grammar holds an error. Its rules, which this module follows:

- records are matched field by field, **whatever their names**: a reader field is read
  from the writer's field of its name (or one of its aliases), else takes its default,
  else the pair fails; writer fields the reader lacks are skipped;
- enums and fixed types must have the same full name (a fixed one the same size too);
  an enum symbol the reader lacks is not an error here (the decoder fails on that value
  only when it meets it);
- arrays by their items, maps by their values;
- numbers promote int -> long -> float -> double, and string and bytes read each other;
- a writer union: each of its branches must be readable; a reader union: the writer's
  type must match one of its branches (a named one by full name, else a record that
  resolves, else the same type, else a promotion).

Avro's Python ``avro.compatibility`` (its Java ``SchemaCompatibility``) is stricter:
it also compares record names, which Pulsar's broker does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import avro.schema

# writer type -> reader types it promotes to (Avro's spec, and the resolving grammar)
_PROMOTIONS = {
    "int": ("long", "float", "double"),
    "long": ("float", "double"),
    "float": ("double",),
    "string": ("bytes",),
    "bytes": ("string",),
}


def resolution_errors(reader: avro.schema.Schema, writer: avro.schema.Schema) -> list[str]:
    """Why ``reader`` cannot read data written with ``writer`` (empty: it can)."""
    errors: list[str] = []
    _resolve(writer, reader, "", errors, set())
    return errors


def _kind(schema: avro.schema.Schema) -> str:
    kind = schema.type
    return "record" if kind == "error" else str(kind)


def _fullname(schema: avro.schema.Schema) -> str | None:
    return getattr(schema, "fullname", None)


def _resolve(
    writer: avro.schema.Schema,
    reader: avro.schema.Schema,
    where: str,
    errors: list[str],
    seen: set[tuple[int, int]],
) -> None:
    import avro.schema

    key = (id(writer), id(reader))
    if key in seen:  # a recursive type: the pair is being resolved further up
        return
    kind, reader_kind = _kind(writer), _kind(reader)
    if isinstance(writer, avro.schema.UnionSchema):
        seen.add(key)
        for index, branch in enumerate(writer.schemas):
            _resolve(branch, reader, f"{where}[union branch {index}]", errors, seen)
        return
    if kind == reader_kind:
        if isinstance(writer, avro.schema.RecordSchema):
            assert isinstance(reader, avro.schema.RecordSchema)
            seen.add(key)
            _resolve_records(writer, reader, where, errors, seen)
        elif kind in ("enum", "fixed"):
            if _fullname(writer) != _fullname(reader):
                errors.append(f"{where or '/'}: {kind} {_fullname(writer)} is read as "
                              f"{_fullname(reader)}")
            elif getattr(writer, "size", None) != getattr(reader, "size", None):
                errors.append(f"{where or '/'}: fixed {_fullname(writer)} has another size")
        elif isinstance(writer, avro.schema.ArraySchema):
            assert isinstance(reader, avro.schema.ArraySchema)
            _resolve(writer.items, reader.items, f"{where}/items", errors, seen)
        elif isinstance(writer, avro.schema.MapSchema):
            assert isinstance(reader, avro.schema.MapSchema)
            _resolve(writer.values, reader.values, f"{where}/values", errors, seen)
        return  # else the same primitive type
    if isinstance(reader, avro.schema.UnionSchema):
        branch = _best_branch(reader, writer, seen)
        if branch is None:
            errors.append(f"{where or '/'}: found {_describe(writer)}, expecting "
                          f"{_describe(reader)}")
        else:
            _resolve(writer, branch, where, errors, seen)
        return
    if reader_kind in _PROMOTIONS.get(kind, ()):
        return
    errors.append(f"{where or '/'}: found {_describe(writer)}, expecting {_describe(reader)}")


def _resolve_records(
    writer: avro.schema.RecordSchema,
    reader: avro.schema.RecordSchema,
    where: str,
    errors: list[str],
    seen: set[tuple[int, int]],
) -> None:
    by_name = {field.name: field for field in writer.fields}
    for field in reader.fields:
        names = [field.name, *(field.props.get("aliases") or ())]
        source = next((by_name[n] for n in names if n in by_name), None)
        if source is not None:
            _resolve(source.type, field.type, f"{where}/{field.name}", errors, seen)
        elif not field.has_default:
            errors.append(f"{where}/{field.name}: the writer has no field {field.name!r} "
                          f"and the reader's has no default")


def _best_branch(
    reader: avro.schema.UnionSchema, writer: avro.schema.Schema, seen: set[tuple[int, int]]
) -> avro.schema.Schema | None:
    """The reader's branch the writer's (non-union) type is read as, Avro's bestBranch."""
    kind = _kind(writer)
    branches: list[avro.schema.Schema] = list(reader.schemas)
    structure_match = None
    for branch in branches:
        if _kind(branch) != kind:
            continue
        if kind not in ("record", "enum", "fixed"):
            return branch
        if _fullname(writer) is not None and _fullname(writer) == _fullname(branch):
            return branch
        # the first record that resolves, or one whose short name is the writer's
        if (kind == "record" and not _errors_within(branch, writer, seen)
                and (structure_match is None or _short(writer) == _short(branch))):
            structure_match = branch
    if structure_match is not None:
        return structure_match
    for branch in branches:
        if _kind(branch) in _PROMOTIONS.get(kind, ()):
            return branch
    return None


def _short(schema: avro.schema.Schema) -> str | None:
    return getattr(schema, "name", None)


def _errors_within(
    reader: avro.schema.Schema, writer: avro.schema.Schema, seen: set[tuple[int, int]]
) -> list[str]:
    """resolution_errors inside a resolution already under way (its pairs in ``seen``)."""
    errors: list[str] = []
    _resolve(writer, reader, "", errors, set(seen))
    return errors


def _describe(schema: avro.schema.Schema) -> str:
    name = _fullname(schema)
    return f"{_kind(schema)} {name}" if name else _kind(schema)
