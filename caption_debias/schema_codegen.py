"""caption_debias/schema_types.py from schemas/*.json: TypedDicts of the manifest, a reject line, a removal line
and a task sidecar, so the type checker knows their keys from the one source of truth.

    python -m caption_debias.schema_codegen > caption_debias/schema_types.py

tests/test_schema_types.py fails when the committed file is not what this writes. Written here rather than
with a JSON-Schema code generator: four small schemas, and the output must be stable byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"
# (schema file, class name): the files whose objects are typed, in the order they are written
TYPED = (
    ("manifest.schema.json", "Manifest"),
    ("reject.schema.json", "RejectLine"),
    ("removed.schema.json", "RemovedLine"),
    ("sidecar.schema.json", "TaskSidecar"),
)
SCALARS = {"integer": "int", "number": "float", "string": "str", "boolean": "bool", "null": "None"}
HEADER = '''"""TypedDicts of the JSON files a folder holds, derived from schemas/*.json. Do not edit: written by
`python -m caption_debias.schema_codegen > caption_debias/schema_types.py` (tests/test_schema_types.py).

Each class lists a schema's properties; the required ones in a base class, the others optional
(`total=False`); keys a schema leaves open (options, detail) are dicts of Any.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict
'''


def _camel(key: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in key.split("_"))


class _Writer:
    """Classes in dependency order (a nested object's class before the class that uses it)."""

    def __init__(self) -> None:
        self.blocks: list[str] = []

    def type_of(self, spec: dict[str, Any], name: str) -> str:
        if "enum" in spec:
            return f"Literal[{', '.join(json.dumps(v) for v in spec['enum'])}]"
        kinds = spec.get("type")
        if isinstance(kinds, list):
            return " | ".join(self.type_of({**spec, "type": k}, name) for k in kinds)
        if kinds == "object":
            if "properties" in spec:
                return self.typed_dict(spec, name)
            extra = spec.get("additionalProperties")
            return f"dict[str, {self.type_of(extra, name) if isinstance(extra, dict) else 'Any'}]"
        if kinds == "array":
            items = spec.get("items")
            return f"list[{self.type_of(items, name + 'Item') if isinstance(items, dict) else 'Any'}]"
        return SCALARS.get(kinds, "Any") if isinstance(kinds, str) else "Any"

    def typed_dict(self, spec: dict[str, Any], name: str) -> str:
        props: dict[str, Any] = spec.get("properties") or {}
        required = [k for k in props if k in set(spec.get("required") or ())]
        optional = [k for k in props if k not in required]
        fields = {k: self.type_of(v, name + _camel(k)) for k, v in props.items()}
        fallback = f"One item of {name[: -len('Item')]}'s list" if name.endswith("Item") else name
        doc = (spec.get("title") or spec.get("description") or fallback).split(". ")[0].rstrip(".")
        if required and optional:
            self._class(f"_{name}Required", "TypedDict", [(k, fields[k]) for k in required], f"{name}'s required keys")
            self._class(name, f"_{name}Required, total=False", [(k, fields[k]) for k in optional], doc)
        else:
            self._class(name, "TypedDict" + (", total=False" if optional else ""), list(fields.items()), doc)
        return name

    def _class(self, name: str, bases: str, fields: list[tuple[str, str]], doc: str) -> None:
        body = [_field_line(key, kind) for key, kind in fields] or ["    pass"]
        self.blocks.append("\n".join([f"class {name}({bases}):", f'    """{doc}."""', "", *body]))


def _field_line(key: str, kind: str) -> str:
    """`    key: kind`, on one line even when long (ruff format leaves it so): a Literal of many values laid
    out one a line would repeat the lists the code keeps them in (curate's REASONS) line for line."""
    line = f"    {key}: {kind}"
    return line if len(line) <= 120 else f"{line}  # fmt: skip"


def source() -> str:
    """The text of caption_debias/schema_types.py."""
    writer = _Writer()
    for file, name in TYPED:
        writer.typed_dict(json.loads((SCHEMAS / file).read_text("utf-8")), name)
    return HEADER + "".join(f"\n\n{block}\n" for block in writer.blocks)


if __name__ == "__main__":
    print(source(), end="")
