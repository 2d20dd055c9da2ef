"""Helpers shared by the readers: field checks that turn bad values into reasons."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")


def is_url(value: str) -> bool:
    return bool(_URL.match(value))


def image_problem(image: Any) -> str | None:
    """Why an image reference cannot be used, or None when it is a safe relative path or a URL."""
    if not isinstance(image, str):
        return "missing image" if image is None else "non-string image"
    if not image.strip():
        return "missing image"
    if is_url(image):
        return None
    if image.startswith(("/", "\\")) or _DRIVE.match(image):
        return f"absolute image path: {image}"
    if ".." not in image:  # only a '..' part can climb out (normpath costs more than the rest together)
        return None
    norm = posixpath.normpath(image.replace("\\", "/"))
    if norm == ".." or norm.startswith("../"):
        return f"image path escapes the image root: {image}"
    return None


def caption_problem(caption: Any) -> str | None:
    """Why a caption cannot be used, or None."""
    if caption is None:
        return "missing caption"
    if not isinstance(caption, str):
        return "non-string caption"
    if not caption.strip():
        return "empty caption"
    try:
        caption.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: bytes that were not valid UTF-8
        return "undecodable bytes"
    return None


def input_stem(path: str | Path) -> str:
    p = Path(path)
    return p.stem if p.is_file() else p.name
