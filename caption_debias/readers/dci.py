"""DCI (Densely Captioned Images): annotations/<N>-data.json + splits.json + photos/."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

from caption_debias.errors import UserError
from caption_debias.readers.common import caption_problem
from caption_debias.records import Record, Reject, excerpt

NAME = "dci"
CAPTION_MODES = ("short+extra", "extra", "short+extra+masks")


def resolve(path: Path) -> Path:
    """Accept the densely_captioned_images folder or a folder holding it."""
    if not (path / "annotations").is_dir() and (path / "densely_captioned_images" / "annotations").is_dir():
        return path / "densely_captioned_images"
    return path


def _order(p: Path):
    match = re.match(r"(\d+)", p.name)
    return (0, int(match.group(1)), p.name) if match else (1, 0, p.name)


def load_splits(root: Path) -> dict[str, str]:
    path = root / "splits.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text("utf-8-sig"))  # -sig: a leading byte-order mark is skipped
    except (UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"{path}: unreadable splits file ({exc})") from None
    return {str(name): split for split, names in data.items() if isinstance(names, list) for name in names}


def mask_captions(data: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Labels and captions of the usable masks (quality 0/1; 2 = unusable), in idx order."""
    masks = data.get("mask_data") or {}
    labels, captions = [], []

    def idx(item):
        try:
            return int(item[1].get("idx", 0))
        except (TypeError, ValueError, AttributeError):
            return 0

    for _, mask in sorted(masks.items(), key=idx) if isinstance(masks, dict) else []:
        if not isinstance(mask, dict) or mask.get("mask_quality") == 2:
            continue
        if isinstance(mask.get("label"), str) and mask["label"].strip():
            labels.append(mask["label"].strip())
        if isinstance(mask.get("caption"), str) and mask["caption"].strip():
            captions.append(mask["caption"].strip())
    return labels, captions


def assemble(data: dict[str, Any], mode: str) -> Any:
    short, extra = data.get("short_caption"), data.get("extra_caption")
    if mode == "extra":
        return extra
    if short is None and extra is None:
        return None
    for value in (short, extra):
        if value is not None and not isinstance(value, str):
            return value  # reported as a non-string caption
    caption = "\n".join(v.strip() for v in (short, extra) if v and v.strip())
    if mode == "short+extra+masks" and caption:
        caption = "\n".join([caption, *mask_captions(data)[1]])
    return caption


def read(path: Path, name: str, options) -> Iterator[Record | Reject]:
    root = resolve(path)
    mode = getattr(options, "dci_caption", "short+extra")
    splits = load_splits(root)
    for ann in sorted((root / "annotations").glob("*.json"), key=_order):
        location = f"annotations/{ann.name}"
        raw = ann.read_bytes()
        try:
            data = json.loads(raw.decode("utf-8-sig"))
        except UnicodeDecodeError:
            yield Reject(name, location, "undecodable bytes", excerpt(raw))
            continue
        except ValueError as exc:
            yield Reject(name, location, f"broken JSON: {getattr(exc, 'msg', exc)}", excerpt(raw))
            continue
        if not isinstance(data, dict):
            yield Reject(name, location, "not an object", excerpt(data))
            continue
        caption = assemble(data, mode)
        problem = caption_problem(caption)
        if problem == "empty caption" and mode == "extra":
            problem = "empty extra_caption (Long-DCI)"
        if problem is None and not isinstance(data.get("image"), str):
            problem = "missing field: image"
        if problem:
            yield Reject(
                name, location, problem, excerpt({k: data.get(k) for k in ("image", "short_caption", "extra_caption")})
            )
            continue
        labels, _ = mask_captions(data)
        meta = {"annotation": ann.name, "mask_labels": labels, "mask_count": len(data.get("mask_data") or {})}
        for extra in ("height", "width"):
            if extra in data:
                meta[extra] = data[extra]
        yield Record(
            source=NAME,
            input=name,
            location=location,
            source_id=ann.stem,
            image=f"photos/{data['image']}",
            caption=caption,
            split=splits.get(ann.name, options.split),
            meta=meta,
        )
