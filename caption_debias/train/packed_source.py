"""`train` on a packed folder (`caption-debias pack`): rows, token ids and images from the tars.

The loop draws (epoch, row) by index from the same BatchPlan as for a prepared folder, so a
packed run is exactly resumable the same way: row r is the r-th sample in tar order (of the
split asked for), read by random access (pack/folder.py, wids' tar index). The token ids are
KEY.json's, read with the image, so nothing but the manifest is loaded up front; --split and
--group-key read every KEY.json once at start, to choose the rows and make the groups.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from caption_debias.augment import kept_sentences
from caption_debias.errors import UserError
from caption_debias.image_files import decode_rgb
from caption_debias.pack.folder import PackedFolder, is_packed
from caption_debias.train.stored_ids import uses_stored_ids

__all__ = ["PackedImages", "PackedRows", "is_packed", "load_packed"]


class _Column:
    """rows.keys / rows.images: read per row from the folder (messages only ask for a few)."""

    def __init__(self, rows: "PackedRows", what: str):
        self.rows, self.what = rows, what

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, row: int) -> str:
        index = int(self.rows.index[row])
        if self.what == "image":
            return self.rows.folder.name(index) + ".jpg"  # 'NNNNN.tar#SAMPLE.jpg', as FolderImages names tar members
        return self.rows.folder.json(index)["key"]


class _Tokens:
    """rows.tokens: each row's sentence ids and summary flags from its KEY.json (re-tokenized when asked)."""

    def __init__(self, rows: "PackedRows", encode=None):
        self.rows, self.encode = rows, encode

    def sentences(self, row: int) -> list[np.ndarray]:
        doc = self.rows.folder.json(int(self.rows.index[row]))
        keep = doc.get("sentence_keep")  # curate --drop-ungrounded: a dropped sentence is in no text
        if self.encode is not None:
            return [np.asarray(self.encode(s), dtype=np.int64) for s in kept_sentences(doc["sentences"], keep)]
        return [np.asarray(s, dtype=np.int64) for s in kept_sentences(doc["sentence_tokens"], keep)]

    def summary_mask(self, row: int) -> np.ndarray:
        doc = self.rows.folder.json(int(self.rows.index[row]))
        return np.asarray(kept_sentences(doc["summary_mask"], doc.get("sentence_keep")), dtype=bool)


class PackedRows:
    """What the loop needs of its rows (train.data.TrainRows' fields), over a packed folder."""

    def __init__(self, folder: PackedFolder, index: np.ndarray, groups: list[str | None] | None, encode=None):
        self.folder, self.index, self.groups = folder, index, groups
        self.retokenized = encode is not None
        self.keys = _Column(self, "key")
        self.images = _Column(self, "image")
        self.tokens = _Tokens(self, encode)

    def __len__(self) -> int:
        return len(self.index)


class PackedImages:
    """RowImages over a packed folder: 'NNNNN.tar#SAMPLE.jpg' -> the decoded RGB image."""

    def __init__(self, folder: PackedFolder):
        self.folder = folder

    def open(self, key: str, image: str):
        tar_name, _, member = image.partition("#")
        return decode_rgb(self.folder.member_by_name(tar_name, member), image)


def load_packed(
    data: str, tokenizer=None, split: str | None = None, group_key: str | None = None
) -> tuple[PackedRows, PackedImages]:
    folder = PackedFolder(data)
    index = np.arange(len(folder), dtype=np.int64)
    groups: list[str | None] | None = None
    if split is not None or group_key:
        docs = [folder.json(i) for i in range(len(folder))]  # one pass over every KEY.json
        if split is not None:
            index = np.asarray([i for i, d in enumerate(docs) if d.get("split") == split], dtype=np.int64)
        if group_key:
            groups = [_group(docs[i].get("meta"), group_key) for i in index]
    if len(index) == 0:
        raise UserError(f"{data}: no samples to train on" + (f" in split {split!r}" if split else ""))
    encode = None
    if tokenizer is not None and not uses_stored_ids(tokenizer, folder.manifest):
        if not hasattr(tokenizer, "encode"):
            raise UserError("the model's tokenizer cannot encode single sentences; CLIP-BPE style tokenizers only")
        encode = tokenizer.encode  # per sample, as it is read: nothing is held for the whole set
    return PackedRows(folder, index, groups, encode), PackedImages(folder)


def _group(meta: Any, key: str) -> str | None:
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except ValueError:
            return None
    value = meta.get(key) if isinstance(meta, dict) else None
    return None if value is None else str(value)
