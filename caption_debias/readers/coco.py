"""COCO captions json: one record per caption annotation, image = the image's `file_name`."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

from caption_debias.readers.common import caption_problem, id_problem
from caption_debias.records import Record, Reject, excerpt

NAME = "coco"


def split_from_name(path: Path) -> str | None:
    match = re.search(r"captions_([a-z]+\d*)", path.name)
    return match.group(1) if match else None


def read(path: Path, name: str, options) -> Iterator[Record | Reject]:
    # Loaded whole: a COCO captions file is one object (images before annotations), at most ~90 MB.
    try:
        data = json.loads(path.read_bytes().decode("utf-8-sig"))  # -sig: a leading byte-order mark is skipped
    except UnicodeDecodeError as exc:
        yield Reject(name, exc.start, "undecodable bytes", "", fatal=True)
        return
    except ValueError as exc:
        yield Reject(
            name, getattr(exc, "pos", 0), f"truncated input: broken JSON ({getattr(exc, 'msg', exc)})", "", fatal=True
        )
        return
    if not isinstance(data, dict) or not isinstance(data.get("annotations"), list):
        yield Reject(name, 0, "not a COCO captions file: no 'annotations' list", "", fatal=True)
        return
    images = {}
    for image in data.get("images") or []:
        if isinstance(image, dict) and "id" in image:
            images[image["id"]] = image
    split = options.split or split_from_name(path)
    for index, ann in enumerate(data["annotations"]):
        if not isinstance(ann, dict):
            yield Reject(name, index, "not an object", excerpt(ann))
            continue
        caption: Any = ann.get("caption")  # any JSON value: caption_problem checks it
        problem = caption_problem(caption)
        image = images.get(ann.get("image_id"))
        if problem is None and image is None:
            problem = f"unknown image_id: {ann.get('image_id')}"
        if problem is None and not isinstance(image.get("file_name"), str):
            problem = "missing field: file_name"
        problem = problem or id_problem(ann.get("id"))
        if problem:
            yield Reject(name, index, problem, excerpt(ann))
            continue
        yield Record(
            source=NAME,
            input=name,
            location=index,
            source_id=None if ann.get("id") is None else str(ann["id"]),
            image=image["file_name"],
            caption=caption,
            split=split,
            meta={"image_id": ann.get("image_id")},
        )
