"""DOCCI: docci_descriptions.jsonlines; image = images/<image_file>, split from `split`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from caption_debias.readers.common import caption_problem, id_problem
from caption_debias.readers.table import iter_jsonl
from caption_debias.records import Record, Reject, excerpt

NAME = "docci"
FILENAME = "docci_descriptions.jsonlines"


def resolve(path: Path) -> Path:
    """Accept the jsonlines file itself or the folder holding it."""
    return path / FILENAME if path.is_dir() else path


def read(path: Path, name: str, options) -> Iterator[Record | Reject]:
    for item in iter_jsonl(resolve(path), name):
        if isinstance(item, Reject):
            yield item
            if item.fatal:
                return
            continue
        lineno, row = item
        caption: Any = row.get("description")  # any JSON value: caption_problem checks it
        problem = caption_problem(caption)
        image_file = row.get("image_file")
        if problem is None and not isinstance(image_file, str):
            problem = "missing field: image_file"
        problem = problem or id_problem(row.get("example_id"))
        if problem:
            yield Reject(name, lineno, problem, excerpt(row))
            continue
        split = row.get("split") if isinstance(row.get("split"), str) else options.split
        example_id = row.get("example_id")
        meta = {k: v for k, v in row.items() if k not in ("example_id", "image_file", "description", "split")}
        yield Record(
            source=NAME,
            input=name,
            location=lineno,
            source_id=None if example_id is None else str(example_id),
            image=f"images/{image_file}",
            caption=caption,
            split=split,
            meta=meta,
        )
