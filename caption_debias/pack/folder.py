"""Read a packed folder back: its manifest, and any sample by index through wids (random access).

Each tar is opened with wids' MMIndexedTar (mmap plus one scan of its headers) the first time
one of its samples is asked for, its members grouped into samples by wids' group_by_key (the
two pieces whose API is the same in the webdataset releases open_clip_train pins and later
ones); a process keeps up to MAX_OPEN tars open. Sample i is
the i-th sample in tar order, which is the prepared folder's row order minus removed rows.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from caption_debias import storage
from caption_debias.dataset import IncompleteFolder, inside, unfinished_by, unfinished_message
from caption_debias.errors import UserError
from caption_debias.pack.state import KIND, MANIFEST

MAX_OPEN = 256  # open tars per process (one file descriptor and one mmap each)


def is_packed(folder: str | Path) -> bool:
    """True for a folder `caption-debias pack` finished writing."""
    try:
        manifest = json.loads((storage.as_path(folder) / MANIFEST).read_text("utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("kind") == KIND


class PackedFolder:
    def __init__(self, folder: str | Path):
        if storage.is_remote(folder):
            raise UserError(
                f"{folder}: a packed folder is read through wids' memory-mapped tar index, which needs local files; "
                "copy the folder to a local disk (or train on the prepared folder, which may stay remote)"
            )
        self.folder = Path(folder)
        if not is_packed(self.folder):
            command = unfinished_by(self.folder)
            if command is not None:
                raise IncompleteFolder(unfinished_message(self.folder, command))
            raise UserError(f"{self.folder}: not a packed folder (no finished `caption-debias pack` manifest)")
        self.manifest: dict[str, Any] = json.loads((self.folder / MANIFEST).read_text("utf-8"))
        self.tars: list[dict[str, Any]] = self.manifest["tars"]
        for t in self.tars:  # a listed tar never leads out of the folder
            inside(self.folder, t.get("path") if isinstance(t, dict) else t, "tar")
        missing = [t["path"] for t in self.tars if not (self.folder / t["path"]).is_file()]
        if missing:
            raise UserError(f"{self.folder}: {len(missing)} tar(s) of the manifest are missing, first {missing[0]}")
        # a tar's size against the manifest's, one stat each: a truncated copy or another pack's tar is
        # refused before training reads it (a whole-file sha256 would read every image once more)
        for t in self.tars:
            size = (self.folder / t["path"]).stat().st_size
            if "bytes" in t and size != int(t["bytes"]):
                raise UserError(
                    f"{self.folder / t['path']}: {size:,} bytes, the manifest says {int(t['bytes']):,}: "
                    "not the tar pack wrote (copied in part, or from another folder); pack it again"
                )
        self.ends = np.cumsum([int(t["samples"]) for t in self.tars])
        self._tar_number = {t["path"]: i for i, t in enumerate(self.tars)}
        self._open: OrderedDict[int, Any] = OrderedDict()
        self._last_json: tuple[int, dict[str, Any]] | None = None

    def __len__(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    @property
    def tar_paths(self) -> list[Path]:
        return [self.folder / t["path"] for t in self.tars]

    def locate(self, index: int) -> tuple[int, int]:
        """(tar number, sample number inside it) of sample `index`."""
        if not 0 <= index < len(self):
            raise IndexError(index)
        tar = int(np.searchsorted(self.ends, index, side="right"))
        return tar, index - (int(self.ends[tar - 1]) if tar else 0)

    def _tar(self, tar: int) -> "_Tar":
        opened = self._open.get(tar)
        if opened is not None:
            self._open.move_to_end(tar)
            return opened
        info = self.tars[tar]
        opened = _Tar(self.folder / info["path"])
        if len(opened.samples) != int(info["samples"]):
            n = len(opened.samples)
            opened.close()
            raise UserError(
                f"{self.folder / info['path']}: {n} samples, the manifest says {info['samples']}; pack it again"
            )
        self._open[tar] = opened
        if len(self._open) > MAX_OPEN:
            self._open.popitem(last=False)[1].close()
        return opened

    def name(self, index: int) -> str:
        """'NNNNN.tar#SAMPLE' of sample `index`, for messages."""
        tar, inner = self.locate(index)
        return f"{self.tars[tar]['path']}#{self._tar(tar).name(inner)}"

    def member(self, index: int, ext: str) -> bytes:
        """The bytes of one member ('jpg', 'json', 'txt') of sample `index`."""
        tar, inner = self.locate(index)
        data = self._tar(tar).member(inner, ext)
        if data is None:
            raise KeyError(f"{self.name(index)} has no .{ext} member")
        return data

    def member_by_name(self, tar_name: str, member: str) -> bytes:
        """The bytes of member `member` (e.g. '000030012.jpg') of tar `tar_name` (e.g. '00003.tar')."""
        tar = self._tar_number.get(tar_name)
        data = None if tar is None else self._tar(tar).by_name(member)
        if data is None:
            raise FileNotFoundError(f"{member} not in {tar_name} of {self.folder}")
        return data

    def json(self, index: int) -> dict[str, Any]:
        """KEY.json of sample `index` (the last one read is kept: image and text of a sample ask in turn)."""
        if self._last_json is not None and self._last_json[0] == index:
            return self._last_json[1]
        doc = json.loads(self.member(index, "json"))
        self._last_json = (index, doc)
        return doc

    def close(self) -> None:
        while self._open:
            self._open.popitem()[1].close()

    def __getstate__(self):  # DataLoader workers open their own tars
        return {**self.__dict__, "_open": OrderedDict(), "_last_json": None}


class _Tar:
    """One tar: wids' mmap index of its members, grouped into samples."""

    def __init__(self, path: Path):
        from wids.wids import group_by_key
        from wids.wids_mmtar import MMIndexedTar

        self.reader = MMIndexedTar(str(path))
        self.names = [name for name, _, _ in self.reader.by_index]
        self.samples = group_by_key(self.names)
        self.number = {name: i for i, name in enumerate(self.names)}

    def name(self, inner: int) -> str:
        return self.names[self.samples[inner][0]].split(".", 1)[0]

    def member(self, inner: int, ext: str) -> bytes | None:
        for i in self.samples[inner]:
            if self.names[i].endswith("." + ext):
                return bytes(self.reader.get_at_index(i)[1])
        return None

    def by_name(self, member: str) -> bytes | None:
        i = self.number.get(member)
        return None if i is None else bytes(self.reader.get_at_index(i)[1])

    def close(self) -> None:
        close = getattr(self.reader, "close", None)  # webdataset <= 0.2.86's MMIndexedTar has none
        if close is not None:
            close()
