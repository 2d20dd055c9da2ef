"""The shard, manifest and reject schemas, read from the data files in `schemas/`.

Those JSON files are the one source of truth: the code builds its Arrow schema from them,
the tests validate output against them and docs/shards.md is generated from them.
"""

from __future__ import annotations

import json
from functools import lru_cache, partial
from importlib import resources
from typing import Any

import pyarrow as pa

_SCALARS = {
    "string": pa.string(),
    "binary": pa.binary(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float16": pa.float16(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
}


@lru_cache(maxsize=None)
def _load(name: str) -> dict[str, Any]:
    return json.loads(resources.files("caption_debias.schemas").joinpath(name).read_text("utf-8"))


# One cached reader, one name per schema file (callers and tests use these names).
shard_spec = partial(_load, "shard.schema.json")
manifest_schema = partial(_load, "manifest.schema.json")
reject_schema = partial(_load, "reject.schema.json")
removed_schema = partial(_load, "removed.schema.json")
ablation_schema = partial(_load, "ablation.schema.json")


SCHEMA_VERSION: int = shard_spec()["schema_version"]


def parse_type(text: str) -> pa.DataType:
    """Parse the small type language of shard.schema.json ('list<struct<a: int32>>')."""
    # Hand-written because pyarrow has no parser for its own type strings; the grammar is tiny.
    text = text.strip()
    if text in _SCALARS:
        return _SCALARS[text]
    if text.startswith("list<") and text.endswith(">"):
        return pa.list_(parse_type(text[5:-1]))
    if text.startswith("struct<") and text.endswith(">"):
        fields = []
        for part in _split_top_level(text[7:-1]):
            name, _, typ = part.partition(":")
            fields.append(pa.field(name.strip(), parse_type(typ)))
        return pa.struct(fields)
    raise ValueError(f"unknown type in shard schema: {text!r}")


def _split_top_level(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


@lru_cache(maxsize=None)
def shard_arrow_schema() -> pa.Schema:
    spec = shard_spec()
    return pa.schema(
        [pa.field(c["name"], parse_type(c["type"]), nullable=c["nullable"]) for c in spec["columns"]],
        metadata={"caption_debias.schema_version": str(spec["schema_version"])},
    )


def shard_table(columns: dict[str, pa.Array | pa.ChunkedArray], num_rows: int) -> pa.Table:
    """A shard table from columns given by name, in the schema's order; a column not given is null.

    A name the schema does not have, or a column of another type, is a ValueError (a bug in
    the caller): shards never depend on the order in which a step lists its columns.
    """
    schema = shard_arrow_schema()
    unknown = sorted(set(columns) - set(schema.names))
    if unknown:
        raise ValueError(f"not shard columns: {', '.join(unknown)}")
    arrays = []
    for field in schema:
        column = columns.get(field.name)
        if column is None:
            column = pa.nulls(num_rows, field.type)
        elif column.type != field.type:
            raise ValueError(f"shard column {field.name}: {column.type}, the schema says {field.type}")
        elif len(column) != num_rows:
            raise ValueError(f"shard column {field.name}: {len(column)} values for {num_rows} rows")
        arrays.append(column if isinstance(column, pa.ChunkedArray) else pa.chunked_array([column], field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def shard_columns() -> list[str]:
    return [c["name"] for c in shard_spec()["columns"]]


def shard_columns_markdown() -> str:
    """The shard column table for docs/shards.md, generated from shard.schema.json."""
    lines = ["| column | type | nullable | description |", "|---|---|---|---|"]
    for c in shard_spec()["columns"]:
        lines.append(f"| `{c['name']}` | `{c['type']}` | {'yes' if c['nullable'] else 'no'} | {c['description']} |")
    return "\n".join(lines)


def _field_rows(properties: dict[str, Any], prefix: str, nested: bool) -> list[str]:
    rows = []
    for name, spec in properties.items():
        if nested and not spec.get("description"):
            continue  # a nested field is listed where its schema says what it is
        text = str(spec.get("description", "")).replace("|", "\\|")
        rows.append(f"| `{prefix}{name}` | {text} |")
        if not nested:
            inner = spec.get("properties") or (spec.get("items") or {}).get("properties") or {}
            rows += _field_rows(inner, f"{prefix}{name}{'[]' if spec.get('type') == 'array' else ''}.", True)
    return rows


def manifest_fields_markdown() -> str:
    """The manifest field table for docs/shards.md, generated from manifest.schema.json: every
    top-level field and the nested fields the schema describes."""
    lines = ["| field | meaning |", "|---|---|"]
    return "\n".join(lines + _field_rows(manifest_schema()["properties"], "", False))


if __name__ == "__main__":  # python -m caption_debias.schema --markdown | --manifest-markdown
    import sys

    tables = {"--markdown": shard_columns_markdown, "--manifest-markdown": manifest_fields_markdown}
    if len(sys.argv) != 2 or sys.argv[1] not in tables:
        sys.exit("usage: python -m caption_debias.schema --markdown | --manifest-markdown")
    print(tables[sys.argv[1]]())
